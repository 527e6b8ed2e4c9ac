"""``lavo-zoo bench tts``: synthesis speed with LAVO vs softmax decoder self-attention, side by side in one run.

Builds Transformer-TTS as a recipe config has it (``--size paper``: ``tts/ljspeech-sdpa`` and
``tts/ljspeech-lavo-causal``, d 512, 8 heads, FFN 2048, 6 + 6 layers, 4 frames per step, LAVO r=64, w=16;
``--size tiny``: ``tts/tiny-sdpa`` and ``tts/tiny-lavo-causal``; random weights, the stop token disabled so that
every run decodes exactly ``--frames`` frames) once per decoder self-attention, runs the recipe's own synthesis
loop on one 150-character sentence, and times every decoder step. Prints per-frame time (median over the 25 steps
ending at each ``--at`` frame; the fastest of ``--repeats`` decodes, against other jobs on a shared machine),
overall frames/s and the real-time factor (synthesis seconds / seconds of audio at 22,050 Hz, hop 256; Griffin-Lim not
included). With LAVO a step's cost does not depend on the frames decoded so far; softmax attends to all of them.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import click

from lavo_zoo.bench.timing import parse_ints, time_runs, write_json, writes_records
from lavo_zoo.options import device_option, json_records_option

SENTENCE = ("Printing, in the only sense with which we are at present concerned, differs from most if not from all "
            "the arts and crafts represented.")[:150]
SIZES = {"paper": "ljspeech", "tiny": "tiny"}  # --size -> the prefix of the recipe's configs of that size
DECODERS = {"sdpa": "sdpa", "lavo": "lavo-causal"}  # decoder self-attention -> the config's suffix


def measure(decoder: str, frames: int, at: list[int], size: str, device: str, repeats: int = 1) -> dict:
    """Per-frame time at each of ``at`` (ms), frames/s and real-time factor of the model of config
    ``tts/<size>-<decoder>`` (:data:`SIZES`, :data:`DECODERS`).

    Args:
        decoder: the decoder's attention, a key of :data:`DECODERS`.
        frames: frames synthesised per run.
        at: the frames whose per-frame time is reported (the median over the 25 steps ending there).
        size: the model size, a key of :data:`SIZES`.
        device: where the model runs.
        repeats: timed decodes (the fastest is reported).
    """
    import torch

    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.recipes.tts.infer import synthesize
    from lavo_zoo.recipes.tts.model import TransformerTTS
    from lavo_zoo.recipes.tts.text import text_encoder

    _, run = resolve_config(f"tts/{SIZES[size]}-{DECODERS[decoder]}")
    cfg = run.model  # the weights are random: the sizes and attentions are the config's, no data is read
    cfg.vocab_size = text_encoder(run.data.text).vocab_size
    torch.manual_seed(0)
    model = TransformerTTS(cfg).to(device).eval()
    tokens = torch.tensor([text_encoder(run.data.text).encode(SENTENCE)], device=device)
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

    model.decode_step = timed  # the real loop (recipes.tts.infer.synthesize), timed step by step
    synthesize(model, tokens, tokens != 0, max_frames=frames, threshold=2.0)  # warm-up
    r = cfg.frames_per_step
    per_frame = {n: float("inf") for n in at}
    lengths = None

    def run() -> None:
        nonlocal lengths
        times.clear()
        _, lengths, _ = synthesize(model, tokens, tokens != 0, max_frames=frames, threshold=2.0)
        for n in at:
            per_frame[n] = min(per_frame[n], statistics.median(times[max(0, n // r - 25):n // r]) / r)

    # the fastest of the repeats: robust to other jobs on a shared machine
    total = min(time_runs(run, 0, repeats, device, memory=False)["times_s"])
    audio_s = int(lengths[0]) * 256 / 22_050
    return {"per_frame_ms": {n: 1e3 * t for n, t in per_frame.items()}, "frames_per_s": int(lengths[0]) / total,
            "rtf": total / audio_s, "frames": int(lengths[0])}


@click.command("tts", epilog="""\b
Examples:
  lavo-zoo bench tts                                       # the paper's model size, 2,000 frames
  lavo-zoo bench tts --size tiny --frames 600 --at 100,600 --repeats 3""")
@click.option("--frames", type=click.IntRange(min=1), default=2000, show_default=True, help="Frames to decode.")
@click.option("--at", default="500,2000", show_default=True, help="Frame counts at which to report the per-frame time.")
@click.option("--size", type=click.Choice(["paper", "tiny"]), default="paper", show_default=True)
@device_option
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Decode this many times; report the fastest.")
@json_records_option
@writes_records
def tts_cmd(frames: int, at: str, size: str, device: str | None, repeats: int, json_file: Path | None) -> None:
    """Per-frame synthesis time, frames/s and real-time factor of Transformer-TTS with LAVO and with softmax
    decoder self-attention (random weights, the stop token off: every run decodes --frames frames)."""
    from lavo_zoo.engine.env import describe_machine, machine, pick_device

    device = str(pick_device(device))
    points = parse_ints(at, "--at")
    host = machine(device)
    click.echo(f"# {describe_machine(host)}")
    click.echo(f"decoder self-attention | ms/frame at {' | at '.join(map(str, points))} | ratio | frames/s | RTF "
               f"({size} model, {device})")
    rows = []
    for name in DECODERS:
        res = measure(name, frames, points, size, device, repeats)
        ms = [res["per_frame_ms"][n] for n in points]
        rows.append({"decoder_self": name, **res})
        click.echo(f"{name:<6} | " + " | ".join(f"{m:.2f}" for m in ms) + f" | {ms[-1] / ms[0]:.2f}x | "
                   f"{res['frames_per_s']:.0f} | {res['rtf']:.3f}")
    if json_file is not None:
        write_json(json_file, {"machine": host, "results": rows})
