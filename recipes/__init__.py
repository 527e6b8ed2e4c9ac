"""Domain recipes (one folder each: model.py, data.py, recipe.py, configs/, README.md) and their registry.

Every ``<domain>/recipe.py`` here is imported on first use of the registry and registers its class with
:func:`register_recipe`. Third-party packages add domains through the ``lavo_zoo.recipes`` entry-point group.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lavo_zoo.errors import UsageError
from lavo_zoo.registry import Registry

if TYPE_CHECKING:
    from lavo_zoo.recipes.base import Recipe, to_device


def __getattr__(name: str) -> Any:
    """``Recipe`` and ``to_device`` load torch, so they are imported on first use: importing a recipe's cli.py (to
    list its commands in ``lavo-zoo --help``) stays light."""
    if name in ("Recipe", "to_device"):
        from lavo_zoo.recipes import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
    from lavo_zoo.recipes.base import Recipe

    cls = RECIPES.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Recipe)):
        raise UsageError(f"recipe '{name}' ({RECIPES.entry(name).source}) is not a Recipe subclass")
    return cls()


__all__ = ["RECIPES", "Recipe", "get_recipe", "register_recipe", "to_device"]
