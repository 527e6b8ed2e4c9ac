"""Training and evaluation throughput (tokens/s) of LM configs at several context lengths, one sequence per step
(``lavo-zoo throughput``, see :mod:`lavo_zoo.recipes.lm.cli`).

Evaluation: forward with per-token NLL under no_grad. Training: forward, backward and an AdamW step. Each figure
is the median over ``--repeats`` timed steps after one warm-up step (CUDA is synchronised before reading clocks).
"""
from __future__ import annotations

import statistics
import time

import torch

from lavo_zoo.config import resolve_config


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
    """Train and eval tokens/s of ``config`` at context ``length`` (median of ``repeats`` steps)."""
    recipe, cfg = resolve_config(config, ["model.dropout=0.0"])
    cfg = recipe.resolve(cfg)
    torch.manual_seed(0)
    model = recipe.build_model(cfg).to(device)
    batch = torch.randint(0, cfg.model.vocab_size, (1, length + 1), device=device)
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
    return {"config": config, "attention": cfg.model.attention.name, "length": length,
            "train_tokens_per_s": length / train_s, "eval_tokens_per_s": length / eval_s}
