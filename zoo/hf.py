"""The bridge to Hugging Face transformers: which recipes have a transformers form, and their registration with
transformers' Auto classes.

A recipe whose models can live as transformers models declares a *transformers plugin* in the entry-point group
``lavo_zoo.plugins.transformers`` under the recipe's name, pointing at an object (pyproject.toml declares the lm
recipe's). A plugin has

- ``register_config()``: registers its ``PreTrainedConfig`` with ``AutoConfig``;
- ``register_model()``: registers its model classes (``AutoModelForCausalLM``, ...);
- ``export_folder(checkpoint, out, card)``: writes a checkpoint directory as a folder ``from_pretrained`` loads,
  with the model card ``card``; ``card_use()``: the card's Use section (Markdown) for such a folder;
- ``import_folder(folder, out)``: writes such a folder (or one that transformers' ``save_pretrained`` /
  ``Trainer`` wrote) back as a checkpoint directory, which ``lavo-zoo eval`` and ``lavo_zoo.load`` read.

``import lavo_zoo`` calls :func:`install_auto_registration`, which costs no import of transformers: the plugins
register when transformers' own Auto modules are imported (``transformers.models.auto.configuration_auto`` for the
configs, ``...modeling_auto`` for the models), or at once where they already are. So ``import lavo_zoo`` followed by
``AutoModelForCausalLM.from_pretrained(folder)`` works, in either import order.
"""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

GROUP = "lavo_zoo.plugins.transformers"
# transformers module -> the plugin method to call once it is imported
_TRIGGERS = {"transformers.models.auto.configuration_auto": "register_config",
             "transformers.models.auto.modeling_auto": "register_model"}


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points  # here: `import lavo_zoo` stays light

    return list(entry_points(group=GROUP))


def plugin_names() -> list[str]:
    """The recipes that have a transformers form (the entry points of :data:`GROUP`)."""
    return sorted(ep.name for ep in _entry_points())


def get_plugin(recipe: str) -> Any:
    """The transformers plugin of ``recipe``; a :class:`UsageError` naming the recipes that have one otherwise."""
    from lavo_zoo.errors import UsageError

    found = [ep for ep in _entry_points() if ep.name == recipe]
    if not found:
        names = ", ".join(plugin_names()) or "none"
        raise UsageError(f"recipe '{recipe}' has no transformers format (recipes with one: {names}); export it as a "
                         "lavo-zoo archive instead (lavo-zoo export CKPT OUT.tar.gz)")
    return found[0].load()


def register(method: str) -> None:
    """Call ``method`` (``register_config`` or ``register_model``) of every installed plugin. A plugin that fails
    is reported as a warning: transformers itself keeps working."""
    for ep in _entry_points():
        try:
            getattr(ep.load(), method)()
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break `import transformers`
            import warnings

            warnings.warn(f"lavo-zoo: the transformers plugin '{ep.name}' ({ep.value}) failed to register "
                          f"({method}): {type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)


def install_auto_registration() -> None:
    """Register every plugin with transformers' Auto classes now for the Auto modules already imported, and when
    the others are imported (once per process)."""
    if any(isinstance(f, _AfterImport) for f in sys.meta_path):
        return
    pending = {}
    for module, method in _TRIGGERS.items():
        if module in sys.modules:
            register(method)
        else:
            pending[module] = method
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending))


class _AfterImport:
    """A meta path finder that finds nothing itself: for the watched modules it wraps the real loader so that, once
    the module has run, the plugins register (the first time only). (Not an ``importlib.abc`` subclass: importing
    that costs ``import lavo_zoo`` more than this whole module.)"""

    def __init__(self, pending: dict[str, str]) -> None:
        self.pending = pending

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        method = self.pending.get(fullname)
        if method is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        del self.pending[fullname]
        spec.loader = _ThenRegister(spec.loader, method)
        return spec


class _ThenRegister:
    """A loader that runs the real one, then :func:`register` (``method``)."""

    def __init__(self, loader: Any, method: str) -> None:
        self.loader = loader
        self.method = method

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        register(self.method)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, resource readers ...
        return getattr(self.loader, name)
