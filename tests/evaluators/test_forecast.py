"""The "forecast" evaluator equals scikit-learn's metrics over every window x horizon x channel."""
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_absolute_error, mean_absolute_percentage_error, mean_squared_error

from lavo_zoo.evaluators import build_evaluator


def test_forecast_metrics_equal_sklearn_over_batches() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(37, 24, 7)) + 3.0  # windows x horizon x channels, away from zero for MAPE
    pred = truth + rng.normal(scale=0.5, size=truth.shape)
    evaluator = build_evaluator("forecast")
    for lo in range(0, 37, 10):  # uneven batches
        evaluator.update(torch.from_numpy(pred[lo:lo + 10]).float(), torch.from_numpy(truth[lo:lo + 10]).float())
    metrics = evaluator.compute()
    # the same float32 values the evaluator saw, scored in float64
    p32, t32 = (a.astype(np.float32).astype(np.float64).reshape(-1) for a in (pred, truth))
    assert metrics["mse"] == pytest.approx(mean_squared_error(t32, p32), rel=1e-9)
    assert metrics["mae"] == pytest.approx(mean_absolute_error(t32, p32), rel=1e-9)
    assert metrics["rmse"] == pytest.approx(math.sqrt(mean_squared_error(t32, p32)), rel=1e-9)
    assert metrics["mape"] == pytest.approx(mean_absolute_percentage_error(t32, p32), rel=1e-6)
    assert metrics["mspe"] == pytest.approx(np.mean(np.square((p32 - t32) / t32)), rel=1e-6)
    assert evaluator.num_samples == 37
    results = evaluator.results()
    assert set(results) == {"mse", "mae", "rmse", "mape", "mspe"}
    assert all(not r["higher_is_better"] for r in results.values())


def test_forecast_evaluator_refuses_mismatched_shapes_and_empty_compute() -> None:
    evaluator = build_evaluator("forecast")
    with pytest.raises(ValueError, match="before any update"):
        evaluator.compute()
    with pytest.raises(ValueError, match="shape"):
        evaluator.update(torch.zeros(2, 3, 1), torch.zeros(2, 3, 7))
