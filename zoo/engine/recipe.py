"""The recipe contract, the recipe registry and the config lookup: how the core knows a domain.

A recipe is the glue for one domain (``recipes/<domain>/recipe.py``): it builds the model and the data from its
config, computes the training loss for a batch, produces (predictions, targets) for its evaluator, and names that
evaluator. Data for a split is a map-style ``torch.utils.data.Dataset`` so that the trainer can shuffle
deterministically and resume at an exact position. Every recipe runs on built-in data it generates itself when
``data.path`` is unset (:meth:`Recipe.data_path`).

The built-in recipes are declared in pyproject.toml's ``lavo_zoo.plugins.recipes`` entry-point group, as plugins
are, and imported on first use of one: the core never names a recipe module.
Named configs (``<domain>/<name>``) live in ``recipes/<domain>/configs/`` (or beside a plugin recipe's module) and
are found here, so that :mod:`lavo_zoo.config` stays free of any recipe.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from abc import ABC, abstractmethod
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

from lavo_zoo.config import RunConfig, apply_overrides, from_dict, load_yaml
from lavo_zoo.engine.env import builtin_dataset, cache_root
from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.errors import ConfigError, UsageError, ZooError, did_you_mean
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


def check_dataset(recipe: str, dataset: str | None, names: tuple[str, ...]) -> str:
    """``dataset`` (default: the first of ``names``) if it is one of ``names``, else a :class:`UsageError`."""
    dataset = dataset or names[0]
    if dataset not in names:
        raise UsageError(f"recipe '{recipe}' has no built-in dataset '{dataset}'{did_you_mean(dataset, names)}; "
                         f"choose one of {', '.join(names)} (lavo-zoo data {recipe}/<dataset>)")
    return dataset


class Recipe(ABC):
    """One domain. Subclasses set ``name`` (through :func:`register_recipe`), ``config_class`` and ``evaluator`` and
    implement the abstract methods; the other hooks have defaults (docs/architecture.md lists them all).

    Built-in data: ``datasets`` names what ``lavo-zoo data <recipe>/<dataset>`` can write, ``builtin_config`` maps
    such a name (and ``--size``) onto the data section, ``builtin_key`` says what the generated files depend on and
    ``write_builtin`` writes them in the real on-disk layout. :meth:`data_path` and :meth:`write_data` are built on
    those and are the same for every recipe: one generator, one cache.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_class: ClassVar[type[RunConfig]] = RunConfig
    evaluator: ClassVar[str] = "mean_loss"  # evaluator registry name
    splits: ClassVar[tuple[str, ...]] = SPLITS
    # the config the recipe contract test (tests/recipes/test_recipe_contract.py) trains for one step: seconds on a CPU
    tiny_config: ClassVar[str | None] = None
    datasets: ClassVar[tuple[str, ...]] = ()  # built-in datasets (`lavo-zoo data <recipe>/<name>`), the default first
    # the model card of a released checkpoint (`lavo-zoo export`): the task as (Hugging Face task type, readable name),
    # and one or two sentences on what a checkpoint of this recipe is not fit for
    task: ClassVar[tuple[str, str]] = ("other", "Other")
    limits: ClassVar[str] = ""
    predictor: ClassVar[type[Predictor] | None] = None  # its infer.py class: what lavo_zoo.load returns

    def resolve(self, cfg: Any) -> Any:
        """Fill the sizes that come from the data (vocabulary, channels, classes) into ``cfg.model``; called once
        before training, so that the run's config.yaml and checkpoints hold them and ``eval`` needs no data."""
        return cfg

    def dataset_name(self, data: Any) -> str:
        """How a model card names the data of data section ``data``: the last part of ``data.path``, else
        ``built-in <dataset>`` (the recipe's only built-in dataset, or the one ``builtin_key`` names)."""
        if getattr(data, "path", None):
            return Path(str(data.path)).expanduser().name or str(data.path)
        if len(self.datasets) == 1:
            return f"built-in {self.datasets[0]}"
        try:
            return f"built-in {self.builtin_key(data).get('dataset', self.name)}"
        except ZooError:
            return "built-in data"

    # ------------------------------------------------------------------------------------------- built-in data
    def data_config(self) -> Any:
        """A default data section: an instance of the ``data`` field's type of ``config_class``."""
        field = next((f for f in fields(self.config_class) if f.name == "data"), None)
        if field is None:
            raise UsageError(f"recipe '{self.name}' has no data section")
        return field.default_factory()

    def builtin_config(self, dataset: str, size: int | None) -> Any:
        """The data section whose built-in data ``lavo-zoo data <recipe>/<dataset> --size N`` writes. The default
        sets ``builtin_size`` (in the recipe's unit) when ``size`` is given."""
        data = self.data_config()
        if size is None:
            return data
        if not hasattr(data, "builtin_size"):
            raise UsageError(f"the built-in data of recipe '{self.name}' has a fixed size; drop --size")
        return replace(data, builtin_size=size)

    def builtin_key(self, data: Any) -> dict[str, Any]:
        """Everything the built-in files of data section ``data`` depend on (generator settings, the generator's
        version, the Python version where the data comes from its standard library), as JSON-able values: the key
        of the cache, so that a change generates a fresh copy and a stale one is never read. A ``dataset`` entry
        names the cached folder."""
        raise UsageError(f"recipe '{self.name}' has no built-in data; give data.path")

    def write_builtin(self, out: Path, data: Any) -> Path:
        """Generate the built-in data that data section ``data`` describes into the folder ``out`` (it exists), in
        the real dataset's on-disk layout; return the path to give as ``data.path`` (``out`` or a file in it)."""
        raise UsageError(f"recipe '{self.name}' cannot write built-in data; give data.path")

    def cache_dir(self, data: Any) -> Path:
        """The recipe's cache folder: ``data.cache_dir`` where the data section has one and it is set, else
        ``$LAVO_ZOO_CACHE/<recipe>`` (or the user's cache directory). Built-in data goes to its ``builtin/``."""
        return Path(data.cache_dir).expanduser() if getattr(data, "cache_dir", None) else cache_root() / self.name

    def data_path(self, data: Any) -> Path:
        """``data.path``, or the built-in data that ``data`` describes, generated once by :meth:`write_builtin`
        into ``<cache_dir>/builtin`` (atomically: concurrent runs and crashes never leave half a dataset)."""
        if data.path:
            return Path(data.path).expanduser()
        key = self.builtin_key(data)
        return builtin_dataset(self.cache_dir(data) / "builtin", str(key.get("dataset", self.name)), key,
                               lambda out: self.write_builtin(out, data))

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None,
                   overwrite: bool = False) -> Path:
        """``lavo-zoo data <recipe>[/<dataset>] --out DIR [--size N]``: the built-in data of ``dataset`` (default:
        the first of ``datasets``) written into ``out`` in the real on-disk layout; returns the ``data.path``.

        The files are generated in a temporary folder beside ``out`` and moved in once complete; a file of the same
        name already in ``out`` is refused before anything moves (replaced with ``overwrite``), so a user's own data
        is never lost and a failure (a full disk) leaves no partial file under a final name."""
        if not self.datasets:
            raise UsageError(f"recipe '{self.name}' cannot write its built-in data to disk")
        data = self.builtin_config(check_dataset(self.name, dataset, self.datasets), size)
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            made = self.write_builtin(tmp, data).relative_to(tmp)
            files = sorted(f.relative_to(tmp) for f in tmp.rglob("*") if f.is_file())
            taken = [f for f in files if (out / f).exists()]
            if taken and not overwrite:
                shown = ", ".join(str(out / f) for f in taken[:3]) + (f" and {len(taken) - 3} more" if len(taken) > 3
                                                                      else "")
                raise UsageError(f"{len(taken)} file(s) the built-in data would write already exist: {shown}. "
                                 "Nothing was written; give another --out, or add --overwrite to replace them.")
            for f in files:
                (out / f).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / f, out / f)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out / made

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


