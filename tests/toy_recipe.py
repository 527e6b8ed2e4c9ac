"""A tiny regression recipe that exists only for the engine's tests (not shipped).

Linear targets y = x @ W* + noise, fitted by a small MLP with dropout (so the RNG matters for exact resume).
Test-only fault injection, read from the environment of a subprocess run:
  TOY_KILL_AFTER_BATCHES=N   SIGKILL this process in the middle of the N-th training micro-batch.
  TOY_SIGNAL_AFTER_BATCHES=N:NAME   send SIGINT / SIGTERM (NAME) to this process in the N-th micro-batch.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from lavo_zoo.engine.recipe import Recipe, register_recipe
from lavo_zoo.engine.run_config import RunConfig


@dataclass
class ToyModelConfig:
    hidden: int = 16
    dropout: float = 0.1


@dataclass
class ToyDataConfig:
    num_samples: int = 96
    dim: int = 4
    noise: float = 0.01
    nan_after: int = 0  # targets become NaN from this sample on (to test NaN-loss handling); 0 = never


@dataclass
class ToyConfig(RunConfig):
    model: ToyModelConfig = field(default_factory=ToyModelConfig)
    data: ToyDataConfig = field(default_factory=ToyDataConfig)


_calls = 0


@register_recipe("toy")
class ToyRecipe(Recipe):
    description = "test-only linear regression"
    config_class = ToyConfig
    evaluator = "mean_loss"
    tiny_config = str(Path(__file__).parent / "engine" / "data" / "toy.yaml")

    def build_model(self, cfg: ToyConfig) -> nn.Module:
        d, h = cfg.data.dim, cfg.model.hidden
        return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Dropout(cfg.model.dropout), nn.Linear(h, 1))

    def build_dataset(self, cfg: ToyConfig, split: str) -> TensorDataset:
        self.check_split(split)
        g = torch.Generator().manual_seed({"train": 0, "validation": 1, "test": 2}[split])
        w = torch.randn(cfg.data.dim, 1, generator=torch.Generator().manual_seed(42))
        n = cfg.data.num_samples if split == "train" else max(8, cfg.data.num_samples // 4)
        x = torch.randn(n, cfg.data.dim, generator=g)
        y = x @ w + cfg.data.noise * torch.randn(n, 1, generator=g)
        if cfg.data.nan_after:
            y[cfg.data.nan_after:] = float("nan")
        return TensorDataset(x, y)

    def training_loss(self, model: nn.Module, batch):
        global _calls
        _calls += 1
        if _calls == int(os.environ.get("TOY_KILL_AFTER_BATCHES", "0")):
            os.kill(os.getpid(), signal.SIGKILL)
        at, _, name = os.environ.get("TOY_SIGNAL_AFTER_BATCHES", "0:").partition(":")
        if _calls == int(at):
            os.kill(os.getpid(), getattr(signal, name))
        x, y = batch
        loss = nn.functional.mse_loss(model(x), y)
        return loss, {"rmse": float(loss.detach().sqrt())}

    def predict(self, model: nn.Module, batch):
        x, y = batch
        return ((model(x) - y) ** 2).mean(dim=1), None
