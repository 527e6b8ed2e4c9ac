"""Attention selection in configs: :class:`AttentionSpec` (one mechanism and its options) and
:class:`SiteAttention` (one spec per attention site of an encoder-decoder model). See docs/architecture.md.

YAML is flat: the mapping's ``name`` picks the mechanism, every other key is one of its options::

    model:
      attention: {name: lavo, num_bases: 32, window_size: 16}       # single-site models (lm, lra)
    model:
      attention:                                                    # encoder-decoder models
        encoder_self: {name: probsparse, factor: 5}
        decoder_self: {name: probsparse, factor: 5}
        cross: {name: lavo, num_bases: 16}

A bare string (``attention: sdpa``) is a spec without options. Naming another mechanism drops the previous one's
options, the same way in ``extends:``, in a config over a recipe's default and on the command line
(``model.attention.name=sdpa``): :func:`merge_attention`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lavo_zoo.attention.base import Attention
from lavo_zoo.attention.registry import ATTENTIONS, attention_class, build_attention, check_attention, option_defaults
from lavo_zoo.errors import ConfigError, OptionError, did_you_mean

SITE_PATTERNS = {"encoder_self": "noncausal", "decoder_self": "causal", "cross": "cross"}


def merge_attention(base: Any, over: Any, merge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> Any:
    """The YAML form of an attention ``over`` written over ``base`` (by ``extends:``, by a config over a recipe's
    default, by a command-line override): the one rule, which :mod:`lavo_zoo.config` applies to every
    :class:`AttentionSpec` section.

    Naming another mechanism (a different ``name:``, or a bare name) replaces ``base`` whole, since its options
    belong to the old mechanism; a mapping without ``name:``, or with the same one, merges into ``base`` (a bare
    name there counts as ``{name: ...}``) through ``merge`` (the generic merge of two mappings, ``!delete``
    included), so the options stay.

    Args:
        base: the inherited form: a mapping ``{name: ..., option: ...}`` or a bare name.
        over: the form given over it.
        merge: merges two mappings, key by key.

    Returns:
        The merged form.
    """
    if not isinstance(over, dict):
        return over
    base = {"name": base} if isinstance(base, str) else base
    if not isinstance(base, dict) or over.get("name", base.get("name")) != base.get("name"):
        return over
    return merge(base, over)


class OptionDefault:
    """An attention option a config leaves out, at its mechanism's default: equal to that value (so that an option
    given at its default is the same setting), and shown as the default (``32 (its default)``; ``its default`` for
    one the mechanism works out itself, a None such as LAVO's ``num_bases``), never as a bare ``None``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (other.value if isinstance(other, OptionDefault) else other) == self.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "its default" if self.value is None else f"{self.value!r} (its default)"


def with_option_defaults(config: Any, inside: bool = False) -> Any:
    """A config in its YAML form (:func:`~lavo_zoo.config.to_dict`) with every attention's options that are left out
    filled with the mechanism's defaults (:class:`OptionDefault`), so that two configs compare by what they build
    (an option given at its default equals one left out) and a difference names the default (``num_bases: its
    default -> 16``, not ``None -> 16``). Only mappings under an ``attention`` key are read as attentions."""
    if not isinstance(config, dict):
        return config
    name = config.get("name")
    if inside and isinstance(name, str) and name in ATTENTIONS:
        return {**{k: OptionDefault(v) for k, v in option_defaults(attention_class(name)).items()}, **config}
    return {k: with_option_defaults(v, inside or k == "attention") for k, v in config.items()}


@dataclass
class AttentionSpec:
    """One attention mechanism from the registry (``lavo-zoo list attentions``) and its constructor options.

    Args:
        name: a registry name.
        options: the mechanism's constructor options (``{"num_bases": 32}``), checked against it by :meth:`check`
            and, for their values, when built.
    """

    name: str = "sdpa"
    options: dict[str, Any] = field(default_factory=dict)
    # where the spec was read (from_config): the config key and file an option refused when built is named by; not
    # part of the spec's value (equality and the saved form ignore it)
    origin: tuple[str, str] | None = field(default=None, compare=False, repr=False)
    merge_config = staticmethod(merge_attention)  # how a config given over another merges this section

    def build(self, embed_dim: int, num_heads: int, pattern: str) -> Attention:
        """The :class:`~lavo_zoo.attention.Attention` module for ``pattern`` (:func:`build_attention`).

        Args:
            embed_dim: the site's width D.
            num_heads: the site's heads H.
            pattern: causal, noncausal or cross.

        Raises:
            OptionError: an option value the mechanism refuses; for a spec read from a config, the message names the
                config key (the site) and the file, as the config's other errors do.
        """
        try:
            return build_attention(self.name, embed_dim, num_heads, pattern, **self.options)
        except OptionError as e:
            if self.origin is None:
                raise
            key, source = self.origin
            where = (f"{key}.<option> in the config (or on the command line, {key}.<option>=VALUE)" if "[" not in key
                     else "that entry's options in the config (a schedule is set whole on the command line)")
            raise OptionError(f"config key '{key}' in {source}: {e}; change {where}") from None

    def check(self, pattern: str, site: str) -> None:
        """Raise :class:`ConfigError` (naming ``site``, the config key) unless the mechanism exists, supports
        ``pattern`` and takes every option given, each of its declared type (:func:`~lavo_zoo.attention.registry.
        check_attention`). Option ranges are checked when the attention is built.

        Args:
            pattern: the site's pattern.
            site: the config key the spec was read from (``model.attention``), for the messages.
        """
        check_attention(self.name, pattern, self.options, key=site)

    # ----------------------------------------------------------------------------- config (de)serialisation
    @classmethod
    def from_config(cls, value: Any, key: str, source: str) -> AttentionSpec:
        """From the flat YAML form (``{name: lavo, num_bases: 32}``) or a bare name (``lavo``).

        Args:
            value: the YAML value (or a spec, returned as it is).
            key: the config key it came from, for the messages.
            source: the config file it came from, for the messages.

        Raises:
            ConfigError: neither a name nor a mapping with a ``name``.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(value, origin=(key, source))
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' in {source} must be an attention name or a mapping such as "
                              f"{{name: lavo, num_bases: 32}}, got {type(value).__name__} {value!r}")
        options = dict(value)
        name = options.pop("name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"config key '{key}' in {source} needs 'name:' (an attention from `lavo-zoo list "
                              f"attentions`), got {value!r}")
        return cls(name, options, origin=(key, source))

    def __eq__(self, other: object) -> bool:
        """Specs are equal when they save the same (an option given at today's default equals one left out)."""
        if not isinstance(other, AttentionSpec):
            return NotImplemented
        return self.to_config() == other.to_config()

    def to_config(self) -> dict[str, Any]:
        """The flat YAML form. Options whose default changed (:attr:`Attention.former_defaults`) are always written,
        at today's default when not given, so that a saved config says which reading it was trained with."""
        return {"name": self.name, **self._recorded_defaults(), **self.options}

    def _recorded_defaults(self) -> dict[str, Any]:
        if self.name not in ATTENTIONS:
            return {}
        cls = attention_class(self.name)
        defaults = option_defaults(cls)
        return {k: defaults[k] for k in cls.former_defaults if k not in self.options}

    def with_former_defaults(self) -> None:
        """Fill the options a config saved before their default changed does not record with their former
        defaults (:attr:`Attention.former_defaults`): an old checkpoint keeps the reading it was trained with."""
        if self.name in ATTENTIONS:
            for key, value in attention_class(self.name).former_defaults.items():
                self.options.setdefault(key, value)


@dataclass
class SiteAttention:
    """The attention of each site of an encoder-decoder model; each is checked against its pattern in
    :data:`SITE_PATTERNS` when the config is read.

    Args:
        encoder_self: the encoder's self-attention (noncausal).
        decoder_self: the decoder's self-attention (causal).
        cross: the decoder's attention over the encoder's output (cross).
    """

    encoder_self: AttentionSpec = field(default_factory=AttentionSpec)
    decoder_self: AttentionSpec = field(default_factory=AttentionSpec)
    cross: AttentionSpec = field(default_factory=AttentionSpec)

    def build(self, site: str, embed_dim: int, num_heads: int) -> Attention:
        """The attention module for ``site`` (one of :data:`SITE_PATTERNS`) with that site's pattern."""
        return getattr(self, site).build(embed_dim, num_heads, SITE_PATTERNS[site])

    def with_former_defaults(self) -> None:
        """Each site's :meth:`AttentionSpec.with_former_defaults` (a checkpoint's config saved before a default
        changed)."""
        for site in SITE_PATTERNS:
            getattr(self, site).with_former_defaults()

    def check(self, key: str = "model.attention") -> None:
        """Each site's :meth:`AttentionSpec.check` against its pattern; ``key``: the config key of the mapping."""
        for site, pattern in SITE_PATTERNS.items():
            getattr(self, site).check(pattern, f"{key}.{site}")

    @classmethod
    def from_config(cls, value: Any, key: str, source: str) -> SiteAttention:
        """From the YAML mapping of sites to attentions (each as :meth:`AttentionSpec.from_config` reads it), checked.

        Args:
            value: the mapping (sites left out keep the default, sdpa).
            key: the config key it came from, for the messages.
            source: the config file it came from, for the messages.

        Raises:
            ConfigError: not a mapping, an unknown site, or a site's attention refused by :meth:`check`.
        """
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' in {source} must be a mapping of sites "
                              f"({', '.join(SITE_PATTERNS)}) to attentions, got {type(value).__name__} {value!r}")
        for site in value:
            if site not in SITE_PATTERNS:
                raise ConfigError(f"unknown attention site '{key}.{site}' in {source}"
                                  f"{did_you_mean(str(site), SITE_PATTERNS)}; sites: {', '.join(SITE_PATTERNS)}")
        spec = cls(**{site: AttentionSpec.from_config(v, f"{key}.{site}", source) for site, v in value.items()})
        try:
            spec.check(key)
        except ConfigError as e:
            raise ConfigError(f"{e} (in {source})") from None
        return spec

    def to_config(self) -> dict[str, Any]:
        """The YAML form: every site's :meth:`AttentionSpec.to_config`."""
        return {site: getattr(self, site).to_config() for site in SITE_PATTERNS}
