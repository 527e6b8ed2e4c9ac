"""Mean of a per-sample loss: the evaluator of recipes whose only metric is their training loss."""
from __future__ import annotations

from typing import ClassVar

import torch

from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator


@register_evaluator("mean_loss")
class MeanLoss(Evaluator):
    """``loss``: sum of per-sample losses / number of samples. ``update(losses [N], None)``."""

    higher_is_better: ClassVar[dict[str, bool]] = {"loss": False}

    def reset(self) -> None:
        self.total = 0.0
        self.num_samples = 0

    def update(self, predictions: torch.Tensor, targets: object = None) -> None:
        losses = predictions.detach().double().reshape(-1)
        self.total += float(losses.sum())
        self.num_samples += losses.numel()

    def compute(self) -> dict[str, float]:
        if self.num_samples == 0:
            raise ValueError("MeanLoss.compute() called before any update()")
        return {"loss": self.total / self.num_samples}
