"""Classification accuracy (LRA): the fraction of examples whose argmax class equals the label, as Skyformer's and
LRA's ``accuracy``; per-class accuracy and the confusion matrix go to the results JSON's ``details``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, check_finite, input_path
from lavo_zoo.formats.text import read_lines

# the confusion matrix is C x C: class ids beyond this are refused rather than allocated
MAX_CLASSES = 10_000


def _check_id_range(ids, path: Path, unit: str = "row") -> None:
    """A :class:`DataError` naming the first ``unit`` whose class id is negative or >= MAX_CLASSES."""
    import numpy as np

    bad = np.flatnonzero((ids < 0) | (ids >= MAX_CLASSES))
    if len(bad):
        raise DataError(f"{path}, {unit} {int(bad[0]) + 1}: class id {ids[bad[0]]} is out of range; class ids are "
                        f"0..C-1 for C classes (at most {MAX_CLASSES:,})")


def read_class_ids(path: Path, option: str = "--pred"):
    """Class ids [N] (int64 numpy) from a .npy file (integer ids [N], or real-valued scores [N, C] whose argmax is
    the id) or a text file with one integer per line (blank lines skipped); NaN or infinite scores, booleans,
    fractional ids and ids outside 0..MAX_CLASSES-1 are refused naming the row or line."""
    import numpy as np

    path = input_path(path, option)
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"{path}: not a readable .npy array ({e})") from None
        if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or
                                       np.issubdtype(array.dtype, np.floating)):
            raise DataError(f"{path}: expected integer class ids [N] or real scores [N, C], got {array.dtype} values")
        if array.ndim in (1, 2):
            check_finite(array, path)
        if array.ndim == 2:
            array = array.argmax(-1)
        if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or np.all(array == np.round(array))):
            raise DataError(f"{path}: expected class ids [N] or scores [N, C], got shape {list(array.shape)} of "
                            f"{array.dtype}")
        _check_id_range(array, path)
        return array.astype(np.int64)
    ids = []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            value = int(line.strip())
        except ValueError:
            raise DataError(f"{path}, line {number}: '{line.strip()[:40]}' is not an integer class id") from None
        if not 0 <= value < MAX_CLASSES:
            raise DataError(f"{path}, line {number}: class id {value} is out of range; class ids are 0..C-1 for C "
                            f"classes (at most {MAX_CLASSES:,})")
        ids.append(value)
    return np.asarray(ids, dtype=np.int64)


@register_evaluator("accuracy")
class Accuracy(Evaluator):
    """``accuracy`` over every example. ``update(predictions, targets)``: logits / scores [N, C] (argmax is the
    prediction) or predicted class ids [N], against true class ids [N]. ``num_samples`` counts examples.

    :meth:`details`: ``per_class_accuracy`` (correct / examples of each true class; None for a class with none) and
    ``confusion_matrix`` (rows = true class, columns = predicted class), over ``num_classes`` classes (default:
    grown to cover every class seen).
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"accuracy": True}
    files = ("--pred: predicted class ids, one integer per line, or .npy ids [N] / scores [N, C] (argmax); "
             "--ref: the true class ids, as many")

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> Accuracy:
        if ref is None:
            raise UsageError("score accuracy needs --ref, the true class ids")
        predicted, true = read_class_ids(pred, "--pred"), read_class_ids(ref, "--ref")
        if predicted.shape != true.shape or not len(true):
            raise DataError(f"--pred {pred} holds {len(predicted)} class ids and --ref {ref} {len(true)}; they must "
                            "hold the same number, at least one")
        evaluator = cls()
        try:
            evaluator.update(torch.from_numpy(predicted), torch.from_numpy(true))
        except ValueError as e:  # negative ids
            raise DataError(f"{pred} / {ref}: {e}") from None
        return evaluator

    def __init__(self, num_classes: int | None = None) -> None:
        self.num_classes = num_classes
        super().__init__()

    def reset(self) -> None:
        self.num_samples = 0
        self.confusion = torch.zeros(self.num_classes or 0, self.num_classes or 0, dtype=torch.long)  # [true, pred]

    def update(self, predictions: torch.Tensor, targets: torch.Tensor) -> None:
        pred = predictions.detach()
        if pred.dim() == 2:
            pred = pred.argmax(-1)
        pred, true = pred.reshape(-1).long().cpu(), targets.detach().reshape(-1).long().cpu()
        if pred.shape != true.shape:
            raise ValueError(f"{pred.numel()} predictions for {true.numel()} targets")
        if true.numel() and (min(int(true.min()), int(pred.min())) < 0):
            raise ValueError("class ids must be >= 0")
        needed = max(int(true.max()) + 1, int(pred.max()) + 1) if true.numel() else 0
        if needed > MAX_CLASSES:
            raise ValueError(f"class id {needed - 1} is out of range: at most {MAX_CLASSES:,} classes")
        if self.num_classes is not None and needed > self.num_classes:
            raise ValueError(f"class id {needed - 1} is outside the evaluator's {self.num_classes} classes")
        if needed > self.confusion.shape[0]:
            grown = torch.zeros(needed, needed, dtype=torch.long)
            k = self.confusion.shape[0]
            grown[:k, :k] = self.confusion
            self.confusion = grown
        k = self.confusion.shape[0]
        self.confusion += torch.bincount(true * k + pred, minlength=k * k).view(k, k)
        self.num_samples += true.numel()

    def compute(self) -> dict[str, float]:
        if self.num_samples == 0:
            raise ValueError("Accuracy.compute() called before any update()")
        return {"accuracy": float(self.confusion.diag().sum()) / self.num_samples}

    def details(self) -> dict[str, Any]:
        per_class = self.confusion.sum(1)
        out: dict[str, Any] = {"per_class_accuracy": {str(c): (float(self.confusion[c, c]) / int(n) if n else None)
                                                      for c, n in enumerate(per_class.tolist())},
                               "confusion_matrix": self.confusion.tolist()}
        present = [c for c, n in enumerate(per_class.tolist()) if n]
        if len(present) == 1:
            out["note"] = (f"every one of the {self.num_samples} examples is of class {present[0]}: the accuracy says "
                           "how often the model predicts that class, not how well it tells the classes apart")
        return out
