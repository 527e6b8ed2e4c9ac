"""``lavo-zoo bench chamfer``: seconds per Chamfer / F-score of two 16,384-point clouds (the point-cloud metric's
speed)."""
from __future__ import annotations

import json
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


@click.command("chamfer", epilog="""\b
Examples:
  OMP_NUM_THREADS=1 lavo-zoo bench chamfer --pairs 3""")
@click.option("--pairs", type=click.IntRange(min=1), default=3, show_default=True, help="Pairs per kind (median).")
def chamfer_cmd(pairs: int) -> None:
    """Seconds per scored pair of 16,384-point clouds (CD-L1, CD-L2, F-score), near and unrelated clouds."""
    import torch

    click.echo(json.dumps({"threads": torch.get_num_threads(), **chamfer_speed(pairs)}))