# ------------------------------------------------------------------------------------------------------- registry
RECIPES = Registry("recipe", "lavo_zoo.plugins.recipes")  # the entry-point group: built-in recipes and plugins alike


def register_recipe(name: str):
    """Class decorator: ``@register_recipe("lm")`` on a :class:`Recipe` subclass (sets its ``name``)."""
    def decorator(cls: type[Recipe]) -> type[Recipe]:
        cls.name = name
        return RECIPES.register(name, cls)
    return decorator


def get_recipe(name: str) -> Recipe:
    """A fresh instance of recipe ``name``."""
    cls = RECIPES.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Recipe)):
        raise UsageError(f"recipe '{name}' ({RECIPES.entry(name).source}) is not a Recipe subclass")
    return cls()


def recipe_module_dir(entry_name: str) -> Path | None:
    """The folder of recipe ``entry_name``'s module (``recipes/<domain>`` for a built-in one), found without
    importing it; None when it cannot be found (a broken plugin is reported when it is used, not when listing)."""
    target = RECIPES.entry(entry_name).target
    module = target.partition(":")[0] if isinstance(target, str) else getattr(target, "__module__", "")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).parent if spec is not None and spec.origin else None


# ---------------------------------------------------------------------------------------------- named configs
def config_dirs() -> dict[str, Path]:
    """``<domain>`` -> the folder of its named configs: ``recipes/<domain>/configs`` for the built-in recipes, and
    the ``configs/`` folder beside a plugin recipe's module."""
    dirs = {}
    for entry in RECIPES:
        folder = recipe_module_dir(entry.name)
        if folder is not None and (folder / "configs").is_dir():
            dirs[entry.name] = folder / "configs"
    return dirs


