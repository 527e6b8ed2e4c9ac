"""The recipe contract and the recipe registry: how the core knows a domain.

A recipe is the glue for one domain (``recipes/<domain>/recipe.py``): it builds the model and the data from its
config, computes the training loss for a batch, produces (predictions, targets) for its evaluator, and names that
evaluator. Data for a split is a map-style ``torch.utils.data.Dataset`` so that the trainer can shuffle
deterministically and resume at an exact position. A recipe runs on built-in data it generates itself when
``data.path`` is unset: its ``builtin`` (:class:`~lavo_zoo.engine.builtin_data.BuiltinData`, the recipe's
``builtin.py``).

The built-in recipes are declared in pyproject.toml's ``lavo_zoo.plugins.recipes`` entry-point group, as plugins
are, and imported on first use of one: the core never names a recipe module. Named configs (``<domain>/<name>``) are
found by :mod:`lavo_zoo.engine.configs`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

from lavo_zoo.config import from_dict, to_dict
from lavo_zoo.engine.builtin_data import BuiltinData, check_dataset, check_footprint, generated_dataset, write_dataset
from lavo_zoo.engine.env import cache_root
from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.engine.run_config import RunConfig
from lavo_zoo.errors import MissingInput, UsageError, ZooError, did_you_mean
from lavo_zoo.evaluators import Evaluator, build_evaluator
from lavo_zoo.registry import Registry


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


@dataclass(frozen=True)
class EvalPlaces:
    """Where an evaluation writes beyond its results: the folder for its files (tts: synthesised wavs and plots) and
    the path of the figure it draws (lm: perplexity against length). ``lavo-zoo eval`` passes the staging paths the
    output policy claimed; a caller of :meth:`Recipe.evaluate` that passes none gets the config's own
    (``eval.out_dir``, ``eval.plot``). The config is never rewritten to route outputs.

    Attributes:
        files: the folder for the evaluation's files, or None to write none.
        plot: the figure's path, or None to draw none.
    """

    files: Path | None = None
    plot: Path | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> EvalPlaces:
        """The places a config names (``eval.out_dir``, ``eval.plot``, where its eval section has them)."""
        settings = getattr(cfg, "eval", None)
        files, plot = getattr(settings, "out_dir", None), getattr(settings, "plot", None)
        return cls(Path(files) if files else None, Path(plot) if plot else None)


class Recipe(ABC):
    """One domain: the contract between a recipe and the engine (docs/architecture.md, "The recipe contract").

    Declared by a subclass (class attributes):
        name, description: set by :func:`register_recipe`; a line for ``lavo-zoo list recipes``.
        config_class: the ``<Domain>Config(RunConfig)`` dataclass (``train``, ``eval``, ``model``, ``data``).
        evaluator: the registry name of the evaluator :meth:`predict` feeds.
        splits: the split names the data has.
        tiny_config: a config that trains in seconds on a CPU (the recipe contract test trains it for one step).
        builtin: its :class:`~lavo_zoo.engine.builtin_data.BuiltinData` (``builtin.py``), or None.
        predictor: its ``infer.py`` :class:`~lavo_zoo.engine.predictor.Predictor`: what ``lavo_zoo.load`` returns.
        task, limits: what a model card (``lavo-zoo export``) says it does and is not fit for.

    Implemented by a subclass: :meth:`build_model`, :meth:`build_dataset`, :meth:`training_loss`, :meth:`predict`.
    Overridden where a domain needs it (each has a default): :meth:`resolve`, :meth:`collate`,
    :meth:`validation_step`, :meth:`evaluate`, :meth:`build_evaluator`, :meth:`dataset_name`.
    Provided by the engine, the same for every recipe (not overridden): :meth:`data_path`, :meth:`cache_dir`,
    :meth:`write_data`, :meth:`check_split`, :meth:`eval_batch_size`, :meth:`eval_loader`.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_class: ClassVar[type[RunConfig]] = RunConfig
    evaluator: ClassVar[str] = "mean_loss"  # evaluator registry name
    splits: ClassVar[tuple[str, ...]] = SPLITS
    # the config the recipe contract test (tests/recipes/test_recipe_contract.py) trains for one step: seconds on a CPU
    tiny_config: ClassVar[str | None] = None
    builtin: ClassVar[BuiltinData | None] = None  # the built-in data (`lavo-zoo data <recipe>/<name>`)
    predictor: ClassVar[type[Predictor] | None] = None  # its infer.py class: what lavo_zoo.load returns
    # the model card of a released checkpoint (`lavo-zoo export`): the task as (Hugging Face task type, readable name),
    # and one or two sentences on what a checkpoint of this recipe is not fit for
    task: ClassVar[tuple[str, str]] = ("other", "Other")
    limits: ClassVar[str] = ""

    # ------------------------------------------------------------------------------------ implemented by a recipe
    @abstractmethod
    def build_model(self, cfg: Any) -> nn.Module:
        """The model, freshly initialised (weights are loaded separately).

        Args:
            cfg: the run's config; only ``cfg.model`` (plus data *shapes*, such as sequence lengths in ``cfg.data``)
                may be read: never data files, so that a checkpoint rebuilds its model without the data.

        Returns:
            The model, in training mode.
        """

    @abstractmethod
    def build_dataset(self, cfg: Any, split: str) -> Dataset:
        """The data of one split.

        Args:
            cfg: the run's resolved config; the files are read from ``self.data_path(cfg.data)``.
            split: one of :attr:`splits` (checked with :meth:`check_split`).

        Returns:
            A map-style dataset (the trainer shuffles by index and resumes at an exact position).

        Raises:
            DataError: the data is missing or malformed (naming the file and line).
        """

    @abstractmethod
    def training_loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss the trainer minimises.

        Args:
            model: the model of :meth:`build_model` (possibly wrapped for distributed training).
            batch: one :meth:`collate` batch, already on the model's device.

        Returns:
            (scalar loss, extra float values to log).
        """

    @abstractmethod
    def predict(self, model: nn.Module, batch: Any) -> tuple[Any, Any]:
        """What the recipe's evaluator scores.

        Args:
            model: the model, in the mode the caller chose (evaluation: eval mode, no gradients).
            batch: one :meth:`collate` batch, already on the model's device.

        Returns:
            (predictions, targets) as the evaluator's ``update`` takes them: what the model produced and the ground
            truth.
        """

    # ---------------------------------------------------------------------------- overridden where a domain needs it
    def resolve(self, cfg: Any) -> Any:
        """Fill the sizes that come from the data (vocabulary, channels, classes) into ``cfg.model``.

        Called once before training, so that the run's config.yaml and checkpoints hold them and ``eval`` needs no
        data. The default changes nothing.

        Args:
            cfg: the validated config.

        Returns:
            The same config, completed in place.
        """
        return cfg

    def collate(self, samples: list[Any]) -> Any:
        """One batch of dataset items (default: ``torch.utils.data.default_collate``)."""
        return default_collate(samples)

    def validation_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, Any, Any]:
        """One batch of the trainer's periodic validation, which averages the loss and feeds (predictions, targets)
        to the recipe's evaluator.

        Args:
            model: the model in eval mode (no gradients).
            batch: one :meth:`collate` batch, already on the model's device.

        Returns:
            (loss, predictions, targets). The default runs :meth:`training_loss` and :meth:`predict` (two forward
            passes); a recipe whose predictions give the loss overrides it to run the model once.
        """
        loss, _ = self.training_loss(model, batch)
        predictions, targets = self.predict(model, batch)
        return loss, predictions, targets

    @torch.no_grad()
    def evaluate(self, model: nn.Module, cfg: Any, split: str, device: torch.device,
                 max_batches: int | None = None, places: EvalPlaces | None = None) -> Evaluator:
        """The full evaluation ``lavo-zoo eval`` runs (the trainer never calls it, so overriding it with several
        context lengths or streaming never slows training down).

        Args:
            model: the trained model, on ``device``.
            cfg: the checkpoint's config (with any ``eval.*`` overrides); read, never changed.
            split: one of :attr:`splits`.
            device: where batches go.
            max_batches: score at most this many batches (None: the whole split).
            places: where the evaluation writes its files and figure (None: the config's,
                :meth:`EvalPlaces.from_config`). The default evaluation writes neither.

        Returns:
            The evaluator, updated and ready for ``results()``. The default feeds :meth:`predict` of every batch of
            :meth:`eval_loader` to :meth:`build_evaluator`.
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

    def build_evaluator(self, cfg: Any) -> Evaluator:
        """A fresh instance of the evaluator named by :attr:`evaluator` (a recipe passes it settings from ``cfg``)."""
        return build_evaluator(self.evaluator)

    def dataset_name(self, data: Any) -> str:
        """How a model card names the data of data section ``data``: the last part of ``data.path``, else
        ``built-in <dataset>`` (the recipe's only built-in dataset, or the one its built-in key names)."""
        if getattr(data, "path", None):
            return Path(str(data.path)).expanduser().name or str(data.path)
        if self.builtin is None:
            return "built-in data"
        if len(self.builtin.datasets) == 1:
            return f"built-in {self.builtin.datasets[0]}"
        try:
            return f"built-in {self.builtin.key(data).get('dataset', self.name)}"
        except ZooError:
            return "built-in data"

    # ------------------------------------------------------------------------------------ provided by the engine
    def check_split(self, split: str) -> str:
        """``split`` if it is one of :attr:`splits`; the one place split names are checked.

        Raises:
            UsageError: naming the closest split and every split there is.
        """
        if split not in self.splits:
            raise UsageError(f"recipe '{self.name}' has no split '{split}'{did_you_mean(split, self.splits)}; "
                             f"choose one of {', '.join(self.splits)}")
        return split

    def data_path(self, data: Any) -> Path:
        """Where the data of data section ``data`` is.

        Args:
            data: the config's data section.

        Returns:
            ``data.path``, or the built-in data that ``data`` describes, generated once by the recipe's
            :attr:`builtin` into ``<cache_dir>/builtin`` (atomically: concurrent runs and crashes never leave half a
            dataset).

        Raises:
            MissingInput: ``data.path`` does not exist (exit 2; what is there but malformed is the reader's
                DataError).
            UsageError: ``data.path`` is unset and the recipe has no built-in data.
        """
        if data.path:
            path = Path(data.path).expanduser()
            if not path.exists():  # one rule and one exit code for an input that is not there (2)
                raise MissingInput(f"data.path {path} does not exist (a relative path starts at the working directory);"
                                 f" point it at the dataset, or unset it (data.path=null) for the built-in data"
                                 + (f" (`lavo-zoo data {self.name} --out DIR` writes that in the real layout)"
                                    if self.builtin is not None and self.builtin.datasets else ""))
            return path
        if self.builtin is None:
            raise UsageError(f"recipe '{self.name}' has no built-in data; give data.path")
        key = self.builtin.key(data)
        name, parent = str(key.get("dataset", self.name)), self.cache_dir(data) / "builtin"
        return generated_dataset(parent, name, key, lambda out: self.builtin.write(out, data), check=lambda: (
            check_footprint(self.builtin, data, parent, f"the built-in data of {self.name}/{name}")))

    def cache_dir(self, data: Any) -> Path:
        """The recipe's cache folder: ``data.cache_dir`` where the data section has one and it is set, else
        ``$LAVO_ZOO_CACHE/<recipe>`` (or the user's cache directory). Built-in data goes to its ``builtin/``."""
        return Path(data.cache_dir).expanduser() if getattr(data, "cache_dir", None) else cache_root() / self.name

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None,
                   overwrite: bool = False) -> Path:
        """``lavo-zoo data <recipe>[/<dataset>] --out DIR [--size N]``: built-in data written where the user asks.

        Args:
            out: the folder to write into (created if needed).
            dataset: one of ``builtin.datasets`` (default: the first).
            size: ``--size`` in the recipe's unit (:meth:`BuiltinData.config`), or None for the default size.
            overwrite: replace files of the same name already in ``out``.

        Returns:
            The path to give as ``data.path``.

        Raises:
            UsageError: the recipe has no built-in data, ``dataset`` is not one of it, or a file in ``out`` would be
                replaced without ``overwrite`` (then nothing is written).
        """
        if self.builtin is None or not self.builtin.datasets:
            raise UsageError(f"recipe '{self.name}' cannot write its built-in data to disk")
        dataset = check_dataset(self.name, dataset, self.builtin.datasets)
        data = self.builtin.config(self.data_config(), dataset, size)
        source = f"lavo-zoo data {self.name}/{dataset}" + (f" --size {size}" if size is not None else "")
        data = from_dict(type(data), to_dict(data), source)  # the schema's ranges hold for --size too
        self.builtin.key(data)  # what the generator cannot produce is refused before any file
        check_footprint(self.builtin, data, Path(out), f"the built-in data of {self.name}/{dataset}")
        return write_dataset(Path(out), lambda tmp: self.builtin.write(tmp, data), overwrite)

    def data_config(self) -> Any:
        """A default data section: an instance of the ``data`` field's type of :attr:`config_class`."""
        field = next((f for f in fields(self.config_class) if f.name == "data"), None)
        if field is None:
            raise UsageError(f"recipe '{self.name}' has no data section")
        return field.default_factory()

    def eval_batch_size(self, cfg: Any) -> int:
        """``eval.batch_size``, or ``train.batch_size`` when it is 0."""
        return cfg.eval.batch_size or cfg.train.batch_size

    def eval_loader(self, cfg: Any, split: str) -> DataLoader:
        """The batches of ``split`` in order, :meth:`eval_batch_size` at a time (what :meth:`evaluate` reads)."""
        return DataLoader(self.build_dataset(cfg, split), batch_size=self.eval_batch_size(cfg), shuffle=False,
                          collate_fn=self.collate, num_workers=cfg.train.num_workers)


# ------------------------------------------------------------------------------------------------------- registry
RECIPES = Registry("recipe", "lavo_zoo.plugins.recipes")  # the entry-point group: built-in recipes and plugins alike


def register_recipe(name: str):
    """Class decorator: ``@register_recipe("lm")`` on a :class:`Recipe` subclass (sets its ``name``)."""
    def decorator(cls: type[Recipe]) -> type[Recipe]:
        cls.name = name
        return RECIPES.register(name, cls)
    return decorator


def get_recipe(name: str) -> Recipe:
    """A fresh instance of recipe ``name`` (a built-in recipe or a plugin's).

    Raises:
        UsageError: no recipe has that name (naming the closest), or its entry is not a :class:`Recipe` subclass.
    """
    cls = RECIPES.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Recipe)):
        raise UsageError(f"recipe '{name}' ({RECIPES.entry(name).source}) is not a Recipe subclass")
    return cls()

