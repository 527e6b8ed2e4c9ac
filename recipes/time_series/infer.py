"""Forecasting with a trained Informer: forecasts of a split's windows (``lavo-zoo forecast-plot``)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lavo_zoo.engine.recipe import Recipe


@torch.no_grad()
def forecast_windows(recipe: Recipe, model: nn.Module, cfg: object, split: str, count: int,
                     device: torch.device | str = "cpu") -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(history [K, seq_len], truth [K, pred_len], forecast [K, pred_len], window indices) of the last forecast
    channel (the target for S/MS; the last column, the target when present, for M) at ``count`` evenly spaced
    windows of ``split``, standardised."""
    dataset = recipe.build_dataset(cfg, split)
    indices = np.linspace(0, len(dataset) - 1, num=max(1, count)).round().astype(int).tolist()
    batch = {k: v.to(device) for k, v in recipe.collate([dataset[i] for i in indices]).items()}
    was_training = model.training
    model.eval()
    forecast, truth = recipe.predict(model, batch)  # [K, pred_len, c_out]
    model.train(was_training)
    history = batch["x"][..., -1]  # [K, seq_len]
    return history.cpu().numpy(), truth[..., -1].cpu().numpy(), forecast[..., -1].cpu().numpy(), indices
