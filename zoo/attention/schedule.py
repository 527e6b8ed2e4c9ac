"""Hybrid layer schedules: which attention each layer of a stack runs, as production models mix three
linear-attention layers with one softmax layer (Qwen3-Next, Kimi Linear, Olmo Hybrid) or put sliding windows with
sinks beside them.

A model config names its attention once (``model.attention``) and may add a schedule (``model.attention_schedule``),
a list of attentions repeated over the stack's layers::

    model:
      num_layers: 8
      attention: {name: lavo, num_bases: 32, window_size: 16}
      attention_schedule: [lavo, lavo, lavo, sdpa]          # layers 0-2 and 4-6 run lavo, layers 3 and 7 sdpa

Each entry has the form of ``model.attention`` (a name or a flat mapping). An entry that names the mechanism of
``model.attention`` starts from its options (the entry's own options override them: ``{name: lavo, num_bases: 8}``);
an entry naming another mechanism starts from that mechanism's defaults. The schedule's length must divide the number
of layers: entry ``i`` sets layers ``i``, ``i + n``, ``i + 2n``, ... (n entries; give one per layer to set each
layer). The same schedule in text, as ``lavo-zoo compare`` rows and table labels write it (and accepted wherever the
list is): ``lavo*3+sdpa`` (``NAME*COUNT`` repeats a name, ``+`` joins). Without a schedule every layer runs
``model.attention``, as before.

Encoder-decoder models have one schedule per site (:class:`SiteSchedule`, ``model.attention_schedule.decoder_self:
[lavo, lavo, lavo, sdpa]``), over that site's layers: ``encoder_layers`` for ``encoder_self``, ``decoder_layers`` for
``decoder_self`` and ``cross`` (``num_layers`` where one count sets both stacks); each entry is checked for the site's
pattern when the config is read (:func:`resolve_schedules`), naming the key, the entry and the layers it sets. A
schedule is saved resolved (every entry with the options it runs with), so a checkpoint rebuilds the same layers.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lavo_zoo.attention.spec import SITE_PATTERNS, AttentionSpec, SiteAttention
from lavo_zoo.errors import ConfigError

SCHEDULE_KEY = "attention_schedule"  # the model config's field
# the model config field holding each site's number of layers (docs/architecture.md, "Model fields")
SITE_LAYERS = {"encoder_self": "encoder_layers", "decoder_self": "decoder_layers", "cross": "decoder_layers"}
MAX_ENTRIES = 4096  # a schedule's length divides its stack's layers: no stack has more
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)(?:\s*\*\s*([0-9]+))?$")  # spaces around '*' as around '+'


# ---------------------------------------------------------------------------------------------------- text form
def parse_schedule(text: str, key: str = "the schedule", source: str = "the command line") -> list[str]:
    """The mechanism names of a schedule in text: ``"gated_deltanet*3+sdpa"`` -> ``[gated_deltanet, gated_deltanet,
    gated_deltanet, sdpa]``.

    Args:
        text: ``NAME[*COUNT]`` terms joined by ``+`` (COUNT >= 1).
        key: the config key (or option) the text was given as, for the message.
        source: where the text was given (a file, the command line), for the message.

    Raises:
        ConfigError: a malformed term (an empty one, a count that is not a positive integer), or more than
            :data:`MAX_ENTRIES` entries in all.
    """
    runs: list[tuple[str, int]] = []
    for term in str(text).split("+"):
        match = _TERM.match(term.strip())
        count = int(match.group(2) or 1) if match else 0
        if not match or count < 1:
            raise ConfigError(f"'{key}' in {source}: '{term.strip()}' in schedule '{text}' is not NAME or NAME*COUNT "
                              "(COUNT >= 1); write a schedule as terms joined by '+', e.g. gated_deltanet*3+sdpa")
        runs.append((match.group(1), count))
    total = sum(count for _, count in runs)
    if total > MAX_ENTRIES:  # checked before the list is made: lavo*1000000000 filled the memory
        raise ConfigError(f"'{key}' in {source}: schedule '{text}' has {total} entries, more than any stack has "
                          f"layers (at most {MAX_ENTRIES}); its length divides the model's layers, e.g. "
                          "gated_deltanet*3+sdpa for 4, 8, 12, ... layers")
    return [name for name, count in runs for _ in range(count)]


def schedule_text(names: list[str]) -> str:
    """Names in the text form, runs counted: ``[lavo, lavo, lavo, sdpa]`` -> ``lavo*3+sdpa``."""
    runs: list[list[Any]] = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return "+".join(name if count == 1 else f"{name}*{count}" for name, count in runs)


def layer_ranges(layers: list[int]) -> str:
    """Layer indices as ranges: ``[0, 1, 2, 4, 5, 6]`` -> ``0-2, 4-6``."""
    parts: list[str] = []
    start = prev = None
    for i in [*sorted(layers), None]:
        if start is not None and (i is None or i != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if i is not None and start is None:
            start = i
        prev = i
    return ", ".join(parts)


# ----------------------------------------------------------------------------------------------- the schedule
@dataclass
class AttentionSchedule:
    """The attentions of a stack's layers: ``entries`` repeated over the layers (see the module docstring).

    Args:
        entries: one :class:`AttentionSpec` per position of the repeated pattern.
    """

    entries: list[AttentionSpec] = field(default_factory=list)

    @classmethod
    def from_config(cls, value: Any, key: str, source: str) -> AttentionSchedule:
        """From a YAML list of attentions (each a name or a flat mapping) or the text form (``lavo*3+sdpa``).

        Raises:
            ConfigError: not a list or text, an empty schedule, an entry that is not an attention form.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            entries = [AttentionSpec(name, origin=(f"{key}[{i}]", source))
                       for i, name in enumerate(parse_schedule(value, key, source))]
        elif isinstance(value, (list, tuple)):
            entries = [AttentionSpec.from_config(v, f"{key}[{i}]", source) for i, v in enumerate(value)]
        else:
            raise ConfigError(f"config key '{key}' in {source} must be a list of attentions, one per layer of the "
                              f"repeated pattern (e.g. [gated_deltanet, gated_deltanet, gated_deltanet, sdpa], or "
                              f"gated_deltanet*3+sdpa), got {type(value).__name__} {value!r}")
        if not entries:
            raise ConfigError(f"config key '{key}' in {source} is an empty schedule; leave it out (or null) to run "
                              "model.attention in every layer")
        return cls(entries)

    def to_config(self) -> list[dict[str, Any]]:
        """The YAML form: every entry's :meth:`AttentionSpec.to_config`."""
        return [entry.to_config() for entry in self.entries]

    def layers(self, num_layers: int) -> list[AttentionSpec]:
        """The attention of each of ``num_layers`` layers: the entries repeated (the length must divide it)."""
        return [self.entries[i % len(self.entries)] for i in range(num_layers)]

    def resolved(self, base: AttentionSpec, num_layers: int, pattern: str | None, key: str, layers_key: str
                 ) -> AttentionSchedule:
        """The schedule with every entry layered over ``base`` (an entry naming ``base``'s mechanism starts from its
        options), each checked for ``pattern``.

        Args:
            base: the site's ``model.attention`` (or its site's spec).
            num_layers: the stack's layers, which the schedule's length must divide.
            pattern: the site's pattern (causal, noncausal, cross; None: not checked).
            key: the config key of the schedule, for the messages.
            layers_key: the config key of the layer count, for the messages.

        Raises:
            ConfigError: a length that does not divide ``num_layers``, or an entry the registry refuses (an unknown
                mechanism, a pattern it cannot do, an option it lacks), naming the entry and the layers it sets.
        """
        n = len(self.entries)
        if num_layers % n:
            fits = [d for d in range(1, num_layers + 1) if num_layers % d == 0]
            raise ConfigError(f"config key '{key}' has {n} entries, which does not divide {layers_key} "
                              f"({num_layers}): the schedule repeats over the layers, so give {_or(fits)} "
                              f"entr{'y' if fits == [1] else 'ies'} "
                              f"(one per layer to set each), or change {layers_key}")
        out = []
        for i, entry in enumerate(self.entries):
            spec = layered(entry, base)
            try:
                spec.check(pattern, f"{key}[{i}]")
            except ConfigError as e:
                sets = layer_ranges(list(range(i, num_layers, n)))
                raise ConfigError(f"{e} (entry {i} of the schedule sets layer{'s' if num_layers > n else ''} {sets} "
                                  f"of {layers_key}={num_layers})") from None
            out.append(spec)
        return AttentionSchedule(out)


