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

from lavo_zoo.errors import UsageError, did_you_mean


@dataclass
class Entry:
    """One registered name. ``target`` is the object or a lazy ``"module:attr"`` string."""

    name: str
    target: Any
    info: dict[str, Any] = field(default_factory=dict)
    source: str = "builtin"

    def load(self) -> Any:
        """The registered object, its module imported on first use (an entry point's target is ``module:attr``)."""
        if isinstance(self.target, str):
            module_name, _, attr = self.target.partition(":")
            obj: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else []:
                obj = getattr(obj, part)
            self.target = obj
        return self.target


class Registry:
    """A registry of one kind of thing (``kind`` is used in messages, ``group`` is the entry-point group)."""

    def __init__(self, kind: str, group: str, builtin_modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.group = group
        self._builtin_modules = builtin_modules
        self._entries: dict[str, Entry] = {}
        self._discovered = False

    def register(self, name: str, target: Any = None, *, source: str = "builtin", **info: Any) -> Any:
        """Register ``target`` under ``name``; without ``target`` returns a decorator."""
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
                source = "builtin" if ep.value.startswith("lavo_zoo.") else f"entry point ({ep.group})"
                self._entries[ep.name] = Entry(ep.name, ep.value, {}, source=source)

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
        """Rows for ``lavo-zoo list``: ``describe_one`` turns a loaded entry into a JSON-able dict."""
        return [{"name": n, **describe_one(self.entry(n))} for n in self.names(pattern)]
