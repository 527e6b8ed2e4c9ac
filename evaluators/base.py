"""The Evaluator protocol shared by every domain: ``reset``, ``update(predictions, targets)``, ``compute``,
``higher_is_better``, and ``from_files`` for scoring saved predictions (``lavo-zoo score``). A recipe's ``predict``
produces what its evaluator's ``update`` takes; ``results`` is what the results JSON holds."""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from lavo_zoo.errors import DataError, UsageError


def input_path(path: Path, option: str, kind: str = "file") -> Path:
    """``path`` if it exists as a ``kind``: "file" (a regular file or a pipe such as ``<(cmd)``; ``-`` is standard
    input), "folder", or "any"; otherwise a :class:`UsageError` naming the option (the same exit code for the same
    mistake everywhere)."""
    if str(path) == "-" and kind != "folder":  # the usual name of standard input
        return Path("/dev/stdin")
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{option} {path}: no such file or folder")
    if kind == "file" and path.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file")
    if kind == "folder" and not path.is_dir():
        raise UsageError(f"{option} {path} is not a folder")
    return path


def check_finite(values: Any, path: Path, unit: str = "row") -> None:
    """A :class:`DataError` naming ``path`` and the first ``unit`` (row, line) whose value is NaN or infinite;
    ``values`` is an array-like whose first dimension counts the units (numbered from 1)."""
    import numpy as np

    bad = ~np.isfinite(np.asarray(values, dtype=np.float64))
    if bad.any():
        first = np.argwhere(bad)[0]
        value = np.asarray(values, dtype=np.float64)[tuple(first)]
        raise DataError(f"{path}, {unit} {int(first[0]) + 1}: {value} is not a finite number; scores need finite "
                        "values (fix or drop that row)")


class Evaluator(ABC):
    """Accumulates predictions against targets over a split and computes named metrics.

    ``higher_is_better`` maps every metric that :meth:`compute` returns to its direction; a metric of a group or a
    setting, ``<metric>@<group>`` (``accuracy@dist:9-16``, ``ppl@2048``, ``cd_l1@chair``), has its metric's.
    ``num_samples`` counts what was scored (examples, windows, tokens: the evaluator says which in its docstring).
    """

    higher_is_better: ClassVar[dict[str, bool]] = {}
    # what `lavo-zoo score <name> --pred P --ref R` reads (help text); empty: the evaluator scores no files
    files: ClassVar[str] = ""

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> Evaluator:
        """Score saved predictions: what ``lavo-zoo score <name> --pred P --ref R`` runs.

        Args:
            pred: the predictions, a file or a folder (``files`` says which layout).
            ref: the references, or None where ``pred`` holds both.

        Returns:
            A fresh evaluator that has been updated with every prediction, ready for :meth:`results`.

        Raises:
            UsageError: a file is missing, or the evaluator scores no files.
            DataError: a file is unreadable, the predictions and references do not pair up, or a value is not
                finite (naming the file and row).
        """
        raise UsageError(f"evaluator {cls.__name__} cannot score files; `lavo-zoo score --help` lists those that can")

    def __init__(self) -> None:
        self.num_samples = 0
        self.reset()

    @abstractmethod
    def reset(self) -> None:
        """Forget everything accumulated so far."""

    @abstractmethod
    def update(self, predictions: Any, targets: Any) -> None:
        """Add one batch (grouping, such as lengths or categories, is an option of the evaluator or part of these
        objects, never a separate argument).

        Args:
            predictions: what the model produced for the batch (the recipe's ``predict``: logits, forecasts,
                clouds, summaries, waves, per-token NLL).
            targets: the ground truth of the batch, or None when the predictions already hold it (a per-token NLL).
        """

    @abstractmethod
    def compute(self) -> dict[str, float]:
        """The metrics over everything added since the last reset.

        Returns:
            ``{metric name: value}``; every name has a direction (:attr:`higher_is_better`).
        """

    def _higher_is_better(self, metric: str) -> bool:
        """:attr:`higher_is_better` of ``metric``, or of ``<metric>`` for ``<metric>@<group>``.

        Raises:
            KeyError: the evaluator declares no direction for ``metric``.
        """
        name = metric if metric in self.higher_is_better else metric.split("@", 1)[0]
        if name not in self.higher_is_better:
            raise KeyError(f"{type(self).__name__} does not declare a direction for metric '{metric}'")
        return self.higher_is_better[name]

    # the names save_outputs gives its files: ``<results stem><suffix>`` beside the results file, which
    # ``lavo-zoo eval --out`` refuses to replace, before any work, without --overwrite
    output_suffixes: ClassVar[tuple[str, ...]] = ()

    def save_outputs(self, results_file: Path) -> list[Path]:
        """Write what the evaluator keeps beyond its metrics (e.g. generated summaries) beside ``results_file``, as
        ``<results stem><suffix>`` for each of ``output_suffixes``, atomically; returns the files written (none by
        default). ``lavo-zoo eval --out FILE`` calls it."""
        return []

    def details(self) -> dict[str, Any]:
        """Non-scalar results (e.g. a confusion matrix) for the results JSON's ``details``; JSON-serialisable."""
        return {}

    def results(self) -> dict[str, dict[str, Any]]:
        """The metrics with their directions.

        Returns:
            ``{"name": {"value": float, "higher_is_better": bool}}``, as in the results JSON of docs/architecture.md.
        """
        return {k: {"value": float(v), "higher_is_better": self._higher_is_better(k)}
                for k, v in self.compute().items()}
