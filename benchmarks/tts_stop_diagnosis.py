"""Why a text-to-speech model stops where it does: the stop token teacher-forced against the same model decoding.

For each checkpoint, over the utterances of a split:
- ``teacher-forced stop``: where the stop probability first exceeds the threshold when the decoder is fed the real
  previous frames, as a fraction of the utterance's length (1.00: at the last frame, as trained);
- ``synthesised length``: the length greedy synthesis reaches (its own frames fed back, stop token as in ``eval``),
  as a fraction of the reference's length;
- ``teacher-forced L1``: the post-net frames' mean absolute error, teacher-forced (normalised features).

A model whose stop is right teacher-forced but whose synthesis ends early stops because of what it feeds itself
(exposure to its own frames), not because of the stop-token loss. Medians and the lowest value over utterances.

Usage: ``python benchmarks/tts_stop_diagnosis.py RUN_OR_CHECKPOINT... [--split test] [--max-utterances N]``
"""
from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

import lavo_zoo
from lavo_zoo.recipes.tts.infer import synthesize
from lavo_zoo.recipes.tts.model import group_frames, shift_right


def diagnose(checkpoint: str, split: str = "test", max_utterances: int = 0) -> dict[str, Any]:
    """:func:`measure` for a saved run or checkpoint."""
    predictor = lavo_zoo.load(checkpoint, device="cpu")
    return measure(predictor.model, predictor.cfg, predictor.recipe, split, max_utterances)


def measure(model: torch.nn.Module, cfg: Any, recipe: Any, split: str = "test", max_utterances: int = 0
            ) -> dict[str, Any]:
    """Per-utterance fractions (lists) for a model in eval mode: ``teacher_forced_stop``, ``synthesised_length``,
    and the mean ``teacher_forced_l1``."""
    r, threshold = model.cfg.frames_per_step, cfg.eval.stop_threshold
    stops, lengths, l1 = [], [], []
    torch.manual_seed(0)  # the decoder prenet's dropout stays on in synthesis (Tacotron 2)
    with torch.no_grad():
        for batch in recipe.eval_loader(cfg, split):
            tokens, mask = batch["tokens"], batch["tokens"] != 0
            target, steps = group_frames(batch["mel"], batch["mel_lengths"], r)  # [B, T / r, r * n_mels], [B]
            real = torch.arange(target.shape[1])[None] < steps[:, None]  # [B, T / r]
            _, post, stop = model(tokens, mask, shift_right(target), real)
            _, synthesised, _ = synthesize(model, tokens, mask, cfg.eval.max_frames, threshold)  # [B] frames
            for i in range(len(tokens)):
                n = int(steps[i])
                fired = (torch.sigmoid(stop[i, :n].float()) > threshold).nonzero()
                stops.append((int(fired[0]) + 1 if len(fired) else n + 1) / n)
                lengths.append(int(synthesised[i]) / int(batch["mel_lengths"][i]))
                l1.append(float((post[i, :n] - target[i, :n]).abs().mean()))
            if max_utterances and len(stops) >= max_utterances:
                break
    return {"teacher_forced_stop": stops, "synthesised_length": lengths, "teacher_forced_l1": statistics.fmean(l1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="run folders or checkpoint folders")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-utterances", type=int, default=0, help="0: the whole split")
    args = parser.parse_args()
    print(f"{'checkpoint':<48} {'teacher-forced stop':>22} {'synthesised length':>22} {'teacher-forced L1':>18}")
    for path in args.checkpoints:
        d = diagnose(path, args.split, args.max_utterances)
        cells = [f"{statistics.median(d[k]):.2f} (min {min(d[k]):.2f})" for k in ("teacher_forced_stop",
                                                                                 "synthesised_length")]
        print(f"{path[-48:]:<48} {cells[0]:>22} {cells[1]:>22} {d['teacher_forced_l1']:>18.3f}")


if __name__ == "__main__":
    main()
