"""Training and evaluation throughput (tokens/s) of LM configs at several context lengths, one sequence per step.

    python -m lavo_zoo.recipes.lm.throughput lm/tiny-lavo lm/tiny-sdpa --lengths 2048,8192,16384 --json out.json

Evaluation: forward with per-token NLL under no_grad. Training: forward, backward and an AdamW step. Each figure
is the median over ``--repeats`` timed steps after one warm-up step (CUDA is synchronised before reading clocks).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from lavo_zoo.config import resolve_config
from lavo_zoo.recipes.lm.tokenizers import get_tokenizer


def _timed(fn, repeats: int, device: torch.device) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after one warm-up call."""
    times = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(config: str, length: int, repeats: int, device: torch.device) -> dict[str, float | str | int]:
    recipe, cfg = resolve_config(config, ["model.dropout=0.0"])
    torch.manual_seed(0)
    model = recipe.build_model(cfg).to(device)
    batch = torch.randint(0, get_tokenizer(cfg.data.tokenizer).vocab_size, (1, length + 1), device=device)
    x, y = batch[:, :-1], batch[:, 1:]  # [1, T]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x, y).mean().backward()
        optimizer.step()

    def eval_step() -> None:
        with torch.no_grad():
            model(x, y)

    model.train()
    train_s = _timed(train_step, repeats, device)
    model.eval()
    eval_s = _timed(eval_step, repeats, device)
    return {"config": config, "attention": cfg.model.attention, "length": length,
            "train_tokens_per_s": length / train_s, "eval_tokens_per_s": length / eval_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="+", help="LM configs, e.g. lm/tiny-lavo lm/tiny-sdpa")
    parser.add_argument("--lengths", default="2048,8192,16384", help="comma-separated context lengths")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = [measure(c, int(n), args.repeats, torch.device(args.device))
            for c in args.configs for n in args.lengths.split(",")]
    print(f"{'config':<22} {'length':>7} {'train tok/s':>12} {'eval tok/s':>12}")
    for r in rows:
        print(f"{r['config']:<22} {r['length']:>7} {r['train_tokens_per_s']:>12.0f} {r['eval_tokens_per_s']:>12.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
