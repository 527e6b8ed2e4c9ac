"""``lavo-zoo bench chamfer``: seconds per Chamfer / F-score of two 16,384-point clouds (the point-cloud metric's
speed); ``lavo-zoo bench step``: seconds per training step and peak resident memory of any recipe config, in a
fresh process so that the peak belongs to that one model.
"""
from __future__ import annotations

import json
import resource
from typing import Any

import click

from lavo_zoo.bench.timing import time_runs


def chamfer_speed(pairs: int) -> dict[str, float]:
    """Seconds per scored pair of 16,384-point clouds: a built-in shape against a noisy resample of itself (a
    prediction near its ground truth) and against an unrelated shape."""
    import torch

    from lavo_zoo.evaluators.chamfer import score_clouds
    from lavo_zoo.recipes.point_cloud.builtin import make_shape

    out = {}
    for kind in ("near", "unrelated"):
        clouds = []
        for i in range(pairs):
            gt = torch.from_numpy(make_shape("chair", 16384, seed=i))
            pred = (torch.from_numpy(make_shape("chair", 16384, seed=i + 100)) if kind == "unrelated"
                    else gt[torch.randperm(16384)] + 0.005 * torch.randn(16384, 3))
            clouds.append((pred, gt))
        out[f"{kind}_s_per_pair"] = _median_seconds_each(score_clouds, clouds)
    return out


def _median_seconds_each(score: Any, pairs: list[tuple[Any, Any]]) -> float:
    """The median time of ``score(pred, gt)`` over ``pairs``, each scored once."""
    left = iter(pairs)
    times = time_runs(lambda: score(*next(left)), 0, len(pairs), "cpu", memory=False)["times_s"]
    return sorted(times)[len(times) // 2]


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


@click.command("chamfer", epilog="""\b
Examples:
  OMP_NUM_THREADS=1 lavo-zoo bench chamfer --pairs 3""")
@click.option("--pairs", type=click.IntRange(min=1), default=3, show_default=True, help="Pairs per kind (median).")
def chamfer_cmd(pairs: int) -> None:
    """Seconds per scored pair of 16,384-point clouds (CD-L1, CD-L2, F-score), near and unrelated clouds."""
    import torch

    click.echo(json.dumps({"threads": torch.get_num_threads(), **chamfer_speed(pairs)}))


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