def _or(items: list[int]) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def layered(entry: AttentionSpec, base: AttentionSpec) -> AttentionSpec:
    """``entry`` over ``base``: the same mechanism keeps ``base``'s options under the entry's own; another mechanism
    is the entry alone. An option refused when the layer is built names where it was set (the spec's ``origin``):
    the entry's key where the entry sets options, else ``base``'s."""
    if entry.name != base.name:
        return AttentionSpec(entry.name, dict(entry.options), origin=entry.origin)
    return AttentionSpec(entry.name, {**base.options, **entry.options},
                         origin=entry.origin if entry.options else base.origin)


@dataclass
class SiteSchedule:
    """One optional :class:`AttentionSchedule` per attention site of an encoder-decoder model, over that site's
    layers (:data:`SITE_LAYERS`); a site without one runs its ``model.attention.<site>`` in every layer.

    Args:
        encoder_self: over the encoder's layers.
        decoder_self: over the decoder's layers.
        cross: over the decoder's layers.
    """

    encoder_self: AttentionSchedule | None = None
    decoder_self: AttentionSchedule | None = None
    cross: AttentionSchedule | None = None


# --------------------------------------------------------------------------------------- a model config's layers
def layer_count(model: Any, site: str) -> tuple[str, int]:
    """(config field, number of layers) of a site's stack: ``num_layers`` for a model with one attention (site
    ""), the site's own count (:data:`SITE_LAYERS`) for an encoder-decoder, or ``num_layers`` where it has one
    count for both stacks; 1 for a model without a count (a plug-in's)."""
    for name in ((SITE_LAYERS[site],) if site else ()) + ("num_layers",):
        if isinstance(getattr(model, name, None), int):
            return name, getattr(model, name)
    return "num_layers", 1


