"""The Recipe interface: the glue for one domain. The trainer, checkpoints, logging and CLI are shared (zoo/engine).

A recipe builds the model and the data from its config, computes the training loss for a batch, produces
(predictions, targets) for its evaluator, and names that evaluator. Data for a split is a map-style
``torch.utils.data.Dataset`` so that the trainer can shuffle deterministically and resume at an exact position.
Every recipe must run on its built-in generated dataset when ``data.path`` is unset.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

from lavo_zoo.config import RunConfig
from lavo_zoo.errors import UsageError, did_you_mean
from lavo_zoo.evaluators import Evaluator, build_evaluator


def to_device(batch: Any, device: torch.device | str) -> Any:
    """``batch`` with every tensor inside (dicts, lists, tuples) moved to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


SPLITS = ("train", "validation", "test")  # the default Recipe.splits, and the split folders / borders of the data


def check_dataset(recipe: str, dataset: str | None, names: tuple[str, ...]) -> str:
    """``dataset`` (default: the first of ``names``) if it is one of ``names``, else a :class:`UsageError`."""
    dataset = dataset or names[0]
    if dataset not in names:
        raise UsageError(f"recipe '{recipe}' has no built-in dataset '{dataset}'{did_you_mean(dataset, names)}; "
                         f"choose one of {', '.join(names)} (lavo-zoo data {recipe}/<dataset>)")
    return dataset


class Recipe(ABC):
    """One domain. Subclasses set ``name``, ``config_class`` and ``evaluator`` and implement the abstract methods.

    Hooks (docs/architecture.md): ``resolve`` fills the data-derived model sizes once before the model is built;
    ``write_data`` writes the built-in data in the real on-disk layout (``lavo-zoo data``); ``commands`` and
    ``score_commands`` name the recipe's own click commands as lazy ``"module:attr"`` strings, mounted as
    ``lavo-zoo <name>`` and ``lavo-zoo score <name>``.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_class: ClassVar[type[RunConfig]] = RunConfig
    evaluator: ClassVar[str] = "mean_loss"  # evaluator registry name
    splits: ClassVar[tuple[str, ...]] = SPLITS
    # the config the recipe contract test (tests/recipes/test_recipe_contract.py) trains for one step: seconds on a CPU
    tiny_config: ClassVar[str | None] = None
    commands: ClassVar[dict[str, str]] = {}  # {"generate": "lavo_zoo.recipes.lm.cli:generate"} -> lavo-zoo generate
    score_commands: ClassVar[dict[str, str]] = {}  # {"forecast": "...:score_forecast"} -> lavo-zoo score forecast

    def resolve(self, cfg: Any) -> Any:
        """Fill the sizes that come from the data (vocabulary, channels, classes) into ``cfg.model``; called once
        before training, so that the run's config.yaml and checkpoints hold them and ``eval`` needs no data."""
        return cfg

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None) -> Path:
        """Write the built-in data of ``dataset`` into folder ``out`` in the real dataset's on-disk layout (``size``:
        a smaller or larger instance, in the recipe's unit); returns the path to give as ``data.path``."""
        raise UsageError(f"recipe '{self.name}' cannot write its built-in data to disk")

    @abstractmethod
    def build_model(self, cfg: Any) -> nn.Module:
        """The model, freshly initialised (weights are loaded separately)."""

    @abstractmethod
    def build_dataset(self, cfg: Any, split: str) -> Dataset:
        """A map-style dataset for ``split`` (one of ``splits``); raise DataError with a clear message on bad data."""

    def check_split(self, split: str) -> str:
        """``split`` if it is one of ``splits``; the one place split names are checked (a :class:`UsageError`)."""
        if split not in self.splits:
            raise UsageError(f"recipe '{self.name}' has no split '{split}'{did_you_mean(split, self.splits)}; "
                             f"choose one of {', '.join(self.splits)}")
        return split

    def collate(self, samples: list[Any]) -> Any:
        return default_collate(samples)

    @abstractmethod
    def training_loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """(scalar loss to minimise, extra float values to log) for one batch already on the model's device."""

    @abstractmethod
    def predict(self, model: nn.Module, batch: Any) -> tuple[Any, Any]:
        """(predictions, targets) for one batch, as the recipe's evaluator ``update`` takes them: what the model
        produced and the ground truth."""

    def validation_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, Any, Any]:
        """(loss, predictions, targets) for one validation batch: the trainer's periodic validation averages the
        loss and feeds (predictions, targets) to the recipe's evaluator. The default runs ``training_loss`` and
        ``predict`` (two forward passes); a recipe whose predictions give the loss overrides it to run once."""
        loss, _ = self.training_loss(model, batch)
        predictions, targets = self.predict(model, batch)
        return loss, predictions, targets

    def build_evaluator(self, cfg: Any) -> Evaluator:
        return build_evaluator(self.evaluator)

    def eval_batch_size(self, cfg: Any) -> int:
        """``eval.batch_size``, or ``train.batch_size`` when it is 0."""
        return cfg.eval.batch_size or cfg.train.batch_size

    def eval_loader(self, cfg: Any, split: str) -> DataLoader:
        return DataLoader(self.build_dataset(cfg, split), batch_size=self.eval_batch_size(cfg), shuffle=False,
                          collate_fn=self.collate, num_workers=cfg.train.num_workers)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, cfg: Any, split: str, device: torch.device,
                 max_batches: int | None = None) -> Evaluator:
        """The full evaluation ``lavo-zoo eval`` runs: the evaluator over ``split`` (at most ``max_batches``),
        returned ready for ``results()``. Periodic validation during training uses :meth:`validation_step`
        instead, so overriding this (several context lengths, streaming) never slows training down.
        """
        evaluator = self.build_evaluator(cfg)
        was_training = model.training
        model.eval()
        for i, batch in enumerate(self.eval_loader(cfg, split)):
            if max_batches and i >= max_batches:
                break
            predictions, targets = self.predict(model, to_device(batch, device))
            evaluator.update(predictions, targets)
        model.train(was_training)
        return evaluator
