"""The Evaluator protocol shared by every domain: ``reset``, ``update``, ``compute``, ``higher_is_better``."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar


class Evaluator(ABC):
    """Accumulates predictions against targets over a split and computes named metrics.

    ``higher_is_better`` maps every metric name that :meth:`compute` returns to its direction; a subclass whose
    metric names depend on its options (e.g. ``ppl@2048``) overrides :meth:`is_higher_better` instead.
    ``num_samples`` counts what was scored (examples, windows, tokens: the evaluator says which in its docstring).
    """

    higher_is_better: ClassVar[dict[str, bool]] = {}

    def __init__(self) -> None:
        self.num_samples = 0
        self.reset()

    @abstractmethod
    def reset(self) -> None:
        """Forget everything accumulated so far."""

    @abstractmethod
    def update(self, predictions: Any, targets: Any) -> None:
        """Add one batch: ``predictions`` = what the model produced, ``targets`` = the ground truth (None when the
        predictions already hold it, e.g. a per-token NLL). Grouping (lengths, categories) is an option of the
        evaluator or part of these objects, never a separate argument."""

    @abstractmethod
    def compute(self) -> dict[str, float]:
        """Metrics over everything added since the last reset."""

    def is_higher_better(self, metric: str) -> bool:
        if metric not in self.higher_is_better:
            raise KeyError(f"{type(self).__name__} does not declare a direction for metric '{metric}'")
        return self.higher_is_better[metric]

    def details(self) -> dict[str, Any]:
        """Non-scalar results (e.g. a confusion matrix) for the results JSON's ``details``; JSON-serialisable."""
        return {}

    def results(self) -> dict[str, dict[str, Any]]:
        """``{"name": {"value": float, "higher_is_better": bool}}`` as in the results JSON of docs/architecture.md."""
        return {k: {"value": float(v), "higher_is_better": self.is_higher_better(k)} for k, v in self.compute().items()}
