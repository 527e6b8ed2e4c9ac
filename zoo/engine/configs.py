"""Named configs: finding a config by ``<domain>/<name>`` or path, reading it once, and turning it into (recipe,
validated config).

Named configs live in ``recipes/<domain>/configs/`` (or in the ``configs/`` folder beside a plugin recipe's module)
and are found here, through the recipe registry, so that :mod:`lavo_zoo.config` (the schema, YAML and validation)
stays free of any recipe.

    load_config("lm/tiny-lavo", overrides)                     the file read once: a LoadedConfig (path, recipe,
                                                               merged mapping, checked with the runs' overrides),
                                                               validated per run with its own
    resolve_config("lm/tiny-lavo", ["train.max_steps=200"])   (recipe, validated config): what `train` runs
    config_from_dict(mapping)                                  the same from a loaded mapping (a checkpoint's)
    find_config / named_config / named_configs                 a config file, by name or path; every name

A config file may also hold a section that another command reads beside the run (where a study runs its cells, say):
such sections are declared by that command's package in the ``lavo_zoo.plugins.config_sections`` entry-point group
(:data:`CONFIG_SECTIONS`, each with the dataclass that is its schema), kept apart when a config is read
(:attr:`LoadedConfig.sections`), validated there against their schema (:attr:`LoadedConfig.settings`, so that a
command reads its section as checked values, with the file's name in every message) and never part of a run's
config (nor of its config.yaml or checkpoints); the engine names none of them.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavo_zoo.config import apply_overrides, from_dict, merge_layers, read_layers, recipe_name
from lavo_zoo.engine.recipe import RECIPES, Recipe, get_recipe
from lavo_zoo.errors import ConfigError, UsageError, did_you_mean
from lavo_zoo.registry import Registry

# section name -> its schema ("module:attr" of a dataclass, imported when a config holding the section is read): the
# top-level sections of a config file that a command other than the run reads, declared by that command's package
# (lavo-zoo's own in its pyproject.toml)
CONFIG_SECTIONS = Registry("config section", "lavo_zoo.plugins.config_sections")


@dataclass(frozen=True)
class LoadedConfig:
    """A config read once: where it came from, the recipe it names, and its mapping (the file and its ``extends:``
    chain merged under the recipe's schema), checked when it is read with the overrides every run of it applies
    (``checked``); each run validates it with its own overrides after those (:meth:`validated`), without reading the
    file again.

    ``sections`` holds the file's sections that other commands read (:data:`CONFIG_SECTIONS`), as written and left
    out of ``data``; ``settings`` the same sections validated against the schema each is declared with
    (:func:`section_settings`).
    """

    source: str  # the file (or what the mapping came from), as messages name it
    recipe: Recipe
    data: dict[str, Any]
    sections: dict[str, Any]
    overrides: tuple[str, ...]  # every run's ``key=value`` overrides, applied before its own
    checked: Any  # the recipe's config from ``data`` and ``overrides``, validated
    settings: dict[str, Any]  # section name -> its schema's value (the sections of ``sections``, validated)

    @classmethod
    def of(cls, recipe: Recipe, data: dict[str, Any], source: str, overrides: Sequence[str] = ()) -> LoadedConfig:
        """``data`` (a merged mapping), the sections of other commands set apart, checked with ``overrides``.

        Args:
            recipe: the config's recipe.
            data: the merged mapping (the file over its bases).
            source: the config file (or name), for messages.
            overrides: KEY=VALUE overrides, applied over ``data`` under the recipe's schema.

        Raises:
            ConfigError: a key is unknown or a value out of range (naming the key, the file and the overrides), in
                the run's config or in a section of another command.
        """
        others = set(CONFIG_SECTIONS.names())
        run = {k: v for k, v in data.items() if k not in others}
        sections = {k: v for k, v in data.items() if k in others}
        return cls(source, recipe, run, sections, tuple(overrides), _validated(recipe, run, list(overrides), source),
                   {name: section_settings(name, value, source) for name, value in sections.items()})

    def validated(self, overrides: Sequence[str] = ()) -> Any:
        """The recipe's config: this mapping with the runs' overrides and then ``overrides`` applied under its
        schema, every key checked.

        Args:
            overrides: one run's own ``key=value`` strings (``train.seed=2``), applied in order.

        Raises:
            ConfigError: a key is unknown or a value out of range (naming the key, the file and the overrides).
        """
        return _validated(self.recipe, self.data, [*self.overrides, *overrides], self.source)


def section_settings(name: str, section: Any, source: str) -> Any:
    """Section ``name`` of a config file (another command's, :data:`CONFIG_SECTIONS`) validated against the
    dataclass it is declared with; an empty section (``launcher:`` alone) is the schema's defaults.

    Args:
        name: the section's name, as declared (``launcher``).
        section: its mapping as read (None: empty).
        source: the config file, for messages.

    Raises:
        ConfigError: the section has an unknown key or a value of the wrong type or out of range (named
            ``<name>.<key>``, with the file and the section).
        UsageError: ``name`` is not a declared section, or its declaration is not a dataclass.
        PluginError: the package that declares it cannot be imported.
    """
    schema = CONFIG_SECTIONS.get(name)
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        raise UsageError(f"config section '{name}' ({CONFIG_SECTIONS.entry(name).source}) is declared with "
                         f"{schema!r}, not a dataclass: declare the section's schema, the dataclass it is read into")
    return from_dict(schema, section or {}, f"{source}, section '{name}'", f"{name}.")


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


def config_dirs() -> dict[str, Path]:
    """``<domain>`` -> the folder of its named configs: ``recipes/<domain>/configs`` for the built-in recipes, and
    the ``configs/`` folder beside a plugin recipe's module."""
    dirs = {}
    for entry in RECIPES:
        folder = recipe_module_dir(entry.name)
        if folder is not None and (folder / "configs").is_dir():
            dirs[entry.name] = folder / "configs"
    return dirs


def named_configs() -> dict[str, Path]:
    """Every named config, ``<domain>/<name>`` -> its file, built-in and from plugin recipes."""
    return {f"{domain}/{p.stem}": p for domain, folder in config_dirs().items() for p in sorted(folder.glob("*.yaml"))}


def available_configs() -> list[str]:
    """Every named config, ``<domain>/<name>``, built-in and from plugin recipes."""
    return sorted(named_configs())


def named_config(name: str) -> Path | None:
    """The file of named config ``<domain>/<name>``, or None."""
    domain, _, stem = name.partition("/")
    folder = config_dirs().get(domain) if stem else None
    path = folder / f"{stem}.yaml" if folder is not None else None
    return path if path is not None and path.is_file() else None


def find_config(name_or_path: str | Path) -> Path:
    """A config file from a path or a ``<domain>/<name>`` name.

    Raises:
        ConfigError: the path is a directory or does not exist, or no config has that name (with the closest).
    """
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


def load_config(name_or_path: str | Path, overrides: Sequence[str] = ()) -> LoadedConfig:
    """Config ``name_or_path`` read once and checked with ``overrides``: the file is found and every name its
    ``extends:`` chain gives resolved here, with the list of named configs made once; :mod:`lavo_zoo.config` reads
    the chain and merges it under the schema of the recipe its ``recipe:`` names, which validates it with the
    overrides (:attr:`LoadedConfig.checked`).

    Args:
        name_or_path: a named config (``lm/tiny-lavo``) or a path to a YAML file.
        overrides: the ``key=value`` strings every run of it applies (``train.max_steps=200``).

    Raises:
        ConfigError: the file is missing or malformed, names no recipe, a key is unknown or a value out of range
            (naming the key, the file and the overrides).
        UsageError: the recipe it names is unknown.
    """
    path = find_config(name_or_path)
    layers = read_layers(path, named_configs())
    recipe = _recipe(recipe_name(layers, list(overrides)), str(path), list(overrides))
    return LoadedConfig.of(recipe, merge_layers(layers, recipe.config_class), str(path), overrides)


def resolve_config(name_or_path: str | Path, overrides: list[str] = ()) -> tuple[Recipe, Any]:
    """The recipe and validated config that ``lavo-zoo train NAME_OR_PATH KEY=VALUE...`` runs.

    The config read once and checked with ``overrides`` (:func:`load_config`).

    Args:
        name_or_path: a named config (``lm/tiny-lavo``) or a path to a YAML file.
        overrides: ``key=value`` strings (``train.max_steps=200``), applied after ``extends:`` is resolved.

    Returns:
        (a fresh instance of the recipe the config's ``recipe:`` names, the validated ``<Domain>Config``).

    Raises:
        ConfigError: the file is missing or malformed, a key is unknown or a value out of range (naming the key and
            the file).
    """
    loaded = load_config(name_or_path, overrides)
    return loaded.recipe, loaded.checked


def config_from_dict(data: dict[str, Any], overrides: Sequence[str] = (), source: str = "config") -> tuple[Recipe, Any]:
    """(recipe, validated config) from an already loaded mapping (a checkpoint's config.yaml, a study's config as it
    read it) plus ``key=value`` overrides; ``source`` names it in error messages. The sections of other commands
    (:data:`CONFIG_SECTIONS`) are left out.

    Args:
        data: the mapping, merged already.
        overrides: ``key=value`` strings, applied in order.
        source: where ``data`` came from.
    """
    recipe = _recipe(recipe_name([(Path(source), data)], list(overrides)), source, list(overrides))
    return recipe, LoadedConfig.of(recipe, data, source, overrides).checked


def _recipe(name: str | None, source: str, overrides: list[str]) -> Recipe:
    if not name:
        raise ConfigError(f"{_with_overrides(source, overrides)} has no 'recipe:' key naming the domain "
                          "(e.g. recipe: lm)")
    return get_recipe(name)


def _validated(recipe: Recipe, data: dict[str, Any], overrides: list[str], source: str) -> Any:
    """The recipe's config from ``data`` with ``overrides`` applied under its schema, validated."""
    data = apply_overrides(data, overrides, recipe.config_class)
    return from_dict(recipe.config_class, data, _with_overrides(source, overrides))


def _with_overrides(source: str, overrides: list[str]) -> str:
    return f"{source} with overrides {' '.join(overrides)}" if overrides else source
