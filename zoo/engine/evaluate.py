"""``lavo-zoo eval`` and ``lavo-zoo score``: the results JSON of docs/architecture.md (also printed as a table),
from a checkpoint scored on a split (its recipe's evaluator) or from files of saved predictions (an evaluator's
``from_files``)."""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from lavo_zoo.atomic import write_file
from lavo_zoo.config import to_dict
from lavo_zoo.engine.checkpoint_io import NOT_REGULAR, load_model, tree_hashes
from lavo_zoo.engine.env import pick_device, versions
from lavo_zoo.errors import CheckpointError, UsageError, ZooError
from lavo_zoo.evaluators import EVALUATORS
from lavo_zoo.options import check_figure_path, check_writable

MANIFEST = "eval-manifest.json"  # in an evaluation's file folder: what it wrote there, {path: sha256}


def evaluate_checkpoint(path: Path, overrides: list[str] = (), split: str = "test", device: str | None = None,
                        max_batches: int | None = None, files_dir: Path | None = None,
                        out_file: Path | None = None, overwrite: bool = False, command: str | None = None,
                        reference: str | None = None, require_finite: bool = False) -> dict[str, Any]:
    """Results JSON (a dict) for checkpoint directory ``path`` on ``split``.

    ``files_dir``: where a recipe whose eval config has an ``out_dir`` (e.g. tts: synthesised wavs, plots) writes
    its files, unless set explicitly. The evaluation records what it wrote there in ``eval-manifest.json``; an
    existing folder is refused, or with ``overwrite`` the files an earlier evaluation recorded (and which are
    unchanged) are removed first; a folder holding anything else is refused either way, before the work, and
    nothing in it is touched (:func:`clear_files_folder`). ``out_file`` (where the results JSON will go): the
    evaluator's own outputs (e.g. the summaries) are written beside it and listed under ``outputs``; an existing one
    is refused before the work without ``overwrite``. ``command``: the command line that ran this evaluation,
    recorded in the results (a model card cites it). ``reference``: how the user named the checkpoint (an index name,
    an archive), recorded as ``checkpoint`` (default: ``path``). ``require_finite`` (``lavo-zoo eval``): weights that
    hold NaN or infinite values are refused before the work, and metrics that are not finite after it (a
    :class:`~lavo_zoo.errors.ZooError`), rather than reported. The results are pinned (:func:`pin_results`)."""
    start = time.time()
    dev = pick_device(device)
    recipe, cfg, model, meta = load_model(path, dev, list(overrides))
    recipe.check_split(split)
    if require_finite:
        check_finite_weights(model, path)
    if files_dir is not None and hasattr(getattr(cfg, "eval", None), "out_dir") and not cfg.eval.out_dir:
        cfg.eval.out_dir = str(files_dir)
    folder = Path(cfg.eval.out_dir) if getattr(getattr(cfg, "eval", None), "out_dir", None) else None
    if out_file is not None:
        for suffix in getattr(EVALUATORS.get(recipe.evaluator), "output_suffixes", ()):
            check_writable(Path(out_file).with_name(Path(out_file).stem + suffix), overwrite)
    plot = getattr(getattr(cfg, "eval", None), "plot", None)  # a figure the evaluation draws (lm: eval.plot)
    if plot:
        check_writable(Path(plot), overwrite, "eval.plot")
        check_figure_path(Path(plot), "eval.plot")
    if folder is not None:
        clear_files_folder(folder, overwrite)
    try:
        evaluator = recipe.evaluate(model, cfg, split, dev, max_batches=max_batches)
    except BaseException:  # a failure or Ctrl-C: what was written is recorded, so that --overwrite can replace it
        if folder is not None:
            _record_after_failure(folder, command)
        raise
    if folder is not None:
        record_files_folder(folder, command)
    outputs = evaluator.save_outputs(Path(out_file)) if out_file is not None else []
    results = {
        "recipe": recipe.name,
        "checkpoint": reference or str(Path(path)),
        "checkpoint_sha256": meta["weights_sha256"],
        "split": split,
        "overrides": list(overrides),  # what a release's index entry must repeat to reproduce these metrics
        **({"max_batches": max_batches} if max_batches is not None else {}),
        "metrics": evaluator.results(),
        "num_samples": int(evaluator.num_samples),
        "config": to_dict(cfg),
        "versions": versions(),
        "device": str(dev),
        "duration_s": round(time.time() - start, 3),
        **({"command": command} if command else {}),
        **({"outputs": [str(p) for p in outputs]} if outputs else {}),
        **({"files": str(folder)} if folder is not None and folder.is_dir() else {}),
    }
    details = evaluator.details()
    if details:  # non-scalar results (per-class accuracy, confusion matrix): only where an evaluator has them
        results["details"] = details
    if require_finite:
        check_finite_metrics(results, path)
    return pin_results(results)


def check_finite_weights(model: Any, path: Path) -> None:
    """Refuse, before an evaluation, a model whose parameters hold NaN or infinite values (its metrics would be NaN).

    Raises:
        CheckpointError: naming how many parameter tensors are not finite and the first of them.
    """
    import torch

    params = dict(model.named_parameters())
    bad = [name for name, p in params.items() if not bool(torch.isfinite(p).all())]
    if bad:
        raise CheckpointError(f"{path}: {len(bad)} of the model's {len(params)} weight tensors hold NaN or infinite "
                              f"values ({bad[0]}{', ...' if len(bad) > 1 else ''}), so every metric would be NaN; "
                              "score an earlier checkpoint (a run whose loss became non-finite names its last good "
                              "one)")


