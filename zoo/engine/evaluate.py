"""``lavo-zoo eval``: rebuild a model from a checkpoint's own config, run its recipe's evaluator on a split, and
produce the results JSON of docs/architecture.md (also printed as a table)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lavo_zoo.config import to_dict
from lavo_zoo.engine.checkpoint import load_model
from lavo_zoo.engine.env import pick_device, versions


def evaluate_checkpoint(path: Path, overrides: list[str] = (), split: str = "test", device: str | None = None,
                        max_batches: int | None = None, files_dir: Path | None = None,
                        out_file: Path | None = None) -> dict[str, Any]:
    """Results JSON (a dict) for checkpoint directory ``path`` on ``split``. ``files_dir``: where a recipe whose
    eval config has an ``out_dir`` (e.g. tts: synthesised wavs, plots) writes its files, unless set explicitly.
    ``out_file`` (where the results JSON will go): the evaluator's own outputs (e.g. the summaries) are written
    beside it and listed under ``outputs``."""
    start = time.time()
    dev = pick_device(device)
    recipe, cfg, model, meta = load_model(path, dev, list(overrides))
    recipe.check_split(split)
    if files_dir is not None and hasattr(getattr(cfg, "eval", None), "out_dir") and not cfg.eval.out_dir:
        cfg.eval.out_dir = str(files_dir)
    evaluator = recipe.evaluate(model, cfg, split, dev, max_batches=max_batches)
    outputs = evaluator.save_outputs(Path(out_file)) if out_file is not None else []
    results = {
        "recipe": recipe.name,
        "checkpoint": str(Path(path)),
        "checkpoint_sha256": meta["weights_sha256"],
        "split": split,
        "metrics": evaluator.results(),
        "num_samples": int(evaluator.num_samples),
        "config": to_dict(cfg),
        "versions": versions(),
        "device": str(dev),
        "duration_s": round(time.time() - start, 3),
        **({"outputs": [str(p) for p in outputs]} if outputs else {}),
    }
    details = evaluator.details()
    if details:  # non-scalar results (per-class accuracy, confusion matrix): only where an evaluator has them
        results["details"] = details
    return results


def format_table(results: dict[str, Any]) -> str:
    """The metrics of a results dict as an aligned text table."""
    rows = [(name, f"{m['value']:.6g}", "higher" if m["higher_is_better"] else "lower")
            for name, m in results["metrics"].items()]
    w = max([len("metric")] + [len(r[0]) for r in rows])
    header = (f"{results['recipe']} | {results['checkpoint']} | split={results['split']} | "
              f"samples={results['num_samples']} | {results['duration_s']:.1f}s")
    lines = [header,
             f"{'metric':<{w}}  {'value':>12}  better", f"{'-' * w}  {'-' * 12}  ------"]
    lines += [f"{n:<{w}}  {v:>12}  {b}" for n, v, b in rows]
    return "\n".join(lines)
