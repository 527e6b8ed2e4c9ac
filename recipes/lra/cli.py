"""The LRA recipe's command: ``lavo-zoo score accuracy`` (accuracy, per-class accuracy and the confusion matrix of
predicted class ids against true ones, no model needed)."""
from __future__ import annotations

import json
from pathlib import Path

import click


def read_class_ids(path: Path):
    """Class ids [N] (int64 numpy) from a .npy file (ids [N], or scores [N, C] whose argmax is the id) or a text
    file with one integer per line (blank lines skipped)."""
    import numpy as np

    from lavo_zoo.errors import DataError

    if not path.is_file():
        raise DataError(f"{path} does not exist (or is not a file)")
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as e:
            raise DataError(f"{path}: not a readable .npy array ({e})") from None
        if array.ndim == 2:
            array = array.argmax(-1)
        if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or np.all(array == np.round(array))):
            raise DataError(f"{path}: expected class ids [N] or scores [N, C], got shape {list(array.shape)} of "
                            f"{array.dtype}")
        return array.astype(np.int64)
    ids = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            ids.append(int(line.strip()))
        except ValueError:
            raise DataError(f"{path}, line {number}: '{line.strip()[:40]}' is not an integer class id") from None
    return np.asarray(ids, dtype=np.int64)


@click.command("accuracy", epilog="""\b
Examples:
  lavo-zoo score accuracy --pred predictions.txt --true labels.txt
  lavo-zoo score accuracy --pred logits.npy --true labels.npy --out accuracy.json""")
@click.option("--pred", "pred_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Predicted class ids: one integer per line, or .npy ids [N] / scores [N, C] (argmax).")
@click.option("--true", "true_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="True class ids, the same count as --pred.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the metrics, per-class accuracy and confusion matrix as JSON.")
def score_accuracy(pred_file: Path, true_file: Path, out_file: Path | None) -> None:
    """Accuracy of predicted class ids against the true ones (LRA's metric), with per-class accuracy and the
    confusion matrix (rows = true class)."""
    import torch

    from lavo_zoo.errors import DataError
    from lavo_zoo.evaluators import build_evaluator

    pred, true = read_class_ids(pred_file), read_class_ids(true_file)
    if pred.shape != true.shape or not len(true):
        raise DataError(f"--pred {pred_file} holds {len(pred)} class ids and --true {true_file} {len(true)}; they "
                        "must hold the same number, at least one")
    evaluator = build_evaluator("accuracy")
    try:
        evaluator.update(torch.from_numpy(pred), torch.from_numpy(true))
    except ValueError as e:  # negative ids
        raise DataError(f"{pred_file} / {true_file}: {e}") from None
    results, details = evaluator.results(), evaluator.details()
    click.echo(f"accuracy {results['accuracy']['value']:.6g} ({evaluator.num_samples} examples)")
    for c, acc in details["per_class_accuracy"].items():
        click.echo(f"  class {c}: " + ("no examples" if acc is None else f"{acc:.4g}"))
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps({"metrics": results, "num_samples": evaluator.num_samples,
                                        "details": details}, indent=2) + "\n")
        click.echo(f"wrote {out_file}")
