"""Named configs: finding a config by ``<domain>/<name>`` or path, and turning it into (recipe, validated config).

Named configs live in ``recipes/<domain>/configs/`` (or in the ``configs/`` folder beside a plugin recipe's module)
and are found here, through the recipe registry, so that :mod:`lavo_zoo.config` (the schema, YAML and validation)
stays free of any recipe.

    resolve_config("lm/tiny-lavo", ["train.max_steps=200"])   (recipe, validated config): what `train` runs
    config_from_dict(mapping)                                  the same from a loaded mapping (a checkpoint's)
    find_config / named_config / available_configs            a config file, by name or path; every name
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from lavo_zoo.config import apply_overrides, from_dict, load_yaml
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


def load_config_file(path: Path) -> dict[str, Any]:
    """The mapping of config file ``path``, ``extends:`` (a path or a named config) and ``!delete`` resolved."""
    return load_yaml(path, named_config, available_configs)


def resolve_config(name_or_path: str | Path, overrides: list[str] = ()) -> tuple[Recipe, Any]:
    """The recipe and validated config that ``lavo-zoo train NAME_OR_PATH KEY=VALUE...`` runs.

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
    return config_from_dict(load_config_file(path), list(overrides), source=str(path))


def config_from_dict(data: dict[str, Any], overrides: list[str] = (), source: str = "config") -> tuple[Recipe, Any]:
    """(recipe, validated config) from an already loaded mapping (e.g. a checkpoint's config.yaml) plus ``key=value``
    overrides; ``source`` names it in error messages. A ``launcher:`` section (:data:`LAUNCHER_SECTION`) is left out."""
    data = apply_overrides({k: v for k, v in data.items() if k != LAUNCHER_SECTION}, list(overrides))
    if overrides:
        source = f"{source} with overrides {' '.join(overrides)}"
    name = data.get("recipe")
    if not name:
        raise ConfigError(f"{source} has no 'recipe:' key naming the domain (e.g. recipe: lm)")
    recipe = get_recipe(str(name))
    return recipe, from_dict(recipe.config_class, data, source)
