"""The ``time_series`` recipe: Informer on ETT / Weather / custom CSVs, MSE training, Informer's forecast metrics."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.config import RunConfig, TrainConfig
from lavo_zoo.engine.checkpoint import unwrap
from lavo_zoo.recipes import Recipe, register_recipe
from lavo_zoo.recipes.base import check_dataset
from lavo_zoo.recipes.time_series.data import (
    BUILTIN_DATASETS,
    DataConfig,
    ForecastWindows,
    generate_ett,
    num_time_features,
    prepare,
    write_table,
)
from lavo_zoo.recipes.time_series.model import Informer, ModelConfig


def informer_train_config() -> TrainConfig:
    """Informer's optimisation (the one place these defaults live; configs only state what they change): Adam 1e-4,
    lr halved every epoch ("type1"), 6 epochs, batch 32, no clipping, validation on the whole split once per
    epoch (keeping checkpoints/best), early stopping after 3 epochs without a lower validation loss."""
    return TrainConfig(optimizer="adam", lr=1e-4, betas=[0.9, 0.999], weight_decay=0.0, schedule="exponential",
                       decay_gamma=0.5, max_epochs=6, max_steps=1_000_000, batch_size=32, clip_grad_norm=0.0,
                       eval_every=0, eval_per_epoch=True, eval_batches=0, early_stopping_patience=3)


@dataclass
class TimeSeriesConfig(RunConfig):
    recipe: str = "time_series"
    train: TrainConfig = field(default_factory=informer_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)


@register_recipe("time_series")
class TimeSeriesRecipe(Recipe):
    """Informer forecasting (ETT, Weather, custom CSV); batches are dicts of x, x_mark, y, y_mark."""

    description = "Informer forecasting on ETT / Weather / CSV (MSE, MAE on standardised values)"
    config_class = TimeSeriesConfig
    tiny_config = "time_series/tiny-lavo"
    evaluator = "forecast"
    commands: ClassVar[dict[str, str]] = {"forecast-plot": "lavo_zoo.recipes.time_series.cli:forecast_plot",
                "repeats": "lavo_zoo.recipes.time_series.cli:repeats"}
    score_commands: ClassVar[dict[str, str]] = {"forecast": "lavo_zoo.recipes.time_series.cli:score_forecast"}

    def resolve(self, cfg: TimeSeriesConfig) -> TimeSeriesConfig:
        """``model.channels`` / ``out_channels`` from the data's columns, ``model.time_features`` from data.freq."""
        d, m = cfg.data, cfg.model
        m.channels = len(prepare(d).columns)
        m.out_channels = 1 if d.features == "MS" else m.channels
        m.time_features = num_time_features(d.freq)
        return cfg

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None) -> Path:
        """A generated ETT-layout CSV (``etth1``: hourly, ``ettm1``: 15-minute; ``size`` rows, default the real
        file's length). ETT-named files use Informer's 12/4/4-month split, which needs the full length: with a
        smaller ``size`` train with ``data.split=ratio``."""
        name = check_dataset(self.name, dataset or "etth1", tuple(BUILTIN_DATASETS))
        freq, file_name, rows = BUILTIN_DATASETS[name]
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / file_name
        return write_table(generate_ett(size or rows, freq), path)

    def build_model(self, cfg: TimeSeriesConfig) -> Informer:
        d = cfg.data
        return Informer(cfg.model, seq_len=d.seq_len, label_len=d.label_len, pred_len=d.pred_len)

    def build_dataset(self, cfg: TimeSeriesConfig, split: str) -> ForecastWindows:
        d = cfg.data
        return ForecastWindows(prepare(d), self.check_split(split), d.seq_len, d.label_len, d.pred_len)

    def predict(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(forecast [B, pred_len, c_out], truth [B, pred_len, c_out]); MS forecasts the last (target) column."""
        core = unwrap(model)
        label_len, pred_len, c_out = core.label_len, core.pred_len, core.c_out
        forecast = model(batch["x"], batch["x_mark"], batch["y"][:, :label_len], batch["y_mark"])
        return forecast, batch["y"][:, -pred_len:, -c_out:]

    def training_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss, _, _ = self.validation_step(model, batch)
        return loss, {}

    def validation_step(self, model: nn.Module, batch: dict[str, torch.Tensor]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(MSE, forecast, truth) from one forward pass."""
        forecast, truth = self.predict(model, batch)
        return F.mse_loss(forecast.float(), truth.float()), forecast, truth
