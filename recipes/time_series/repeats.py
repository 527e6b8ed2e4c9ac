"""Repeated runs (Informer's ``--itr``): train and test one config with N seeds, report mean and spread
(``lavo-zoo repeats``, :mod:`lavo_zoo.recipes.time_series.cli`).

Writes ``OUT/seed-S/`` (each training run), ``OUT/seed-S.test.json`` (its results JSON), ``OUT/repeats.json`` (the
config and overrides, so that the same command continues an interrupted call) and ``OUT/summary.json``:
per metric the mean, the sample standard deviation and the values, plus training seconds per step and per epoch
(from each run's metrics.jsonl: the time of the last training record, logged before that step's validation).
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lavo_zoo.cli import main as cli_main
from lavo_zoo.errors import UsageError, ZooError


def training_time(run_dir: Path, steps_per_epoch: int) -> dict[str, float]:
    """Seconds per optimiser step and per epoch of a finished run, from its metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = [r for r in records if r.get("split") == "train"][-1]
    per_step = last["time"] / last["step"]
    return {"s_per_step": per_step, "s_per_epoch": per_step * steps_per_epoch}


def summarize(results: list[dict[str, Any]], times: list[dict[str, float]]) -> dict[str, Any]:
    """{name: {mean, std, values}} over the runs' test metrics and training times (std 0 for a single run)."""
    columns: dict[str, list[float]] = {}
    for res, t in zip(results, times):
        for name, metric in res["metrics"].items():
            columns.setdefault(name, []).append(metric["value"])
        for name, value in t.items():
            columns.setdefault(name, []).append(value)
    return {name: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0, "values": v}
            for name, v in columns.items()}


MANIFEST = "repeats.json"  # what OUT's runs were trained with: a later call must ask for the same to continue


def _check_manifest(out: Path, wanted: dict[str, Any]) -> None:
    """Write OUT/repeats.json on the first call; refuse to continue in OUT with another config or overrides."""
    path = out / MANIFEST
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wanted, indent=2) + "\n")
        return
    earlier = json.loads(path.read_text())
    diff = [f"{k}: {earlier.get(k)!r} there, {v!r} now" for k, v in wanted.items() if earlier.get(k) != v]
    if diff:
        raise UsageError(f"{out} holds repeats of another run ({'; '.join(diff)}): give another --out, or the same "
                         "config and overrides to continue it")


def run_repeats(config: str, repeats: int, out: Path, overrides: list[str], seed: int = 1,
                max_test_batches: int | None = None, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and test ``config`` with seeds ``seed .. seed + repeats - 1`` under ``out``; writes summary.json.

    Continues an interrupted call: a seed whose results JSON exists is kept, a seed whose run folder exists resumes
    (``--resume auto``), provided OUT was started with the same config, overrides and test-batch limit."""
    from lavo_zoo.config import resolve_config

    recipe, cfg = resolve_config(config, overrides)
    _check_manifest(out, {"config": config, "overrides": overrides, "max_test_batches": max_test_batches})
    steps_per_epoch = len(recipe.build_dataset(cfg, "train")) // cfg.train.batch_size
    results, times = [], []
    for s in range(seed, seed + repeats):
        run_dir, test_json = out / f"seed-{s}", out / f"seed-{s}.test.json"
        if test_json.exists():
            echo(f"seed {s}: finished earlier, kept ({test_json})")
        else:
            resume = ["--resume", "auto"] if run_dir.exists() else []
            echo(f"seed {s}: {'resuming' if resume else 'training'} in {run_dir}")
            if cli_main(["train", config, *overrides, f"train.seed={s}", "--out", str(run_dir), *resume]):
                raise ZooError(f"training seed {s} failed (see above)")
            extra = ["--max-batches", str(max_test_batches)] if max_test_batches else []
            best = run_dir / "checkpoints" / "best"  # absent when validation was switched off
            checkpoint = best if best.is_dir() else run_dir / "checkpoints" / "last"
            partial = out / f"seed-{s}.test.partial.json"  # renamed once whole: a kill leaves no result
            if cli_main(["eval", str(checkpoint), "--split", "test", *extra, "--out", str(partial), "--overwrite"]):
                raise ZooError(f"evaluating seed {s} failed (see above)")
            partial.rename(test_json)
            echo(f"seed {s}: results in {test_json}")
        results.append(json.loads(test_json.read_text()))
        times.append(training_time(run_dir, steps_per_epoch))
    summary = {"config": config, "overrides": overrides, "seeds": list(range(seed, seed + repeats)),
               "steps_per_epoch": steps_per_epoch, "test": summarize(results, times)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
