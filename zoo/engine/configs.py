"""Named configs: finding a config by ``<domain>/<name>`` or path, and turning it into (recipe, validated config).

Named configs live in ``recipes/<domain>/configs/`` (or in the ``configs/`` folder beside a plugin recipe's module)
and are found here, through the recipe registry, so that :mod:`lavo_zoo.config` (the schema, YAML and validation)
stays free of any recipe.

    resolve_config("lm/tiny-lavo", ["train.max_steps=200"])   (recipe, validated config): what `train` runs
    config_from_dict(mapping)                                  the same from a loaded mapping (a checkpoint's)
    find_config / named_config / named_configs                 a config file, by name or path; every name
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from lavo_zoo.config import apply_overrides, from_dict, merge_layers, read_layers, recipe_name
from lavo_zoo.engine.recipe import RECIPES, Recipe, get_recipe
from lavo_zoo.errors import ConfigError, did_you_mean

# A config's ``launcher:`` section says where ``lavo-zoo compare`` runs the study's cells (lavo_zoo.compare.launchers:
# one machine, a Slurm cluster), not what a run trains: it is left out of the run's config (and so of config.yaml,
# the checkpoints and the check that a kept cell was trained with the study's config).
LAUNCHER_SECTION = "launcher"


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


def resolve_config(name_or_path: str | Path, overrides: list[str] = ()) -> tuple[Recipe, Any]:
    """The recipe and validated config that ``lavo-zoo train NAME_OR_PATH KEY=VALUE...`` runs.

    One way down: the file is found and every name its ``extends:`` chain gives resolved here, with the list of
    named configs made once; :mod:`lavo_zoo.config` then reads the chain, and merges it and the overrides under
    the recipe's schema, which validates the result.

    Args:
        name_or_path: a named config (``lm/tiny-lavo``) or a path to a YAML file.
        overrides: ``key=value`` strings (``train.max_steps=200``), applied after ``extends:`` is resolved.

    Returns:
        (a fresh instance of the recipe the config's ``recipe:`` names, the validated ``<Domain>Config``).

    Raises:
        ConfigError: the file is missing or malformed, a key is unknown or a value out of range (naming the key and
            the file).
    """
    path = find_config(name_or_path)
    layers = read_layers(path, named_configs())
    recipe = _recipe(recipe_name(layers, list(overrides)), str(path), list(overrides))
    return recipe, _validated(recipe, merge_layers(layers, recipe.config_class), list(overrides), str(path))


def config_section(name_or_path: str | Path, section: str) -> Any:
    """One top-level section of a config file with its ``extends:`` chain merged, unvalidated: what a caller reads
    beside the recipe's schema (``compare``: the ``launcher:`` section, :data:`LAUNCHER_SECTION`); None if absent.

    Args:
        name_or_path: a named config (``lm/tiny-lavo``) or a path to a YAML file.
        section: the top-level key.
    """
    return merge_layers(read_layers(find_config(name_or_path), named_configs())).get(section)


def config_from_dict(data: dict[str, Any], overrides: list[str] = (), source: str = "config") -> tuple[Recipe, Any]:
    """(recipe, validated config) from an already loaded mapping (e.g. a checkpoint's config.yaml) plus ``key=value``
    overrides; ``source`` names it in error messages. A ``launcher:`` section (:data:`LAUNCHER_SECTION`) is left out."""
    recipe = _recipe(recipe_name([(Path(source), data)], list(overrides)), source, list(overrides))
    return recipe, _validated(recipe, data, list(overrides), source)


def _recipe(name: str | None, source: str, overrides: list[str]) -> Recipe:
    if not name:
        raise ConfigError(f"{_with_overrides(source, overrides)} has no 'recipe:' key naming the domain "
                          "(e.g. recipe: lm)")
    return get_recipe(name)


def _validated(recipe: Recipe, data: dict[str, Any], overrides: list[str], source: str) -> Any:
    """The recipe's config from ``data`` with ``overrides`` applied under its schema, validated (a study's
    ``launcher:`` section, which says where its cells run and not what they train, left out)."""
    data = apply_overrides({k: v for k, v in data.items() if k != LAUNCHER_SECTION}, overrides, recipe.config_class)
    return from_dict(recipe.config_class, data, _with_overrides(source, overrides))


def _with_overrides(source: str, overrides: list[str]) -> str:
    return f"{source} with overrides {' '.join(overrides)}" if overrides else source
