"""``lavo-zoo bench step``: seconds per training step and peak resident memory of any recipe config, in a fresh
process so that the peak belongs to that one model.
"""
from __future__ import annotations

import json
import resource
from typing import Any

import click

from lavo_zoo.bench.timing import time_runs


def step_time(spec: dict[str, Any]) -> dict[str, float]:
    """Median seconds per training step (forward, loss, backward, AdamW) of ``spec["config"]`` with
    ``spec["overrides"]`` on built-in batches, and the process's peak RSS (run it in a fresh process)."""
    import torch

    from lavo_zoo.engine.configs import resolve_config

    steps = spec["steps"]
    recipe, cfg = resolve_config(spec["config"], spec["overrides"])
    cfg = recipe.resolve(cfg)
    torch.manual_seed(0)
    model = recipe.build_model(cfg)
    ds = recipe.build_dataset(cfg, "train")
    batch = recipe.collate([ds[i % len(ds)] for i in range(cfg.train.batch_size)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)

    def train_step() -> None:
        loss, _ = recipe.training_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    times = time_runs(train_step, 1, steps, "cpu", memory=False)["times_s"]  # the process's own peak RSS below
    return {"s_per_step": sorted(times)[steps // 2], "peak_rss_mib": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads()}


@click.command("step", epilog="""\b
Examples:
  lavo-zoo bench step point_cloud/tiny-lavo
  lavo-zoo bench step lm/tiny-lavo data.block_size=1024 --steps 5""")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True, help="Timed steps (median).")
def step_cmd(config: str, overrides: tuple[str, ...], steps: int) -> None:
    """Median seconds per training step (forward, loss, backward, AdamW) of CONFIG on its built-in data, and the
    peak resident memory of a fresh process that runs only that."""
    from lavo_zoo.bench.timing import run_fresh
    from lavo_zoo.errors import ZooError

    result = run_fresh("lavo_zoo.bench.step:step_time", {"config": config, "overrides": list(overrides),
                                                         "steps": steps})
    if "error" in result:
        raise ZooError(result["error"])
    click.echo(json.dumps(result))