def available_configs() -> list[str]:
    """Every named config, ``<domain>/<name>``, built-in and from plugin recipes."""
    return sorted(f"{domain}/{p.stem}" for domain, folder in config_dirs().items() for p in folder.glob("*.yaml"))


def named_config(name: str) -> Path | None:
    """The file of named config ``<domain>/<name>``, or None."""
    domain, _, stem = name.partition("/")
    folder = config_dirs().get(domain) if stem else None
    path = folder / f"{stem}.yaml" if folder is not None else None
    return path if path is not None and path.is_file() else None


def find_config(name_or_path: str | Path) -> Path:
    """A config file from a path or a ``<domain>/<name>`` name."""
    path = Path(name_or_path)
    if path.is_dir():
        raise ConfigError(f"config path {path} is a directory, not a config file; give a .yaml file "
                          f"(e.g. {path / 'config.yaml'} in a run directory) or a <domain>/<name>")
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    found = named_config(str(name_or_path))
    if found is not None:
        return found
    raise ConfigError(f"no config named '{name_or_path}'{did_you_mean(str(name_or_path), available_configs())}; "
                      f"give a <domain>/<name> from `lavo-zoo list configs` or a path to a .yaml file")


def load_config_file(path: Path) -> dict[str, Any]:
    """The mapping of config file ``path``, ``extends:`` (a path or a named config) and ``!delete`` resolved."""
    return load_yaml(path, named_config, available_configs)


def resolve_config(name_or_path: str | Path, overrides: list[str] = ()) -> tuple[Recipe, Any]:
    """(recipe, validated config) from a config name or path plus ``key=value`` overrides."""
    path = find_config(name_or_path)
    return config_from_dict(load_config_file(path), list(overrides), source=str(path))


def config_from_dict(data: dict[str, Any], overrides: list[str] = (), source: str = "config") -> tuple[Recipe, Any]:
    """(recipe, validated config) from an already loaded mapping (e.g. a checkpoint's config.yaml)."""
    data = apply_overrides(data, list(overrides))
    if overrides:
        source = f"{source} with overrides {' '.join(overrides)}"
    name = data.get("recipe")
    if not name:
        raise ConfigError(f"{source} has no 'recipe:' key naming the domain (e.g. recipe: lm)")
    recipe = get_recipe(str(name))
    return recipe, from_dict(recipe.config_class, data, source)
