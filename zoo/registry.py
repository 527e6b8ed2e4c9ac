"""Name -> object registries (attentions, recipes, evaluators) that third-party packages extend via entry points.

An entry's target is either the object itself or a lazy ``"module:attr"`` string, imported on first use, so that
listing or building one entry never imports every domain. Third-party packages add entries without editing this
repository by declaring an entry point in the registry's group, e.g. in their ``pyproject.toml``::

    [project.entry-points."lavo_zoo.plugins.attentions"]
    my_attention = "my_pkg.attn:MyAttention"
"""
from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from lavo_zoo.errors import PluginError, UsageError, did_you_mean


@dataclass
class Entry:
    """One registered name. ``target`` is the object or a lazy ``"module:attr"`` string."""

    name: str
    target: Any
    info: dict[str, Any] = field(default_factory=dict)
    source: str = "builtin"
    entry_point: Any = None  # the entry point a plugin's entry came from (its failures are named by it)

    def load(self) -> Any:
        """The registered object, its module imported on first use (an entry point's target is ``module:attr``).

        Raises:
            PluginError: a plugin's (an entry point's) module that raises or exits when imported, or lacks the
                object: named with its entry point and package (:func:`plugin_failure`).
        """
        if isinstance(self.target, str):
            module_name, _, attr = self.target.partition(":")
            try:
                obj: Any = importlib.import_module(module_name)
                for part in attr.split(".") if attr else []:
                    obj = getattr(obj, part)
            except (Exception, SystemExit) as e:
                if self.entry_point is None:
                    raise
                raise PluginError(plugin_failure(self.entry_point, e)) from None
            self.target = obj
        return self.target


def plugin_failure(ep: Any, error: BaseException) -> str:
    """Why the plugin of entry point ``ep`` cannot be used, and how to repair it: the entry point, its group, the
    package that declares it and the error of its import."""
    dist = getattr(ep, "dist", None)
    package = f"the package {dist.name} {dist.version}" if dist is not None else "a package"
    what = f"{type(error).__name__}: {error}" if not isinstance(error, SystemExit) else f"it exits ({error.code})"
    name = dist.name if dist is not None else "that package"
    return (f"the plugin '{ep.name}' (entry point {ep.name} = {ep.value} in group {ep.group}, declared by {package}) "
            f"cannot be loaded: {what}. Repair it (pip install --force-reinstall {name}) or remove it (pip uninstall "
            f"{name}); lavo-zoo works without it")


class Registry:
    """A registry of one kind of thing (``kind`` is used in messages, ``group`` is the entry-point group)."""

    def __init__(self, kind: str, group: str, builtin_modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.group = group
        self._builtin_modules = builtin_modules
        self._entries: dict[str, Entry] = {}
        self._discovered = False

    def register(self, name: str, target: Any = None, *, source: str = "builtin", **info: Any) -> Any:
        """Register ``target`` under ``name``; without ``target`` returns a decorator.

        Args:
            name: the registry name.
            target: the object, a lazy ``"module:attr"`` string, or None (a decorator is returned).
            source: who registers it (``builtin``, a plugin's name), for messages.
            **info: what the registry keeps beside it (a description, capabilities).

        Raises:
            ValueError: ``name`` is registered already to another object (a lazy entry may be replaced by its
                object).
        """
        if target is None:
            def decorator(obj: Any) -> Any:
                self.register(name, obj, source=source, **info)
                return obj
            return decorator
        if name in self._entries and self._entries[name].target is not target:
            old = self._entries[name]
            if not (isinstance(old.target, str) and not isinstance(target, str)):
                raise ValueError(f"{self.kind} '{name}' is already registered (by {old.source})")
            info = {**old.info, **info}
        self._entries[name] = Entry(name, target, dict(info), source)
        return target

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for module in self._builtin_modules:
            importlib.import_module(module)
        for ep in entry_points(group=self.group):
            if ep.name not in self._entries:  # lavo-zoo's own entry points (the built-in recipes) are built-ins
                builtin = ep.value.startswith("lavo_zoo.")
                self._entries[ep.name] = Entry(ep.name, ep.value, {}, source="builtin" if builtin else
                                               f"entry point ({ep.group})", entry_point=None if builtin else ep)

    def names(self, pattern: str | None = None) -> list[str]:
        """Every registered name, sorted, or those matching the glob ``pattern``."""
        self._discover()
        names = sorted(self._entries)
        return [n for n in names if pattern is None or fnmatch.fnmatch(n, pattern)]

    def entry(self, name: str) -> Entry:
        """The entry of ``name`` (not loaded); an unknown name is a :class:`UsageError` with the closest and every known
        name."""
        self._discover()
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            raise UsageError(f"unknown {self.kind} '{name}'{did_you_mean(name, self._entries)}; known: {known}")
        return self._entries[name]

    def get(self, name: str) -> Any:
        """The object registered as ``name``, loaded (:meth:`entry`, :meth:`Entry.load`)."""
        return self.entry(name).load()

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        self._discover()
        return iter([self._entries[n] for n in sorted(self._entries)])

    def describe(self, pattern: str | None, describe_one: Callable[[Entry], dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows for ``lavo-zoo list``: ``describe_one`` turns a loaded entry into a JSON-able dict; a plugin that
        cannot be loaded is a row with its ``error`` (the others are listed)."""
        rows = []
        for n in self.names(pattern):
            try:
                rows.append({"name": n, **describe_one(self.entry(n))})
            except PluginError as e:
                rows.append({"name": n, "error": str(e), "source": self.entry(n).source})
        return rows
