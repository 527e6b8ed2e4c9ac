"""Evaluators: one protocol (:class:`Evaluator`, in :mod:`.base`) and one module per metric family (``loss``,
``perplexity``, ``classification``, ``forecast``, ``chamfer``, ``rouge``, ``mcd``), in a registry that
``lavo-zoo list evaluators`` reads and third-party packages extend through the ``lavo_zoo.plugins.evaluators``
entry-point group. An evaluator that sets ``files`` and implements ``from_files`` scores saved predictions
(``lavo-zoo score <name>``)."""
from __future__ import annotations

import pkgutil

from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.registry import Registry

EVALUATORS = Registry(
    "evaluator", "lavo_zoo.plugins.evaluators",
    builtin_modules=tuple(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)
                          if m.name != "base" and not m.name.startswith("_")),
)


def register_evaluator(name: str):
    """Class decorator: ``@register_evaluator("perplexity")`` on an :class:`Evaluator` subclass."""
    return EVALUATORS.register(name)


def build_evaluator(name: str, **options) -> Evaluator:
    """A fresh evaluator ``name`` (built-in or a plugin's) with its ``options`` (e.g. ``num_classes``)."""
    return EVALUATORS.get(name)(**options)


__all__ = ["EVALUATORS", "Evaluator", "build_evaluator", "register_evaluator"]
