"""The ``lra`` recipe: Long Range Arena classification (ListOps, Text, Retrieval, Image, Pathfinder) with any
noncausal attention, Skyformer's LRA model and training settings, accuracy as the metric."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.engine.recipe import Recipe, register_recipe
from lavo_zoo.engine.run_config import RunConfig, TrainConfig
from lavo_zoo.errors import ConfigError
from lavo_zoo.evaluators import Evaluator, build_evaluator
from lavo_zoo.recipes.lra.builtin import BuiltinTasks
from lavo_zoo.recipes.lra.data import TASKS, DataConfig, collate, load_examples
from lavo_zoo.recipes.lra.infer import Classifier, class_logits
from lavo_zoo.recipes.lra.model import LRAClassifier, ModelConfig


def paper_train_config() -> TrainConfig:
    """Skyformer's LRA optimisation (ListOps values): AdamW, lr 1e-4, no weight decay, linear warmup then linear
    decay (``cosine`` with min_lr 0 is the closest shared schedule), batch 32."""
    return TrainConfig(optimizer="adamw", lr=1e-4, betas=[0.9, 0.999], weight_decay=0.0, schedule="cosine",
                       warmup_steps=1000, max_steps=50_000, batch_size=32, clip_grad_norm=0.0, eval_every=500,
                       eval_batches=62, save_every=500, keep_last=2)


@dataclass
class LRAConfig(RunConfig):
    recipe: str = "lra"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)


@register_recipe("lra")
class LRARecipe(Recipe):
    """Batches are dicts: tokens [B, L], mask [B, L] (+ tokens2, mask2 for Retrieval), label [B]."""

    description = "Long Range Arena: ListOps, Text, Retrieval, Image, Pathfinder classification (accuracy)"
    config_class = LRAConfig
    evaluator = "accuracy"
    tiny_config = "lra/tiny-text-lavo"
    builtin = BuiltinTasks()
    task = ("text-classification", "Long Range Arena classification")
    limits = ("A classifier for one Long Range Arena task in its token or pixel-sequence encoding: a probe of "
              "long-range attention, not a general text or image classifier.")
    predictor = Classifier

    def resolve(self, cfg: LRAConfig) -> LRAConfig:
        """Fill the data-derived model sizes (vocabulary, classes, positions, two towers) from ``data.task``."""
        if cfg.data.task not in TASKS:
            raise ConfigError(f"data.task '{cfg.data.task}' is not an LRA task; choose one of {', '.join(TASKS)}")
        info, m = cfg.data.info(), cfg.model
        m.vocab_size = m.vocab_size or info.vocab_size
        m.num_classes = m.num_classes or info.num_classes
        m.max_positions = m.max_positions or cfg.data.length()
        m.two_tower = m.two_tower or info.dual
        return cfg

    def build_model(self, cfg: LRAConfig) -> LRAClassifier:
        return LRAClassifier(self.resolve(cfg).model)

    def build_dataset(self, cfg: LRAConfig, split: str) -> Dataset:
        return load_examples(cfg.data, self.check_split(split), self.data_path(cfg.data))

    def collate(self, samples: list[Any]) -> dict[str, torch.Tensor]:
        return collate(samples)

    def training_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss, logits, labels = self.validation_step(model, batch)
        return loss, {"accuracy": float((logits.argmax(-1) == labels).float().mean())}

    def validation_step(self, model: nn.Module, batch: dict[str, torch.Tensor]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cross-entropy, logits [B, C], labels [B]) from one forward pass."""
        logits, labels = self.predict(model, batch)
        return F.cross_entropy(logits.float(), labels), logits, labels

    def predict(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return class_logits(model, batch), batch["label"]  # logits [B, C], labels [B]

    def build_evaluator(self, cfg: LRAConfig) -> Evaluator:
        return build_evaluator(self.evaluator, num_classes=self.resolve(cfg).model.num_classes)

    def dataset_name(self, data: DataConfig) -> str:
        """``built-in <task>``, or the release folder's name with the task: a model card names both."""
        return f"{Path(str(data.path)).name} ({data.task})" if data.path else f"built-in {data.task}"

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None,
                   overwrite: bool = False) -> Path:
        """``lavo-zoo data lra/<task> --out DIR [--size N]``: one task's built-in data in its release layout; all
        five, each in ``DIR/<task>``, when no task is named."""
        if dataset is None:
            for task in TASKS:
                super().write_data(Path(out) / task, task, size, overwrite)
            return Path(out)
        return super().write_data(out, dataset, size, overwrite)
