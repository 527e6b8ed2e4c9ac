"""train.precision: bf16 autocast on CUDA ('auto') or wherever asked ('bf16'), fp32 otherwise; under it the model
runs in bf16 autocast and the scores are computed in full precision."""
from __future__ import annotations

import torch

from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.engine.precision import autocast_dtype, precision_name
from lavo_zoo.engine.trainer import Trainer
from lavo_zoo.evaluators.loss import MeanLoss
from tests.helpers import TOY


def test_the_precision_setting_picks_the_autocast_dtype():
    assert autocast_dtype("auto", "cuda") is torch.bfloat16 and autocast_dtype("auto", "cpu") is None
    assert autocast_dtype("bf16", "cpu") is torch.bfloat16 and autocast_dtype("fp32", "cuda:1") is None
    assert precision_name(torch.bfloat16) == "bf16-autocast" and precision_name(None) == "fp32"


def test_bf16_training_runs_the_model_under_autocast_and_scores_outside_it(tmp_path, monkeypatch):
    recipe, cfg = resolve_config(TOY, ["train.precision=bf16", "train.max_steps=2", "train.eval_every=2",
                                       "train.grad_accum=1", "train.save_every=2", "train.log_every=1"])
    seen = {"model": set(), "scores": set()}
    forward = recipe.training_loss

    def training_loss(model, batch):
        seen["model"].add(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
        return forward(model, batch)

    def update(self, predictions, targets=None):
        seen["scores"].add(torch.is_autocast_enabled("cpu"))
        return original(self, predictions, targets)

    original = MeanLoss.update
    monkeypatch.setattr(recipe, "training_loss", training_loss)
    monkeypatch.setattr(MeanLoss, "update", update)
    metrics = Trainer(recipe, cfg, tmp_path / "run", device="cpu").fit()
    assert "loss" in metrics  # validated once
    assert seen == {"model": {True}, "scores": {False}}
