"""The attention zoo: LAVO and the baselines behind one contract (see :mod:`lavo_zoo.attention.base`).

Every module or package in this folder (except ``base``, ``common``, ``spec``, ``ops`` and ``_private`` ones) is
imported on first use of the registry, so a new mechanism is one new file (or package) that decorates its class with
:func:`register_attention`; the pieces mechanisms share are in ``common``, the kernels several of them use in
``ops``. Beside each mechanism sits its slow, loop or dense reference ``naive(attn, x, padding_mask, ...)``, which
takes the module and its inputs (in the mechanism's module, or in the ``naive`` module of its package);
tests/attention/test_naive_references.py compares every registered mechanism with its ``naive``.
Third-party packages add mechanisms through the ``lavo_zoo.plugins.attentions`` entry-point group. Configs select a
mechanism with :class:`AttentionSpec` (``lavo_zoo.attention.spec``).
"""
from __future__ import annotations

import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any

from lavo_zoo.attention.base import PATTERNS, Attention
from lavo_zoo.attention.spec import SITE_PATTERNS, AttentionSpec, SiteAttention
from lavo_zoo.errors import OptionError, UsageError, did_you_mean
from lavo_zoo.registry import Registry


def _is_mechanism_module(name: str) -> bool:
    """Modules named base, common, spec, ops (shared kernels) or _private are not mechanisms."""
    return name not in ("base", "common", "spec", "ops") and not name.startswith("_")


ATTENTIONS = Registry(
    "attention", "lavo_zoo.plugins.attentions",
    builtin_modules=tuple(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)
                          if _is_mechanism_module(m.name)),
)


def register_attention(name: str):
    """Class decorator: ``@register_attention("lavo")`` on an :class:`Attention` subclass."""
    def decorator(cls: type[Attention]) -> type[Attention]:
        if not (isinstance(cls, type) and issubclass(cls, Attention)):
            raise TypeError(f"register_attention('{name}') expects an Attention subclass, got {cls!r}")
        return ATTENTIONS.register(name, cls)
    return decorator


@dataclass(frozen=True)
class AttentionInfo:
    name: str
    patterns: tuple[str, ...]
    streaming: bool
    description: str
    options: dict[str, Any]  # constructor options beyond embed_dim/num_heads/pattern, with defaults
    # how step-by-step decoding runs each decoder pattern, e.g. ("causal:state", "cross:prefix"); see
    # Attention.decoding: state / cache / source, or prefix = falls back to re-running the prefix
    decoding: tuple[str, ...] = ()


def _options(cls: type[Attention]) -> dict[str, Any]:
    params = inspect.signature(cls.__init__).parameters
    return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in params.items()
            if n not in ("self", "embed_dim", "num_heads", "pattern") and p.kind is not p.VAR_KEYWORD}


def attention_class(name: str) -> type[Attention]:
    cls = ATTENTIONS.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Attention)):
        raise UsageError(f"attention '{name}' ({ATTENTIONS.entry(name).source}) is not an Attention subclass")
    return cls


def attention_info(name: str) -> AttentionInfo:
    cls = attention_class(name)
    doc = cls.description or (inspect.getdoc(cls) or "").split("\n")[0]
    decoding = tuple(f"{p}:{cls.decoding(p)}" for p in ("causal", "cross") if cls.decoding(p))
    return AttentionInfo(name, tuple(cls.patterns), bool(cls.streaming), doc, _options(cls), decoding)


def list_attentions(pattern: str | None = None, supports: str | None = None) -> list[AttentionInfo]:
    """Registered attentions (names matching the glob ``pattern``) with their patterns and streaming support;
    ``supports``: only those that can do this attention pattern (causal, noncausal, cross)."""
    if supports is not None and supports not in PATTERNS:
        raise UsageError(f"unknown attention pattern '{supports}'{did_you_mean(supports, PATTERNS)}; "
                         f"choose one of {', '.join(PATTERNS)}")
    infos = [attention_info(n) for n in ATTENTIONS.names(pattern)]
    return [i for i in infos if supports is None or supports in i.patterns]


def build_attention(name: str, embed_dim: int, num_heads: int, pattern: str = "causal", **options: Any) -> Attention:
    """Build attention ``name`` for ``pattern``; unknown options and unsupported patterns are clear errors."""
    cls = attention_class(name)
    if pattern not in PATTERNS:
        raise UsageError(f"unknown attention pattern '{pattern}'{did_you_mean(pattern, PATTERNS)}; "
                         f"choose one of {', '.join(PATTERNS)}")
    if pattern not in cls.patterns:
        raise UsageError(f"attention '{name}' does not support pattern '{pattern}'; "
                         f"it supports: {', '.join(cls.patterns)}")
    valid = _options(cls)
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values())
    for key in options:
        if key not in valid and not has_var_kw:
            raise UsageError(f"attention '{name}' has no option '{key}'{did_you_mean(key, valid)}; "
                             f"its options: {', '.join(valid) or 'none'}")
    try:
        return cls(embed_dim=embed_dim, num_heads=num_heads, pattern=pattern, **options)
    except ValueError as e:  # an option value the mechanism refuses (e.g. num_bases > head_dim): a usage error
        raise OptionError(f"attention '{name}': {e}") from None


__all__ = ["ATTENTIONS", "PATTERNS", "SITE_PATTERNS", "Attention", "AttentionInfo", "AttentionSpec", "SiteAttention",
           "attention_class", "attention_info", "build_attention", "list_attentions", "register_attention"]
