"""A test-only recipe small enough to train a whole study in seconds, and the study the tests run on it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.compare import CellRecord, Efficiency, Study, run_study
from lavo_zoo.engine.recipe import Recipe
from lavo_zoo.engine.run_config import RunConfig


@dataclass
class SeqModelConfig:
    embed_dim: int = 8
    num_heads: int = 2
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("sdpa"))
    step_sleep_s: float = 0.0  # each training step sleeps this long: a cell that runs long enough to be stopped


@dataclass
class SeqConfig(RunConfig):
    recipe: str = "compare_toy"
    model: SeqModelConfig = field(default_factory=SeqModelConfig)


ROOT = Path(__file__).resolve().parents[2]  # the repository: the cells' processes import this module from it
FIRST_STEP_BYTES = 256 * 2**20


class Killed(Exception):
    pass


class SeqRecipe(Recipe):
    """Regress the mean of a random sequence through one attention layer (test-only)."""

    name = "compare_toy"
    description = "test-only sequence regression"
    config_class = SeqConfig
    evaluator = "mean_loss"
    fail_at_call = 0  # raise Killed on this call of training_loss (0 = never): a run killed mid-training
    calls = 0
    # the study's first step pays what a process pays once (warm-up): it sleeps this long and touches 256 MiB
    first_step_cost_s = 0.0

    def build_model(self, cfg):
        m = cfg.model
        model = nn.ModuleDict({"attn": m.attention.build(m.embed_dim, m.num_heads, "noncausal"),
                               "head": nn.Linear(m.embed_dim, 1)})
        model.step_sleep_s = m.step_sleep_s
        return model

    def build_dataset(self, cfg, split):
        g = torch.Generator().manual_seed({"train": 0, "validation": 1, "test": 2}[split])
        x = torch.randn(32, 6, cfg.model.embed_dim, generator=g)
        return TensorDataset(x, x.mean((1, 2))[:, None])

    def _out(self, model, x):
        return model["head"](model["attn"](x).mean(1))

    def training_loss(self, model, batch):
        type(self).calls += 1
        if type(self).calls == type(self).fail_at_call:
            raise Killed("killed")
        if type(self).calls == 1 and type(self).first_step_cost_s:
            time.sleep(type(self).first_step_cost_s)
            torch.ones(FIRST_STEP_BYTES // 4).sum()
        time.sleep(model.step_sleep_s)
        x, y = batch
        return nn.functional.mse_loss(self._out(model, x), y), {}

    def predict(self, model, batch):
        x, y = batch
        return ((self._out(model, x) - y) ** 2).mean(1), None


def a_study(config, out, attentions=(), seeds=(1,), **settings) -> Study:
    """The study of ``config`` in ``out`` on the CPU, scored on the test split (``settings``: Study's other fields)."""
    return Study.load(str(config), out, attentions=attentions, seeds=seeds, device="cpu", split="test", **settings)


def small_study(config, out, attentions=("sdpa", "local"), seeds=(1, 2), overrides=(), launcher=None, **settings):
    options = {"local": {"window_size": 3}} if "local" in attentions else {}
    return run_study(a_study(config, out, attentions, seeds, overrides=overrides, options=options, **settings),
                     launcher=launcher)


# the launcher options the command line gives when none is given
NONE_GIVEN = {"name": None, "jobs": None, "partition": None, "time": None, "slurm_options": {}, "wait": None}
TINY_EFFICIENCY = Efficiency(lengths=(8, 64), repeats=1, warmup=0, isolate=False)  # in process: milliseconds


def records_of(values: dict[str, list[float]], higher: bool = False) -> list[CellRecord]:
    return [CellRecord(attention=name, seed=seed, metrics={"mse": {"value": v, "higher_is_better": higher}})
            for name, vs in values.items() for seed, v in enumerate(vs, 1)]
