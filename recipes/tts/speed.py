"""Synthesis speed with LAVO vs softmax decoder self-attention, side by side in one run::

    python -m lavo_zoo.recipes.tts.speed [--frames 2000] [--at 500,2000] [--device cpu] [--size paper|tiny]

Builds Transformer-TTS at the paper's size (d 512, 8 heads, FFN 2048, 6 + 6 layers, 4 frames per step; random
weights, the stop token disabled so that every run decodes exactly ``--frames`` frames) once per decoder
self-attention (sdpa; lavo r=64, w=16), runs the recipe's own synthesis loop on one 150-character sentence, and
times every decoder step. Prints per-frame time (median over the 25 steps ending at each ``--at`` frame; the
fastest of ``--repeats`` decodes, against other jobs on a shared machine), overall
frames/s and the real-time factor (synthesis seconds / seconds of audio at 22,050 Hz, hop 256; Griffin-Lim not
included). With LAVO a step's cost does not depend on the frames decoded so far; softmax attends to all of them.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from lavo_zoo.attention import AttentionSpec, SiteAttention
from lavo_zoo.recipes.tts.model import ModelConfig, TransformerTTS, synthesize
from lavo_zoo.recipes.tts.text import text_encoder

SENTENCE = ("Printing, in the only sense with which we are at present concerned, differs from most if not from all "
            "the arts and crafts represented.")[:150]
DECODERS = {"sdpa": {"name": "sdpa"}, "lavo": {"name": "lavo", "num_bases": 64, "window_size": 16}}


def measure(decoder_self: dict, frames: int, at: list[int], size: str, device: str, repeats: int = 1) -> dict:
    if size == "tiny" and decoder_self["name"] == "lavo":  # tts/tiny-*'s LAVO (r = 16, w = 8)
        decoder_self = {**decoder_self, "num_bases": 16, "window_size": 8}
    spec = AttentionSpec.from_config(decoder_self, "decoder_self", "the benchmark")
    cfg = ModelConfig(vocab_size=text_encoder("chars").vocab_size, attention=SiteAttention(decoder_self=spec))
    if size == "tiny":  # tts/tiny-*'s size
        cfg.embed_dim, cfg.num_heads, cfg.ffn_dim, cfg.encoder_layers, cfg.decoder_layers = 64, 2, 128, 2, 2
    torch.manual_seed(0)
    model = TransformerTTS(cfg).to(device).eval()
    tokens = torch.tensor([text_encoder("chars").encode(SENTENCE)], device=device)
    times: list[float] = []
    step = model.decode_step

    def timed(prev, cache):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = step(prev, cache)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        return out

    model.decode_step = timed  # the real loop (recipes.tts.model.synthesize), timed step by step
    synthesize(model, tokens, tokens != 0, max_frames=frames, threshold=2.0)  # warm-up
    r = cfg.frames_per_step
    per_frame, total = {n: float("inf") for n in at}, float("inf")
    for _ in range(repeats):  # the fastest of the repeats: robust to other jobs on a shared machine
        times.clear()
        start = time.perf_counter()
        _, lengths, _ = synthesize(model, tokens, tokens != 0, max_frames=frames, threshold=2.0)
        total = min(total, time.perf_counter() - start)
        for n in at:
            per_frame[n] = min(per_frame[n], statistics.median(times[max(0, n // r - 25):n // r]) / r)
    audio_s = int(lengths[0]) * 256 / 22_050
    return {"per_frame_ms": {n: 1e3 * t for n, t in per_frame.items()}, "frames_per_s": int(lengths[0]) / total,
            "rtf": total / audio_s, "frames": int(lengths[0])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--at", default="500,2000", help="frame counts at which to report the per-frame time")
    parser.add_argument("--size", choices=("paper", "tiny"), default="paper")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="decode this many times; report the fastest")
    args = parser.parse_args(argv)
    at = [int(x) for x in args.at.split(",")]
    print(f"decoder self-attention | ms/frame at {' | at '.join(map(str, at))} | ratio | frames/s | RTF "
          f"({args.size} model, {args.device}, {torch.get_num_threads()} threads)")
    for name, spec in DECODERS.items():
        res = measure(spec, args.frames, at, args.size, args.device, args.repeats)
        ms = [res["per_frame_ms"][n] for n in at]
        print(f"{name:<6} | " + " | ".join(f"{m:.2f}" for m in ms) + f" | {ms[-1] / ms[0]:.2f}x | "
              f"{res['frames_per_s']:.0f} | {res['rtf']:.3f}", flush=True)


if __name__ == "__main__":
    main()
