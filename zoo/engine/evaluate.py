"""``lavo-zoo eval`` and ``lavo-zoo score``: the results JSON of docs/architecture.md (also printed as a table),
from a checkpoint scored on a split (its recipe's evaluator) or from files of saved predictions (an evaluator's
``from_files``)."""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

from lavo_zoo.config import to_dict
from lavo_zoo.engine.checkpoint_io import load_model
from lavo_zoo.engine.env import pick_device, versions
from lavo_zoo.engine.recipe import EvalPlaces
from lavo_zoo.errors import CheckpointError, ZooError
from lavo_zoo.evaluators import EVALUATORS
from lavo_zoo.outputs import EVAL_FILES, FIGURE, Outputs

MANIFEST = EVAL_FILES.manifest  # in an evaluation's file folder: what it wrote there, {path: sha256}


def evaluate_checkpoint(path: Path, overrides: list[str] = (), split: str = "test", device: str | None = None,
                        max_batches: int | None = None, files_dir: Path | None = None,
                        out_file: Path | None = None, overwrite: bool = False, command: str | None = None,
                        reference: str | None = None, require_finite: bool = False,
                        outputs: Outputs | None = None) -> dict[str, Any]:
    """Results JSON (a dict) for checkpoint directory ``path`` on ``split``.

    What the evaluation writes goes through the output policy (:mod:`lavo_zoo.outputs`), claimed before the work and
    put in place only once it has succeeded (a failure, a full disk or Ctrl-C leaves none of it): ``files_dir``,
    where a recipe whose eval config has an ``out_dir`` (tts: synthesised wavs, plots) writes its files unless set
    explicitly, listed in its ``eval-manifest.json`` (``overwrite`` replaces a folder holding only an earlier
    evaluation's files, unchanged; a folder holding anything else is refused either way); the evaluator's own
    outputs (the summaries) beside ``out_file`` (where the results JSON will go, listed under ``outputs``); a figure
    the evaluation draws (``eval.plot``).

    Args:
        path: the checkpoint directory.
        overrides: evaluation and data settings over the checkpoint's config (``key=value``).
        split: the split to score.
        device: where to run (default: the GPU when there is one).
        max_batches: score only the first batches.
        files_dir: the folder for an evaluation's files (where ``eval.out_dir`` is unset).
        out_file: the results JSON the caller writes (the evaluator's outputs go beside it).
        overwrite: earlier outputs of an evaluation may be replaced.
        command: the command line that ran this evaluation, recorded in the results (a model card cites it).
        reference: how the user named the checkpoint (an index name, an archive), recorded as ``checkpoint``
            (default: ``path``).
        require_finite: weights that hold NaN or infinite values are refused before the work, and metrics that are
            not finite after it (a :class:`~lavo_zoo.errors.ZooError`), rather than reported (``lavo-zoo eval``).
        outputs: the claim of the command's outputs, which has claimed ``out_file`` (:meth:`Outputs.file` returned
            the path it is written to); default: one of its own for what the evaluation writes.

    Returns:
        The results, pinned (:func:`pin_results`).
    """
    if outputs is None:
        with Outputs("eval", overwrite, command_line=command) as own:
            return evaluate_checkpoint(path, overrides, split, device, max_batches, files_dir, out_file, overwrite,
                                       command, reference, require_finite, own)
    start = time.time()
    dev = pick_device(device)
    recipe, cfg, model, meta = load_model(path, dev, list(overrides))
    recipe.check_split(split)
    if require_finite:
        check_finite_weights(model, path)
    places, folder = claim_places(recipe, cfg, outputs, files_dir, out_file)
    evaluator = recipe.evaluate(model, cfg, split, dev, max_batches=max_batches, places=places)
    staged_results = outputs.staged(Path(out_file)) or Path(out_file) if out_file is not None else None
    written = evaluator.save_outputs(staged_results) if staged_results is not None else []
    wrote_files = folder is not None and any(p.is_file() for p in outputs.staged(folder).rglob("*"))
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
        **({"outputs": [str(outputs.final(p)) for p in written]} if written else {}),
        **({"files": str(folder)} if wrote_files else {}),
    }
    details = evaluator.details()
    if details:  # non-scalar results (per-class accuracy, confusion matrix): only where an evaluator has them
        results["details"] = details
    if require_finite:
        check_finite_metrics(results, path)
    return pin_results(results)


def claim_places(recipe: Any, cfg: Any, outputs: Outputs, files_dir: Path | None,
                 out_file: Path | None) -> tuple[EvalPlaces, Path | None]:
    """Claim, through the output policy, every place an evaluation of ``cfg`` writes, before the work.

    Args:
        recipe: the checkpoint's recipe (its evaluator names the outputs it saves beside the results).
        cfg: the checkpoint's config: ``eval.out_dir`` and ``eval.plot`` name the files folder and the figure;
            read, never changed (the results record it as the user gave it).
        outputs: the command's claim.
        files_dir: the files folder where ``eval.out_dir`` is unset (``eval --out``'s ``results/``).
        out_file: where the results JSON goes: the evaluator's outputs are claimed beside it.

    Returns:
        (the staged places to pass to :meth:`Recipe.evaluate`, the files folder's final path or None).
    """
    named = EvalPlaces.from_config(cfg)
    has_folder = hasattr(getattr(cfg, "eval", None), "out_dir")  # a recipe whose evaluation writes files
    folder = named.files or (files_dir if has_folder else None)
    if out_file is not None:
        for suffix in getattr(EVALUATORS.get(recipe.evaluator), "output_suffixes", ()):
            outputs.file(Path(out_file).with_name(Path(out_file).stem + suffix), None)  # named by the evaluator
    plot = outputs.file(named.plot, FIGURE, "eval.plot") if named.plot else None
    files = (outputs.folder(folder, EVAL_FILES, "eval.out_dir" if named.files else "--out")
             if folder is not None else None)
    return EvalPlaces(files=files, plot=plot), folder


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


def score_files(metric: str, pred: Path, ref: Path | None, command: str | None = None) -> dict[str, Any]:
    """Results JSON (a dict, ``eval``'s schema) of the predictions in ``pred`` against ``ref``, scored by evaluator
    ``metric`` through its ``from_files`` hook.

    Args:
        metric: the evaluator's registry name.
        pred: the predictions file.
        ref: the references file, or None where the predictions hold them.
        command: the command line, recorded in the results, or None.
    """
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
