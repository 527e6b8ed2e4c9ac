"""The attention registry: name -> :class:`~lavo_zoo.attention.base.Attention` class, and the one check of a name,
a pattern and option names that every caller uses (:func:`build_attention`, :class:`~lavo_zoo.attention.spec.
AttentionSpec` when a config is read, ``lavo-zoo compare`` before a study starts).

The built-in mechanisms are listed by name in :data:`BUILTIN_MECHANISMS` (as timm's ``models/__init__.py`` lists
its models), each with the module beside this one that registers it, imported on first use of the registry: a new
mechanism is one line there, and a helper module can never become one. Third-party packages add mechanisms through
the ``lavo_zoo.plugins.attentions`` entry-point group.
"""
from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from lavo_zoo.attention.base import PATTERNS, Attention
from lavo_zoo.errors import ConfigError, OptionError, UsageError, did_you_mean
from lavo_zoo.free_memory import available_memory, format_bytes
from lavo_zoo.registry import Registry

_PACKAGE = __name__.rpartition(".")[0]  # lavo_zoo.attention
# the constructor arguments every attention takes; the others are its options
_CONTRACT_ARGUMENTS = ("self", "embed_dim", "num_heads", "pattern")

# The built-in mechanisms: registry name -> the module (or package) of lavo_zoo.attention that registers it.
BUILTIN_MECHANISMS = {
    "abc": "abc_attention",
    "based": "based",
    "cosformer": "cosformer",
    "deltanet": "deltanet",
    "gated_deltanet": "gated_deltanet",
    "gated_deltanet2": "gated_deltanet2",
    "gla": "gla",
    "kda": "kda",
    "lara": "lara",
    "lavo": "lavo",
    "local": "local",
    "longshort": "longshort",
    "mamba2": "mamba2",
    "mean": "mean",
    "nystromformer": "nystromformer",
    "performer": "performer",
    "probsparse": "probsparse",
    "s4d": "s4d",
    "sdpa": "sdpa",
    "vanilla": "vanilla",
}

ATTENTIONS = Registry("attention", "lavo_zoo.plugins.attentions",
                      builtin_modules=tuple(f"{_PACKAGE}.{m}" for m in dict.fromkeys(BUILTIN_MECHANISMS.values())))


def register_attention(name: str) -> Callable[[type[Attention]], type[Attention]]:
    """Class decorator that registers an :class:`Attention` subclass under ``name``.

    Example: ``@register_attention("lavo")`` above ``class LavoAttention(Attention)``.

    Args:
        name: the registry name configs and commands select the mechanism by (``attention: {name: lavo}``).

    Returns:
        The decorator; it returns the class unchanged.

    Raises:
        TypeError: the decorated object is not an :class:`Attention` subclass.
        ValueError: another class is already registered under ``name``.
    """
    def decorator(cls: type[Attention]) -> type[Attention]:
        if not (isinstance(cls, type) and issubclass(cls, Attention)):
            raise TypeError(f"register_attention('{name}') expects an Attention subclass, got {cls!r}")
        return ATTENTIONS.register(name, cls)
    return decorator


@dataclass(frozen=True)
class AttentionInfo:
    """What ``lavo-zoo list attentions`` shows of one registered mechanism."""

    name: str
    patterns: tuple[str, ...]
    streaming: bool
    description: str
    options: dict[str, Any]  # constructor options beyond embed_dim/num_heads/pattern, with defaults
    # how step-by-step decoding runs each decoder pattern, e.g. ("causal:state", "cross:prefix"); see
    # Attention.decoding: state / cache / source, or prefix = falls back to re-running the prefix
    decoding: tuple[str, ...] = ()
    family: str = ""          # e.g. "linear attention, delta rule"
    state: str = ""           # the causal decoding state's size, e.g. "H x (D/H) x (D/H) (+ conv)"
    noncausal: str = ""       # what a noncausal layer keeps for its queries (where the mechanism declares it)


def option_defaults(cls: type[Attention]) -> dict[str, Any]:
    """{option: default (None where it has none)} of the constructor of ``cls`` beyond embed_dim, num_heads and
    pattern (``**kwargs`` is not an option)."""
    params = inspect.signature(cls.__init__).parameters
    return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in params.items()
            if n not in _CONTRACT_ARGUMENTS and p.kind is not p.VAR_KEYWORD}


def _takes_any_option(cls: type[Attention]) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values())


def attention_class(name: str) -> type[Attention]:
    """The class registered under ``name`` (imported on first use).

    Raises:
        UsageError: ``name`` is not registered, or a plug-in registered something that is not an Attention subclass.
    """
    cls = ATTENTIONS.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Attention)):
        raise UsageError(f"attention '{name}' ({ATTENTIONS.entry(name).source}) is not an Attention subclass")
    return cls


