"""Domain recipes (one folder each: model.py, data.py, recipe.py, configs/, README.md) and their registry.

Every ``<domain>/recipe.py`` here is imported on first use of the registry and registers its class with
:func:`register_recipe`. Third-party packages add domains through the ``lavo_zoo.recipes`` entry-point group.
"""
from __future__ import annotations

from pathlib import Path

from lavo_zoo.errors import UsageError
from lavo_zoo.recipes.base import Recipe, to_device
from lavo_zoo.registry import Registry

RECIPES = Registry(
    "recipe", "lavo_zoo.recipes",
    builtin_modules=tuple(f"{__name__}.{p.parent.name}.recipe"
                          for p in sorted(Path(__file__).parent.glob("*/recipe.py"))),
)


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


__all__ = ["RECIPES", "Recipe", "get_recipe", "register_recipe", "to_device"]
