"""The ``time_series`` recipe: Informer on ETT / Weather / custom CSVs, MSE training, Informer's forecast metrics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.config import RunConfig, TrainConfig
from lavo_zoo.recipes import Recipe, register_recipe
from lavo_zoo.recipes.time_series.data import ForecastDataConfig, ForecastWindows, num_time_features, prepare
from lavo_zoo.recipes.time_series.model import Informer, InformerConfig


def informer_train_config() -> TrainConfig:
    """Informer's optimisation: Adam 1e-4, lr halved every epoch ("type1"), 6 epochs, batch 32, early stopping."""
    return TrainConfig(optimizer="adam", lr=1e-4, betas=[0.9, 0.999], weight_decay=0.0, schedule="exponential",
                       decay_gamma=0.5, max_epochs=6, max_steps=1_000_000, batch_size=32, clip_grad_norm=0.0,
                       eval_batches=0, early_stopping_patience=3)


@dataclass
class ForecastEvalConfig:
    batch_size: int = 32


@dataclass
class TimeSeriesConfig(RunConfig):
    recipe: str = "time_series"
    train: TrainConfig = field(default_factory=informer_train_config)
    model: InformerConfig = field(default_factory=InformerConfig)
    data: ForecastDataConfig = field(default_factory=ForecastDataConfig)
    eval: ForecastEvalConfig = field(default_factory=ForecastEvalConfig)


@register_recipe("time_series")
class TimeSeriesRecipe(Recipe):
    """Informer forecasting (ETT, Weather, custom CSV); batches are dicts of x, x_mark, y, y_mark."""

    description = "Informer forecasting on ETT / Weather / CSV (MSE, MAE on standardised values)"
    config_class = TimeSeriesConfig
    evaluator = "forecast"

    def build_model(self, cfg: TimeSeriesConfig) -> Informer:
        d = cfg.data
        channels = len(prepare(d).columns)
        return Informer(cfg.model, enc_in=channels, c_out=1 if d.features == "MS" else channels,
                        time_features=num_time_features(d.freq), seq_len=d.seq_len, label_len=d.label_len,
                        pred_len=d.pred_len)

    def build_dataset(self, cfg: TimeSeriesConfig, split: str) -> ForecastWindows:
        d = cfg.data
        return ForecastWindows(prepare(d), split, d.seq_len, d.label_len, d.pred_len)

    def predict(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(forecast [B, pred_len, c_out], truth [B, pred_len, c_out]); MS forecasts the last (target) column."""
        core: Any = model
        while not isinstance(core, Informer):  # under torch.compile (_orig_mod) / DistributedDataParallel (module)
            core = getattr(core, "_orig_mod", None) or core.module
        label_len, pred_len, c_out = core.label_len, core.pred_len, core.c_out
        forecast = model(batch["x"], batch["x_mark"], batch["y"][:, :label_len], batch["y_mark"])
        return forecast, batch["y"][:, -pred_len:, -c_out:]

    def training_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        forecast, truth = self.predict(model, batch)
        return F.mse_loss(forecast.float(), truth.float()), {}

    def eval_batch_size(self, cfg: TimeSeriesConfig) -> int:
        return cfg.eval.batch_size