def check_finite_metrics(results: dict[str, Any], path: Path) -> None:
    """Refuse results whose metrics are not all finite numbers (an evaluation that diverged is not a result).

    Raises:
        ZooError: naming the non-finite metrics (exit 1).
    """
    bad = [f"{name}={metric.get('value')}" for name, metric in results["metrics"].items()
           if not isinstance(metric.get("value"), (int, float)) or not math.isfinite(metric["value"])]
    if bad:
        raise ZooError(f"evaluating {path} on the {results['split']} split gave non-finite metrics ({', '.join(bad)});"
                       " nothing was written. The model's outputs overflow on this data: check the data (values far "
                       "outside the training range) or score an earlier checkpoint")


# a results JSON's own sha256 (of every other key, canonical JSON): a metric edited by hand no longer matches it
PIN = "results_sha256"


def results_digest(results: dict[str, Any]) -> str:
    """The sha256 of a results JSON without its pin (sorted keys, compact separators): what :data:`PIN` holds."""
    body = {k: v for k, v in results.items() if k != PIN}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pin_results(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` with :data:`PIN`, the sha256 of the rest, last (a release refuses results whose pin does not
    match: :func:`check_pin`)."""
    body = {k: v for k, v in results.items() if k != PIN}
    return {**body, PIN: results_digest(body)}


def check_pin(results: dict[str, Any]) -> str | None:
    """Why ``results`` cannot be trusted to be what an evaluation wrote (no pin, or a pin the content does not match:
    a value edited since), or None when its pin matches."""
    if PIN not in results:
        return (f"records no {PIN} (the sha256 lavo-zoo eval writes over its results), so nothing shows that its "
                "metrics are what an evaluation measured")
    if results[PIN] != results_digest(results):
        return (f"has changed since lavo-zoo eval wrote it: its content no longer matches its {PIN} (a metric or "
                "another value was edited)")
    return None


def files_folder(results_file: Path) -> Path:
    """The folder beside a results file where an evaluation's files go: ``results.json`` -> ``results/`` (a name
    without a suffix: ``results`` -> ``results.files/``)."""
    results_file = Path(results_file)
    return results_file.with_suffix("") if results_file.suffix else results_file.with_name(results_file.name + ".files")


def _present_files(folder: Path) -> tuple[dict[str, str], list[str]]:
    """({relative path: sha256} of the regular files under ``folder`` but its manifest, [the other entries: links,
    special files]), without following links."""
    found = tree_hashes(folder)
    found.pop(MANIFEST, None)
    others = [rel for rel, digest in found.items() if digest == NOT_REGULAR]
    return {rel: digest for rel, digest in found.items() if digest != NOT_REGULAR}, others


def _recorded(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of what an earlier evaluation wrote into ``folder`` (empty without a manifest)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = data["files"]
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def clear_files_folder(folder: Path, overwrite: bool) -> None:
    """Make ``folder`` ready for an evaluation's files: nothing to do when it is absent or holds no file; refused
    when it holds a file that no earlier evaluation recorded writing (or one changed since: the user's own notes or
    wavs, a link), naming them, and nothing is touched; without ``overwrite`` refused when it holds an earlier
    evaluation's files; with ``overwrite`` exactly those files (and the folders they emptied) are removed."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_symlink() or not folder.is_dir():
        raise UsageError(f"{folder}, where this evaluation would write its files, is "
                         f"{'a link' if folder.is_symlink() else 'a file'}; give another --out (or eval.out_dir)")
    present, others = _present_files(folder)
    if not present and not others:
        (folder / MANIFEST).unlink(missing_ok=True)
        return
    recorded = _recorded(folder)
    foreign = sorted(others + [rel for rel, digest in present.items() if recorded.get(rel) != digest])
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise UsageError(f"{folder} holds files that no evaluation recorded writing there ({shown}); an evaluation "
                         f"replaces only the files an earlier one listed in its {MANIFEST}, and touches nothing else. "
                         "Nothing was changed: give another --out (or eval.out_dir), or move those files away")
    if not overwrite:
        raise UsageError(f"{folder} holds the {len(present)} files of an earlier evaluation (listed in its "
                         f"{MANIFEST}); give another --out (or eval.out_dir), or add --overwrite to replace them")
    for rel in present:
        p = folder / rel
        p.unlink()
        parent = p.parent
        while parent != folder and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    (folder / MANIFEST).unlink(missing_ok=True)


def _record_after_failure(folder: Path, command: str | None) -> None:
    """Record what a failed evaluation wrote, without hiding its failure when that fails too (a full disk)."""
    try:
        record_files_folder(folder, command)
    except (OSError, ZooError) as e:
        print(f"warning: the files this evaluation wrote in {folder} could not be recorded ({e}); remove them "
              "yourself before another evaluation writes there", file=sys.stderr)


def record_files_folder(folder: Path, command: str | None = None) -> None:
    """Write ``folder``'s manifest: every file now in it, which this evaluation wrote (it started without any)."""
    present, _ = _present_files(Path(folder)) if Path(folder).is_dir() else ({}, [])
    if not present:
        return
    manifest = {"written_by": "lavo-zoo eval", **({"command": command} if command else {}),
                "files": dict(sorted(present.items()))}
    write_file(Path(folder) / MANIFEST, json.dumps(manifest, indent=2) + "\n", overwrite=True)


def score_files(metric: str, pred: Path, ref: Path | None, command: str | None = None) -> dict[str, Any]:
    """Results JSON (a dict, ``eval``'s schema) of the predictions in ``pred`` against ``ref``, scored by evaluator
    ``metric`` through its ``from_files`` hook; ``command``: the command line, recorded in the results."""
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