def resolve_schedules(model: Any, patterns: str | Mapping[str, str] | None = None, prefix: str = "model") -> None:
    """Check a model config's ``attention_schedule`` against its ``attention``, its sites' patterns and its layer
    counts, and store it resolved (:meth:`AttentionSchedule.resolved`); the models' ``ModelConfig.__post_init__``
    calls it.

    Args:
        model: the model config: ``attention`` (an :class:`AttentionSpec` or :class:`SiteAttention`),
            ``attention_schedule`` (an :class:`AttentionSchedule` or None, or a :class:`SiteSchedule`), the layer
            counts (:func:`layer_count`) and ``attention_patterns``.
        patterns: the site's pattern or {site: pattern}; default: the model's (:func:`site_patterns`).
        prefix: the config key of ``model``, for the messages.

    Raises:
        ConfigError: a schedule of the other form than the attention's (a list for sites, sites for one attention),
            and see :meth:`AttentionSchedule.resolved`.
    """
    schedule = getattr(model, SCHEDULE_KEY, None)
    if schedule is None:
        return
    sites = isinstance(model.attention, SiteAttention)
    if sites != isinstance(schedule, SiteSchedule):
        raise ConfigError(f"config key '{prefix}.{SCHEDULE_KEY}' must be " + (
            f"a mapping of sites ({', '.join(SITE_PATTERNS)}) to schedules, as {prefix}.attention gives one attention "
            "per site" if sites else f"a list of attentions (or lavo*3+sdpa), as {prefix}.attention is one attention"))
    if patterns is None:
        patterns = site_patterns(model)
    for site, pattern in ({"": patterns} if isinstance(patterns, str) else patterns).items():
        own = getattr(schedule, site) if site else schedule
        if own is None:
            continue
        count, n = layer_count(model, site)
        resolved = own.resolved(getattr(model.attention, site) if site else model.attention, n, pattern,
                                f"{prefix}.{SCHEDULE_KEY}{f'.{site}' if site else ''}", f"{prefix}.{count}")
        if site:
            setattr(schedule, site, resolved)
        else:
            setattr(model, SCHEDULE_KEY, resolved)


def attention_layers(model: Any) -> dict[str, list[AttentionSpec]]:
    """{site: the attention of each of its layers} of a model config ("" for a model with one attention): its
    schedule where it has one, else ``model.attention`` in every layer; empty for a model config without
    ``attention``. A model without a layer count (a plug-in's) has one layer per site here."""
    attention, schedule = getattr(model, "attention", None), getattr(model, SCHEDULE_KEY, None)
    if isinstance(attention, AttentionSpec):
        n = layer_count(model, "")[1]
        return {"": schedule.layers(n) if isinstance(schedule, AttentionSchedule) else [attention] * n}
    if isinstance(attention, SiteAttention):
        out = {}
        for site in SITE_PATTERNS:
            n = layer_count(model, site)[1]
            own = getattr(schedule, site, None)
            out[site] = own.layers(n) if isinstance(own, AttentionSchedule) else [getattr(attention, site)] * n
        return out
    return {}


def site_patterns(model: Any) -> dict[str, str | None]:
    """{site: pattern} of a model config's attention sites ("" for a model with one attention), from its
    ``attention_patterns`` (a pattern, or {site: pattern}; a class variable, or set on the instance where another
    section decides it, as recall's task; default for sites: :data:`SITE_PATTERNS`); None where the config does not
    declare it (a plug-in's)."""
    declared = getattr(model, "attention_patterns", None)
    if isinstance(getattr(model, "attention", None), SiteAttention):
        return dict(declared if isinstance(declared, Mapping) else SITE_PATTERNS)
    return {"": declared if isinstance(declared, str) else None}


