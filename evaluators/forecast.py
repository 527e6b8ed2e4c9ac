"""Forecast metrics as Informer's ``utils/metrics.py``: MSE, MAE, RMSE, MAPE, MSPE over every window x horizon step x
channel (on standardised values when the recipe feeds them standardised)."""
from __future__ import annotations

import math
from typing import ClassVar

import torch

from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator


@register_evaluator("forecast")
class ForecastEvaluator(Evaluator):
    """MSE, MAE, RMSE, MAPE, MSPE of forecasts ``[N, horizon, C]`` against truth; ``num_samples`` counts windows.

    MAPE and MSPE divide by the truth as Informer does (a truth of exactly 0 makes them inf or NaN).
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"mse": False, "mae": False, "rmse": False, "mape": False,
                                                   "mspe": False}

    def reset(self) -> None:
        self.num_samples = 0
        self.count = 0
        self.sums = dict.fromkeys(("se", "ae", "ape", "spe"), 0.0)

    def update(self, predictions: torch.Tensor, targets: torch.Tensor) -> None:
        if predictions.shape != targets.shape:
            raise ValueError(f"forecast shape {list(predictions.shape)} != target shape {list(targets.shape)}")
        true = targets.detach().double()
        err = predictions.detach().double() - true
        pct = err / true  # Informer's MAPE/MSPE divide by the truth itself
        self.sums["se"] += float(err.square().sum())
        self.sums["ae"] += float(err.abs().sum())
        self.sums["ape"] += float(pct.abs().sum())
        self.sums["spe"] += float(pct.square().sum())
        self.count += err.numel()
        self.num_samples += err.shape[0]

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise ValueError("ForecastEvaluator.compute() called before any update()")
        mse = self.sums["se"] / self.count
        return {"mse": mse, "mae": self.sums["ae"] / self.count, "rmse": math.sqrt(mse),
                "mape": self.sums["ape"] / self.count, "mspe": self.sums["spe"] / self.count}
