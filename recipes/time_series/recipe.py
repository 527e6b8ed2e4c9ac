"""The ``time_series`` recipe: Informer on ETT / Weather / custom CSVs, MSE training, Informer's forecast metrics."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.engine.checkpoint_io import unwrap
from lavo_zoo.engine.recipe import Recipe, register_recipe
from lavo_zoo.engine.run_config import RunConfig, TrainConfig
from lavo_zoo.recipes.time_series.builtin import BuiltinETT
from lavo_zoo.recipes.time_series.data import DataConfig, ForecastWindows, PreparedSeries, num_time_features, prepare
from lavo_zoo.recipes.time_series.infer import Forecaster
from lavo_zoo.recipes.time_series.model import Informer, ModelConfig


def paper_train_config() -> TrainConfig:
    """Informer's optimisation (the one place these defaults live; configs only state what they change): Adam 1e-4,
    lr halved every epoch ("type1"), 6 epochs, batch 32, no clipping, validation on the whole split once per
    epoch (keeping checkpoints/best), early stopping after 3 epochs without a lower validation loss."""
    return TrainConfig(optimizer="adam", lr=1e-4, betas=[0.9, 0.999], weight_decay=0.0, schedule="exponential",
                       decay_gamma=0.5, max_epochs=6, max_steps=1_000_000, batch_size=32, clip_grad_norm=0.0,
                       eval_every=0, eval_per_epoch=True, eval_batches=0, early_stopping_patience=3)


@dataclass
class TimeSeriesConfig(RunConfig):
    recipe: str = "time_series"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)


@register_recipe("time_series")
class TimeSeriesRecipe(Recipe):
    """Informer forecasting (ETT, Weather, custom CSV); batches are dicts of x, x_mark, y, y_mark."""

    description = "Informer forecasting of CSV series (MSE, MAE on standardised values)"
    config_class = TimeSeriesConfig
    tiny_config = "time_series/tiny-lavo"
    evaluator = "forecast"
    predictor = Forecaster
    builtin = BuiltinETT()
    task = ("time-series-forecasting", "Time series forecasting")
    limits = ("It forecasts the series it was trained on (its columns, frequency and standardisation); it does not "
              "transfer to other series, and its MSE and MAE are on standardised values.")

    def series(self, data: DataConfig) -> PreparedSeries:
        """The standardised series of ``data.path`` or the built-in table."""
        return prepare(data, self.data_path(data))

    def resolve(self, cfg: TimeSeriesConfig) -> TimeSeriesConfig:
        """``model.channels`` / ``out_channels`` from the data's columns, ``model.time_features`` from data.freq, and
        the training series' columns, scaler and time step (what :class:`Forecaster` needs for new data)."""
        d, m = cfg.data, cfg.model
        series = self.series(d)
        m.channels = len(series.columns)
        m.out_channels = 1 if d.features == "MS" else m.channels
        m.time_features = num_time_features(d.freq)
        m.columns = list(series.columns)
        m.scaler_mean, m.scaler_std = series.mean.tolist(), series.std.tolist()
        m.step = series.step
        return cfg

    def build_model(self, cfg: TimeSeriesConfig) -> Informer:
        d = cfg.data
        return Informer(cfg.model, seq_len=d.seq_len, label_len=d.label_len, pred_len=d.pred_len)

    def build_dataset(self, cfg: TimeSeriesConfig, split: str) -> ForecastWindows:
        d = cfg.data
        return ForecastWindows(self.series(d), self.check_split(split), d.seq_len, d.label_len, d.pred_len)

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
