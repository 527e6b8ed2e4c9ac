"""``lavo-zoo eval`` and ``lavo-zoo score``: the results JSON of docs/architecture.md (also printed as a table),
from a checkpoint scored on a split (its recipe's evaluator) or from files of saved predictions (an evaluator's
``from_files``)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from lavo_zoo.config import to_dict
from lavo_zoo.engine.checkpoint_io import load_model
from lavo_zoo.engine.env import pick_device, versions


def evaluate_checkpoint(path: Path, overrides: list[str] = (), split: str = "test", device: str | None = None,
                        max_batches: int | None = None, files_dir: Path | None = None,
                        out_file: Path | None = None, overwrite: bool = False, command: str | None = None
                        ) -> dict[str, Any]:
    """Results JSON (a dict) for checkpoint directory ``path`` on ``split``. ``files_dir``: where a recipe whose
    eval config has an ``out_dir`` (e.g. tts: synthesised wavs, plots) writes its files, unless set explicitly; it
    holds this evaluation's files only (an existing one is refused, or emptied first with ``overwrite``).
    ``out_file`` (where the results JSON will go): the evaluator's own outputs (e.g. the summaries) are written
    beside it and listed under ``outputs``. ``command``: the command line that ran this evaluation, recorded in the
    results (a model card cites it)."""
    start = time.time()
    dev = pick_device(device)
    recipe, cfg, model, meta = load_model(path, dev, list(overrides))
    recipe.check_split(split)
    if files_dir is not None and hasattr(getattr(cfg, "eval", None), "out_dir") and not cfg.eval.out_dir:
        cfg.eval.out_dir = str(files_dir)
    if getattr(getattr(cfg, "eval", None), "out_dir", None):
        _fresh_folder(Path(cfg.eval.out_dir), overwrite)
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
        **({"command": command} if command else {}),
        **({"outputs": [str(p) for p in outputs]} if outputs else {}),
    }
    details = evaluator.details()
    if details:  # non-scalar results (per-class accuracy, confusion matrix): only where an evaluator has them
        results["details"] = details
    return results


def _fresh_folder(folder: Path, overwrite: bool) -> None:
    """Make sure an evaluation's file folder holds that evaluation's files only."""
    if folder.exists() and any(folder.iterdir()):
        if not overwrite:
            from lavo_zoo.errors import UsageError

            raise UsageError(f"{folder} already holds files of an earlier evaluation; give another --out (or "
                             "eval.out_dir), or add --overwrite to replace them")
        shutil.rmtree(folder)


def score_files(metric: str, pred: Path, ref: Path | None, command: str | None = None) -> dict[str, Any]:
    """Results JSON (a dict, ``eval``'s schema) of the predictions in ``pred`` against ``ref``, scored by evaluator
    ``metric`` through its ``from_files`` hook; ``command``: the command line, recorded in the results."""
    from lavo_zoo.evaluators import EVALUATORS

    start = time.time()
    evaluator = EVALUATORS.get(metric).from_files(Path(pred), None if ref is None else Path(ref))
    results = {"metric": metric, "pred": str(pred), "ref": None if ref is None else str(ref),
               "metrics": evaluator.results(), "num_samples": int(evaluator.num_samples), "versions": versions(),
               "duration_s": round(time.time() - start, 3), **({"command": command} if command else {})}
    details = evaluator.details()
    if details:
        results["details"] = details
    return results


def format_table(results: dict[str, Any]) -> str:
    """The metrics of a results dict (from ``eval`` or ``score``) as an aligned text table."""
    rows = [(name, f"{m['value']:.6g}", "higher" if m["higher_is_better"] else "lower")
            for name, m in results["metrics"].items()]
    w = max([len("metric")] + [len(r[0]) for r in rows])
    source = (f"{results['recipe']} | {results['checkpoint']} | split={results['split']}" if "recipe" in results
              else f"{results['metric']} | {results['pred']}" + (f" vs {results['ref']}" if results["ref"] else ""))
    header = f"{source} | samples={results['num_samples']} | {results['duration_s']:.1f}s"
    lines = [header,
             f"{'metric':<{w}}  {'value':>12}  better", f"{'-' * w}  {'-' * 12}  ------"]
    lines += [f"{n:<{w}}  {v:>12}  {b}" for n, v, b in rows]
    note = (results.get("details") or {}).get("note")
    if note:
        lines.append(f"note: {note}")
    return "\n".join(lines)