def check_pattern(pattern: str) -> None:
    """Raise a :class:`UsageError` unless ``pattern`` is one of :data:`~lavo_zoo.attention.base.PATTERNS`."""
    if pattern not in PATTERNS:
        raise UsageError(f"unknown attention pattern '{pattern}'{did_you_mean(pattern, PATTERNS)}; "
                         f"choose one of {', '.join(PATTERNS)}")


def check_attention(name: str, pattern: str | None = None, options: Iterable[str] = (),
                    key: str | None = None) -> type[Attention]:
    """The one check of an attention selection: the name is registered, the mechanism supports ``pattern`` and takes
    every option named, and (``options`` a mapping) each value is of its option's type (:func:`option_type_problem`).
    Option *ranges* are checked by the mechanism when it is built (:func:`build_attention`).

    Args:
        name: a registry name (``lavo-zoo list attentions``).
        pattern: causal, noncausal or cross; None checks no pattern.
        options: option names, or a mapping {option: value} (its values are then type-checked too).
        key: the config key the selection was read from (``model.attention``, ``model.attention.cross``): the errors
            are then :class:`ConfigError` naming ``<key>.name``, ``<key>`` or ``<key>.<option>``.

    Returns:
        The mechanism's class.

    Raises:
        UsageError: (a :class:`ConfigError` with ``key``) an unknown name, an unknown or unsupported pattern, an
            option the mechanism does not take, an option value of the wrong type (an
            :class:`~lavo_zoo.errors.OptionError` without ``key``); each message says what to choose instead.
    """
    error = UsageError if key is None else ConfigError

    def where(suffix: str = "") -> str:
        return "" if key is None else f"config key '{key}{suffix}': "

    if name not in ATTENTIONS:
        names = ATTENTIONS.names()
        raise error(f"{where('.name')}unknown attention '{name}'{did_you_mean(name, names)}; choose one of "
                    f"{', '.join(names)}")
    cls = attention_class(name)
    if pattern is not None:
        check_pattern(pattern)
        if pattern not in cls.patterns:
            able = [n for n in ATTENTIONS.names() if pattern in attention_class(n).patterns]
            raise error(f"{where()}attention '{name}' does not support pattern '{pattern}'; it supports: "
                        f"{', '.join(cls.patterns)}; mechanisms with '{pattern}': {', '.join(able)}")
    if not _takes_any_option(cls):
        valid = option_defaults(cls)
        for option in options:
            if option not in valid:
                raise error(f"{where('.' + option)}attention '{name}' has no option '{option}'"
                            f"{did_you_mean(option, valid)}; its options: {', '.join(valid) or 'none'}")
    if isinstance(options, Mapping):
        params = inspect.signature(cls.__init__).parameters
        for option, value in options.items():
            annotation = params[option].annotation if option in params else None
            problem = option_type_problem(annotation, value)
            if problem is not None:
                message = (f"{where('.' + option)}attention '{name}': option '{option}' {problem}; its default is "
                           f"{params[option].default!r}")
                raise (OptionError if key is None else ConfigError)(message)
    return cls


# an option's annotation (the constructor's, a string under `from __future__ import annotations`) -> its kind
_KINDS = {"int": "an integer", "float": "a finite number", "bool": "true or false", "str": "a string"}


def option_type_problem(annotation: Any, value: Any) -> str | None:
    """Why ``value`` is not of the option's declared type (None when it is, or the type is not a plain one).

    The plain annotations are ``int``, ``float``, ``bool``, ``str`` and their unions with ``None``: an int option
    takes an integer (not a bool, not 2.0), a float option any finite real number (not a bool, NaN or infinity), a
    bool option true or false, a str option a string. Other annotations (a plug-in's own types) are not checked.

    Args:
        annotation: the constructor parameter's annotation (a type or its name).
        value: the value given.

    Returns:
        "must be an integer, got str '8'"-style text, or None.
    """
    if isinstance(annotation, type):
        annotation = annotation.__name__
    if not isinstance(annotation, str):
        return None
    kinds = [part.strip() for part in annotation.split("|")]
    optional = "None" in kinds
    kinds = [k for k in kinds if k != "None"]
    if len(kinds) != 1 or kinds[0] not in _KINDS:
        return None
    kind = kinds[0]
    if value is None:
        return None if optional else f"must be {_KINDS[kind]}, got nothing (null)"
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        ok = False
    elif kind == "int":
        ok = isinstance(value, numbers.Integral)
    else:
        ok = math.isfinite(value)
    if ok:
        return None
    return f"must be {_KINDS[kind]}{' or null' if optional else ''}, got {type(value).__name__} {value!r}"


