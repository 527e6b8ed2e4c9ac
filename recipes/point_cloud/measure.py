"""Measurements reported in the point-cloud README (not tests):

    python -m lavo_zoo.recipes.point_cloud.measure chamfer [--pairs 3]          # s per 16,384 x 16,384 pair
    python -m lavo_zoo.recipes.point_cloud.measure step CONFIG [key=value ...]   # s per training step, peak RSS

``step`` runs in its own process per configuration so that the peak resident memory belongs to that one model.
"""
from __future__ import annotations

import argparse
import json
import resource
import time

import torch


def chamfer_speed(pairs: int) -> dict[str, float]:
    """Seconds per scored pair of 16,384-point clouds: a built-in shape against a noisy resample of itself (a
    prediction near its ground truth) and against an unrelated shape."""
    from lavo_zoo.evaluators.chamfer import score_clouds
    from lavo_zoo.recipes.point_cloud.data import make_shape

    out = {}
    for kind in ("near", "unrelated"):
        times = []
        for i in range(pairs):
            gt = torch.from_numpy(make_shape("chair", 16384, seed=i))
            pred = (torch.from_numpy(make_shape("chair", 16384, seed=i + 100)) if kind == "unrelated"
                    else gt[torch.randperm(16384)] + 0.005 * torch.randn(16384, 3))
            start = time.perf_counter()
            score_clouds(pred, gt)
            times.append(time.perf_counter() - start)
        out[f"{kind}_s_per_pair"] = sorted(times)[len(times) // 2]
    return out


def step_time(config: str, overrides: list[str], steps: int) -> dict[str, float]:
    """Median seconds per training step (forward, loss, backward, AdamW) on built-in batches, and peak RSS."""
    from lavo_zoo.config import resolve_config

    recipe, cfg = resolve_config(config, overrides)
    torch.manual_seed(0)
    model = recipe.build_model(cfg)
    ds = recipe.build_dataset(cfg, "train")
    batch = recipe.collate([ds[i % len(ds)] for i in range(cfg.train.batch_size)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss, _ = recipe.training_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return {"s_per_step": sorted(times[1:])[steps // 2], "peak_rss_mib": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, "params": sum(p.numel() for p in model.parameters())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("chamfer")
    c.add_argument("--pairs", type=int, default=3)
    s = sub.add_parser("step")
    s.add_argument("config")
    s.add_argument("overrides", nargs="*")
    s.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    result = chamfer_speed(args.pairs) if args.what == "chamfer" else step_time(args.config, args.overrides, args.steps)
    print(json.dumps({"threads": torch.get_num_threads(), **result}))


if __name__ == "__main__":
    main()
