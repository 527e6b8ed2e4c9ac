"""Forecast against truth for a few windows of a split, as a PNG (matplotlib, Agg backend); the command is
``lavo-zoo forecast-plot`` (:mod:`lavo_zoo.recipes.time_series.cli`), the forecasts come from
:mod:`lavo_zoo.recipes.time_series.infer`."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lavo_zoo.outputs import save_figure


def plot_forecasts(history: np.ndarray, truth: np.ndarray, forecast: np.ndarray, path: Path | str,
                   labels: list[str] | None = None, title: str = "") -> Path:
    """One panel per window: input history, then truth and forecast over the horizon; returns the PNG path.

    Args:
        history: [K, seq_len] each window's input.
        truth: [K, pred_len] each window's true continuation.
        forecast: [K, pred_len] each window's forecast.
        path: the PNG to write.
        labels: one label per window (None: ``window <i>``).
        title: the figure's title ('' for none).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, seq_len, pred_len = len(history), history.shape[1], truth.shape[1]
    fig, axes = plt.subplots(k, 1, figsize=(10, 2.4 * k), squeeze=False, sharex=True)
    past, future = np.arange(-seq_len, 0), np.arange(pred_len)
    for i, ax in enumerate(axes[:, 0]):
        ax.plot(past, history[i], color="0.55", lw=0.8, label="input")
        ax.plot(future, truth[i], color="tab:blue", lw=1.0, label="truth")
        ax.plot(future, forecast[i], color="tab:red", lw=1.0, label="forecast")
        ax.axvline(0, color="0.3", lw=0.6, ls=":")
        ax.set_ylabel(labels[i] if labels else f"window {i}", fontsize=8)
    axes[0, 0].legend(loc="upper left", fontsize=8, ncol=3)
    axes[-1, 0].set_xlabel("steps relative to the forecast start (standardised values)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    try:
        return save_figure(fig, Path(path), dpi=110)
    finally:
        plt.close(fig)