def attention_info(name: str) -> AttentionInfo:
    """What one registered mechanism is and can do.

    Args:
        name: a registry name.

    Returns:
        Its :class:`AttentionInfo`: patterns, streaming support, one-line description, options with their defaults,
        how each decoder pattern decodes step by step, its family, the size of its causal decoding state and what
        a noncausal layer of it keeps (where it declares that).

    Raises:
        UsageError: ``name`` is not registered.
    """
    cls = attention_class(name)
    doc = cls.description or (inspect.getdoc(cls) or "").split("\n")[0]
    decoding = tuple(f"{p}:{cls.decoding(p)}" for p in ("causal", "cross") if cls.decoding(p))
    noncausal = cls.noncausal_state if "noncausal" in cls.patterns else ""
    return AttentionInfo(name, tuple(cls.patterns), bool(cls.streaming), doc, option_defaults(cls), decoding,
                         cls.family, cls.decoding_state, noncausal)


def list_attentions(pattern: str | None = None, supports: str | None = None) -> list[AttentionInfo]:
    """The registered mechanisms, sorted by name.

    Args:
        pattern: a glob over the names (``"l*"``); None lists every one.
        supports: only the mechanisms that can do this attention pattern (causal, noncausal, cross).

    Returns:
        One :class:`AttentionInfo` per mechanism.

    Raises:
        UsageError: ``supports`` is not an attention pattern.
    """
    if supports is not None:
        check_pattern(supports)
    infos = [attention_info(n) for n in ATTENTIONS.names(pattern)]
    return [i for i in infos if supports is None or supports in i.patterns]


def build_attention(name: str, embed_dim: int, num_heads: int, pattern: str = "causal", **options: Any) -> Attention:
    """Build a registered attention layer.

    Args:
        name: a registry name (``lavo-zoo list attentions``).
        embed_dim: the model width D; inputs are (B, T, D).
        num_heads: the number of heads H (D must divide by H).
        pattern: causal, noncausal or cross.
        **options: the mechanism's own constructor options (``num_bases=32``).

    Returns:
        The :class:`Attention` module, in training mode, on the CPU.

    Raises:
        UsageError: an unknown name or pattern, a pattern the mechanism does not support, an option it does not
            take (:func:`check_attention`).
        OptionError: an option value of the wrong type or one the mechanism refuses (also a ValueError), or options
            whose layer could not fit in this machine's memory (:func:`check_layer_fits`), before it is allocated.
    """
    cls = check_attention(name, pattern, options)

    def build() -> Attention:
        try:
            return cls(embed_dim=embed_dim, num_heads=num_heads, pattern=pattern, **options)
        except ValueError as e:  # an option value the mechanism refuses (e.g. num_bases > head_dim): a usage error
            raise OptionError(f"attention '{name}': {e}") from None

    try:  # first on the meta device, which allocates nothing: what the layer would take
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            shape = build()
    except OptionError:
        raise
    except Exception:  # noqa: BLE001 - a layer that cannot be built on meta: built as it is, unchecked
        shape = None
    if shape is not None and torch.get_default_device().type != "meta":  # on meta, its caller counts the whole model
        check_layer_fits(shape, name, options)
    return build()


def check_layer_fits(layer: Attention, name: str, options: Mapping[str, Any]) -> None:
    """Refuse, before it is allocated, a layer whose parameters, buffers and the recurrent state of one sequence
    (``sequence_state_bytes``, where the mechanism declares it) need more memory than this machine has free: options
    far too large (``state_size=10**8``) get this error, not the allocator's.

    Args:
        layer: the layer, built on the meta device.
        name: its registry name, for the message.
        options: its options, for the message.

    Raises:
        OptionError: naming the bytes needed, those free and the options given.
    """
    tensors = [*layer.parameters(), *layer.buffers()]
    need = sum(t.numel() * t.element_size() for t in tensors) + int(getattr(layer, "sequence_state_bytes", 0))
    room = available_memory("cpu")
    if need > room:
        given = "".join(f", {k}={v!r}" for k, v in options.items() if v is not None)
        raise OptionError(f"attention '{name}' (embed_dim {layer.embed_dim}, {layer.num_heads} heads{given}) needs "
                          f"about {format_bytes(need)} for its parameters (and one sequence's state), but this "
                          f"machine has {format_bytes(room)} free; give smaller options or a smaller embed_dim")
