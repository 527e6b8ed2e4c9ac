"""Forecast metrics as Informer's ``utils/metrics.py``: MSE, MAE, RMSE, MAPE, MSPE over every window x horizon step x
channel (on standardised values when the recipe feeds them standardised)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import torch

from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, check_finite, input_path


def read_array(path: Path, option: str = "--pred"):
    """A float64 array from a .npy file or a CSV of numbers (a 'date' column, if any, is dropped); a missing,
    unreadable, non-numeric or non-finite value is refused naming the file and row."""
    import numpy as np
    import pandas as pd

    path = input_path(path, option)
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False).astype(np.float64)
        except (ValueError, OSError) as e:
            raise DataError(f"{path} is not a numeric .npy array: {e}") from None
        check_finite(array.reshape(len(array), -1) if array.ndim else array.reshape(1), path, "sample")
        return array
    try:
        table = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not a readable CSV file: {e}") from None
    table = table.drop(columns=[c for c in table.columns if str(c).lower() == "date"])
    values = table.apply(pd.to_numeric, errors="coerce")
    bad = values.isna().to_numpy()
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DataError(f"{path}: column '{table.columns[col]}' has a missing or non-numeric value "
                        f"{table.iloc[row, col]!r} on line {row + 2}")
    array = values.to_numpy(np.float64)
    bad = ~np.isfinite(array)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DataError(f"{path}: column '{table.columns[col]}' has the non-finite value {array[row, col]} on line "
                        f"{row + 2}; scores need finite values")
    return array


@register_evaluator("forecast")
class ForecastEvaluator(Evaluator):
    """MSE, MAE, RMSE, MAPE, MSPE of forecasts ``[N, horizon, C]`` against truth; ``num_samples`` counts windows.

    MAPE and MSPE divide by the truth as Informer does (a truth of exactly 0 makes them inf or NaN).
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"mse": False, "mae": False, "rmse": False, "mape": False,
                                                   "mspe": False}
    files = ("--pred: forecasts, .npy (any shape, e.g. [N, horizon, C]; the first dimension counts the samples) or "
             "CSV (rows x series; a date column is ignored); --ref: the truth, the same shape")

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> ForecastEvaluator:
        if ref is None:
            raise UsageError("score forecast needs --ref, the true values")
        forecast, truth = read_array(pred, "--pred"), read_array(ref, "--ref")
        if forecast.shape != truth.shape:
            raise DataError(f"--pred {pred} has shape {list(forecast.shape)} but --ref {ref} has "
                            f"{list(truth.shape)}; they must match")
        evaluator = cls()
        evaluator.update(torch.tensor(forecast), torch.tensor(truth))
        return evaluator

    def reset(self) -> None:
        self.num_samples = 0
        self.count = 0
        self.zero_truth = 0  # true values of exactly 0: MAPE / MSPE are infinite or NaN there, as Informer's
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
        self.zero_truth += int((true == 0).sum())
        self.num_samples += err.shape[0]

    def details(self) -> dict[str, Any]:
        """Why MAPE / MSPE are not finite, when they are not."""
        if not self.zero_truth:
            return {}
        return {"zero_truth_values": self.zero_truth,
                "note": f"{self.zero_truth} of {self.count} true values are exactly 0 (e.g. a column that is constant "
                        "over the training rows standardises to 0); MAPE and MSPE divide by the truth, as Informer's "
                        "metrics do, so they are infinite or NaN: read MSE and MAE"}

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise ValueError("ForecastEvaluator.compute() called before any update()")
        mse = self.sums["se"] / self.count
        return {"mse": mse, "mae": self.sums["ae"] / self.count, "rmse": math.sqrt(mse),
                "mape": self.sums["ape"] / self.count, "mspe": self.sums["spe"] / self.count}