def layer_groups(specs: list[AttentionSpec]) -> list[tuple[list[int], AttentionSpec]]:
    """(layers, spec) for each distinct attention of a stack, in the order of first use: ``[lavo, lavo, sdpa, lavo]``
    -> ``[([0, 1, 3], lavo), ([2], sdpa)]``."""
    groups: list[tuple[list[int], AttentionSpec]] = []
    for i, spec in enumerate(specs):
        same = next((g for g in groups if g[1] == spec), None)
        if same is None:
            groups.append(([i], spec))
        else:
            same[0].append(i)
    return groups


def stack_label(names: list[str]) -> str:
    """A stack's attention in one word, from the mechanism of each layer: the mechanism where every layer runs one,
    else ``hybrid:`` and the names of its shortest repeating pattern (``hybrid:lavo*3+sdpa`` for eight layers of
    three lavo to one sdpa), the form ``lavo-zoo compare`` takes as a row."""
    if len(set(names)) <= 1:
        return names[0] if names else ""
    period = next(p for p in range(1, len(names) + 1)
                  if len(names) % p == 0 and names == names[:p] * (len(names) // p))
    return "hybrid:" + schedule_text(names[:period])


def state_text(name: str, pattern: str | None) -> str:
    """What a layer of mechanism ``name`` keeps while decoding in ``pattern``: its declared causal state
    (``Attention.decoding_state``: ``2 T D (KV cache, grows with T)``), how a cross layer decodes, or that a
    noncausal (encoder) layer keeps none; the mechanism's causal state where the pattern is not known."""
    from lavo_zoo.attention.registry import ATTENTIONS, attention_class

    if name not in ATTENTIONS:
        return "?"
    cls = attention_class(name)
    if pattern == "noncausal":
        return "none (noncausal: not decoded step by step)"
    if pattern == "cross":
        how = cls.decoding("cross")
        return {"cache": "the source prepared once (cross cache)", "source": "the source, re-projected each step",
                "prefix": "the source and the target so far, re-run each step"}.get(how, how or "?")
    if pattern == "causal" and cls.decoding("causal") == "prefix" and not cls.decoding_state:
        return "T D inputs (no streaming: re-runs the prefix)"
    return cls.decoding_state or "?"


@dataclass
class LayerGroup:
    """Layers of one attention site that run the same attention (:func:`describe_layers`)."""

    site: str               # "" for a model with one attention, else encoder_self / decoder_self / cross
    key: str                # the config key that sets them: model.attention[.site] or model.attention_schedule[.site]
    layers: list[int]       # their indices in the site's stack
    num_layers: int         # the stack's layers
    spec: AttentionSpec     # what they run
    state: str              # what each keeps while decoding (:func:`state_text`)

    @property
    def where(self) -> str:
        """``layers 0-2, 4-6`` / ``layer 3`` / ``all 4 layers``."""
        if len(self.layers) == self.num_layers:
            return f"all {self.num_layers} layers" if self.num_layers > 1 else "its layer"
        return f"layer{'s' if len(self.layers) > 1 else ''} {layer_ranges(self.layers)}"


def spec_text(spec: AttentionSpec) -> str:
    """A spec as one line: ``lavo num_bases=32 window_size=16``."""
    return " ".join([spec.name, *(f"{k}={v}" for k, v in spec.options.items())])


def describe_layers(model: Any, prefix: str = "model") -> list[LayerGroup]:
    """Each attention site of a model config, layer by layer: one :class:`LayerGroup` per distinct attention of a
    site's stack (one for a site whose layers all run ``model.attention``), with what each layer keeps while
    decoding; what ``lavo-zoo list configs``, ``train --dry-run`` and the model cards show."""
    patterns = site_patterns(model)
    out = []
    for site, specs in attention_layers(model).items():
        groups = layer_groups(specs)
        where = f".{site}" if site else ""
        key = f"{prefix}.attention{where}" if len(groups) == 1 else f"{prefix}.{SCHEDULE_KEY}{where}"
        out += [LayerGroup(site, key, layers, len(specs), spec, state_text(spec.name, patterns.get(site)))
                for layers, spec in groups]
    return out


def site_labels(model: Any) -> dict[str, str]:
    """{site: its stack's attention in one word (:func:`stack_label`)} of a model config ("" for one site)."""
    return {site: stack_label([spec.name for spec in specs]) for site, specs in attention_layers(model).items()}
