"""YAML configs: find by name or path, inherit (``extends:``), override (``key.sub=value``), validate against the
recipe's dataclass schema with errors that name the key, the file and the closest valid key.

A recipe's schema is a dataclass subclass of the engine's run schema
(:class:`~lavo_zoo.engine.run_config.RunConfig`: ``recipe``, ``train:``, ``eval:``); every section is a nested
dataclass::

    @dataclass
    class MyConfig(RunConfig):
        model: MyModelConfig = field(default_factory=MyModelConfig)
        data: MyDataConfig = field(default_factory=MyDataConfig)

A YAML file may start from another config with ``extends: <domain>/<name>`` (or a path relative to the file); its
own keys are merged over the parent's, mappings recursively, and ``key: !delete`` removes an inherited key (the
schema's default applies again; on the command line: ``key.sub=!delete``). A mapping may not repeat a key. A section
type with its own YAML form may set its own merge rule (``merge_config``: the attention's drops the options of a
mechanism a new ``name`` replaces), which holds for ``extends:``, a partial section over a default and overrides.

Loading runs one way: the caller resolves names (:mod:`lavo_zoo.engine.configs` knows the named configs), then
:func:`read_layers` reads the file and those it extends, :func:`merge_layers` and :func:`apply_overrides` merge them
under the schema, and :func:`from_dict` validates.

Numeric ranges are part of the schema: annotate a field ``Annotated[int, Range(ge=1)]`` (or use the aliases
``PositiveInt``, ``NonNegativeInt``, ``PositiveFloat``, ``NonNegativeFloat``, ``Probability``) and a value outside
the range is a :class:`ConfigError` naming the key, before anything runs.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from lavo_zoo.errors import ConfigError, did_you_mean

# PyYAML follows YAML 1.1, which reads 3e-4 (no dot) as a string; numbers like that are floats here.
_SCIENTIFIC = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric config field, used as ``Annotated[int, Range(ge=1)]``."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def violation(self, value: float) -> str | None:
        """``'>= 1'``-style text of the first bound ``value`` breaks, or None when it is inside."""
        for bound, op, ok in ((self.ge, ">=", lambda b: value >= b), (self.gt, ">", lambda b: value > b),
                              (self.le, "<=", lambda b: value <= b), (self.lt, "<", lambda b: value < b)):
            if bound is not None and not ok(bound):
                return self.describe()
        return None

    def describe(self) -> str:
        """The bounds as text (``>= 1 and < 10``), for messages."""
        parts = [f"{op} {int(b) if float(b).is_integer() else f'{b:g}'}"
                 for b, op in ((self.ge, ">="), (self.gt, ">"), (self.le, "<="), (self.lt, "<")) if b is not None]
        return " and ".join(parts)


PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
Probability = Annotated[float, Range(ge=0, lt=1)]  # dropout rates


class _Delete:
    """The value of ``key: !delete``: remove ``key`` from what the config inherits."""

    def __repr__(self) -> str:
        return "!delete"


DELETE = _Delete()


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and reads ``!delete``."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' on line {line} (first on line {seen[key]}); YAML would "
                    "silently keep only the last value: keep one", key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


_ConfigLoader.add_constructor("!delete", lambda loader, node: DELETE)
# YAML 1.1 reads 4:00:00 as the base-60 integer 14400 (and 1:30.5 as 90.5), which YAML 1.2 dropped: a time limit
# written as Slurm writes one became 14400 minutes. Such a scalar stays the text it is.
_BASE_60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
_ConfigLoader.yaml_implicit_resolvers = {first: list(resolvers)
                                         for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in "+-0123456789":
    _ConfigLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(0, ("tag:yaml.org,2002:str", _BASE_60))


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader subclass: safe


# --------------------------------------------------------------------------------------------------------- loading
Layer = tuple[Path, dict[str, Any]]  # one config file and its mapping, ``extends:`` taken out


def load_yaml(path: Path, named: Mapping[str, Path] | None = None, schema: type | None = None) -> dict[str, Any]:
    """A YAML config as one mapping: the file, every file it extends merged under it (:func:`read_layers`,
    :func:`merge_layers`) and ``!delete`` resolved.

    Args:
        path: the YAML file.
        named: the named configs ``extends:`` may name (``<domain>/<name>`` -> file; what
            :func:`lavo_zoo.engine.configs.named_configs` finds); without it ``extends:`` takes paths only.
        schema: the config's dataclass (a recipe's ``config_class``), whose types decide how a section given again
            merges (see :func:`merge`); without it every mapping merges key by key.

    Returns:
        The merged mapping (validated by :func:`from_dict`, not here).

    Raises:
        ConfigError: a file is missing, not UTF-8, not YAML or not a mapping; ``extends:`` names no config or runs in
            a cycle; ``!delete`` deletes nothing it inherits.
    """
    return merge_layers(read_layers(path, named), schema)


def read_layers(path: Path, named: Mapping[str, Path] | None = None) -> list[Layer]:
    """The file ``path`` and every file it extends, the furthest parent first, each read once and none merged
    yet. ``extends: <parent>`` is a path relative to the file, else one of ``named`` (``<domain>/<name>`` -> file)."""
    named = named or {}
    layers: list[Layer] = []
    path = Path(path).resolve()
    while True:
        if path in (p for p, _ in layers):
            chain = [p for p, _ in reversed(layers)] + [path]
            raise ConfigError(f"config {chain[0]} extends itself (cycle: {' -> '.join(map(str, chain))})")
        data = _read_yaml(path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must be a mapping of keys to values, got {type(data).__name__}")
        parent = data.pop("extends", None)
        layers.append((path, data))
        if parent is None:
            return layers[::-1]
        path = _parent_path(path, parent, named).resolve()


def merge_layers(layers: list[Layer], schema: type | None = None) -> dict[str, Any]:
    """The mappings of ``layers`` (:func:`read_layers`: the furthest parent first) merged, each over the ones
    before it (:func:`merge`), with a ``!delete`` that had nothing to delete refused."""
    data = layers[0][1]
    for path, layer in layers[1:]:
        data = merge(data, layer, source=str(path), schema=schema)
    return _without_deletes(data, str(layers[-1][0]))


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {path} is not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8") from None
    except IsADirectoryError:
        raise ConfigError(f"config path {path} is a directory, not a config file") from None
    try:
        return _yaml_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config {path} is not valid YAML: {e}") from None


def _parent_path(child: Path, parent: Any, named: Mapping[str, Path]) -> Path:
    """The file that ``extends: <parent>`` in ``child`` names: a path relative to ``child``, else a named config."""
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"config {child}: 'extends:' must be a config name or path, got {_show(parent)}")
    relative = child.parent / parent
    if relative.is_file():
        return relative
    if relative.is_dir():
        raise ConfigError(f"config {child}: 'extends: {parent}' is the directory {relative}, not a config file")
    builtin = named.get(parent) if "/" in parent else None
    if builtin is not None:
        return builtin
    where = f"the built-in config {parent}" if "/" in parent else "a built-in config (those are named <domain>/<name>)"
    raise ConfigError(f"config {child}: 'extends: {parent}' names no config; looked for the file {relative} "
                      f"and {where}{did_you_mean(parent, list(named))}")


def recipe_name(layers: list[Layer], overrides: list[str] = ()) -> str | None:
    """The recipe a config names (``recipe:``): its last ``recipe=`` override, else the last layer that sets it."""
    for text in reversed(list(overrides)):
        keys, value = parse_override(text)
        if keys == ["recipe"]:
            return None if value is DELETE or value in (None, "") else str(value)
    for _, data in reversed(layers):
        if "recipe" in data:
            return None if data["recipe"] is DELETE or not data["recipe"] else str(data["recipe"])
    return None


def merge(base: dict[str, Any], over: dict[str, Any], source: str = "config", prefix: str = "",
          schema: type | None = None) -> dict[str, Any]:
    """``over`` merged onto ``base``: nested mappings merge, everything else replaces, ``!delete`` removes a key.

    A section whose type in ``schema`` has its own YAML form decides how it merges: a type with a
    ``merge_config(base, over, merge)`` static method (:class:`~lavo_zoo.attention.AttentionSpec`: another
    mechanism's name replaces the section whole) is given the two values and the merge of two mappings.

    Args:
        base: what is inherited (a parent config, a field's default).
        over: what is given over it.
        source: the file or text ``over`` comes from, for messages.
        prefix: the key path of ``base`` and ``over`` (``model.``), for messages.
        schema: the dataclass ``base`` and ``over`` are a mapping of, or None for a key-by-key merge.

    Returns:
        A new mapping; ``base`` and ``over`` are not changed.

    Raises:
        ConfigError: ``over`` deletes a key that ``base`` does not have.
    """
    out = dict(base)
    for key, value in over.items():
        tp = _field_type(schema, key)
        rule = getattr(tp, "merge_config", None)
        if value is DELETE:
            if key not in out:
                raise ConfigError(f"{source} deletes '{prefix}{key}' with !delete, but it inherits no such key"
                                  f"{did_you_mean(str(key), map(str, out))}")
            del out[key]
        elif rule is not None and key in out:
            out[key] = rule(out[key], value, _merge_of(source, f"{prefix}{key}."))
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value, source, f"{prefix}{key}.", tp if dataclasses.is_dataclass(tp) else None)
        else:
            out[key] = value
    return out


def _merge_of(source: str, prefix: str) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    """The key-by-key merge a section's own ``merge_config`` calls for two mappings."""
    return lambda base, over: merge(base, over, source, prefix)


@functools.cache
def _field_types(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema, include_extras=True)


def _field_type(schema: type | None, key: Any) -> Any:
    """The type of field ``key`` of the dataclass ``schema`` (``Annotated`` and ``| None`` taken off), or None."""
    if schema is None or not dataclasses.is_dataclass(schema) or not isinstance(key, str):
        return None
    tp = _field_types(schema).get(key)
    while True:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Annotated:
            tp = args[0]
        elif origin in (typing.Union, types.UnionType) and len([a for a in args if a is not type(None)]) == 1:
            tp = next(a for a in args if a is not type(None))
        else:
            return tp


def _without_deletes(data: dict[str, Any], source: str, prefix: str = "") -> dict[str, Any]:
    """``data`` with ``!delete`` keys that had nothing to delete refused (a config without a parent)."""
    for key, value in data.items():
        if value is DELETE:
            raise ConfigError(f"{source} deletes '{prefix}{key}' with !delete, but it extends no config that has it")
        if isinstance(value, dict):
            _without_deletes(value, source, f"{prefix}{key}.")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.lr=3e-4"`` -> (["train", "lr"], 0.0003); the value is read as YAML (lists: ``a=[1,2]``);
    ``key=!delete`` removes the key (its schema default applies)."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}' must look like key.sub=value (e.g. train.lr=3e-4)")
    try:
        value = _yaml_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override '{text}': value is not valid YAML ({e})") from None
    if isinstance(value, str) and _SCIENTIFIC.match(value):
        value = float(value)
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str], schema: type | None = None) -> dict[str, Any]:
    """A deep copy of ``data`` with each ``key.sub=value`` override applied in order (sections are created as
    needed; ``key=!delete`` removes a key).

    Args:
        data: the config's mapping.
        overrides: ``key.sub=value`` texts (:func:`parse_override`).
        schema: the config's dataclass: a section whose type has its own merge rule (``merge_config``, see
            :func:`merge`) takes an override as it takes a config written over it. The attention's
            (:class:`~lavo_zoo.attention.AttentionSpec`): ``model.attention.name=sdpa`` switches the mechanism and
            drops the previous one's options, and overrides after it add the new one's
            (``model.attention.name=performer model.attention.num_features=32``).

    Returns:
        The new mapping (validated by :func:`from_dict`, not here).

    Raises:
        ConfigError: a malformed override, a key below a value, a ``!delete`` of a key that is not there.
    """
    out = copy.deepcopy(data)
    for text in overrides:
        keys, value = parse_override(text)
        _check_override_path(out, keys, value, text, schema)
        over: Any = value
        for key in reversed(keys):
            over = {key: over}
        out = merge(out, over, f"override '{text}'", "", schema)  # as a config written over it: one merge rule
    return out


def _check_override_path(data: dict[str, Any], keys: list[str], value: Any, text: str, schema: type | None) -> None:
    """Refuse an override that :func:`merge` would read otherwise than the user meant: one that goes below a value
    (``train.lr.x=1``), or deletes a key that is not there. A section with its own merge rule takes the rest."""
    node, tp = data, schema
    for depth, key in enumerate(keys):
        tp = _field_type(tp, key)
        if getattr(tp, "merge_config", None) is not None and key in node:
            return  # the section's rule reads what is given under it (a bare name, a mapping)
        last = depth == len(keys) - 1
        if value is DELETE and (key not in node or (not last and node[key] is None)):
            raise ConfigError(f"override '{text}': there is no key '{'.'.join(keys)}' to delete"
                              f"{did_you_mean(key, map(str, node))}")
        if last or node.get(key) is None:
            return  # the value is set, or its section created
        if not isinstance(node[key], dict):
            raise ConfigError(f"override '{text}': '{key}' is a value, not a section")
        node = node[key]


# ------------------------------------------------------------------------------------------------------ validation
def from_dict(cls: type, data: dict[str, Any], source: str = "config", prefix: str = "") -> Any:
    """An instance of the dataclass ``cls`` from the mapping ``data``, every key and value checked: a section given
    in part keeps the field's own defaults for the rest (merged as :func:`merge` merges), a type with its own YAML
    form reads its value (``from_config``), numbers are checked against their ``Range``.

    Args:
        cls: the schema, a dataclass (a recipe's ``config_class``, or one of its sections).
        data: the mapping (a loaded and merged config).
        source: the file or text ``data`` comes from, for messages.
        prefix: the key path of ``data`` (``model.``), for messages.

    Returns:
        The validated instance of ``cls``.

    Raises:
        ConfigError: an unknown key (with the closest valid one), a value of the wrong type or out of range, or a
            section's own check failing (an attention that cannot do its pattern), naming the key and ``source``.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"'{prefix.rstrip('.') or 'config'}' in {source} must be a mapping of its keys "
                          f"({', '.join(f.name for f in dataclasses.fields(cls))}), got {_show(data)}")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = list(fields)
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            full = [prefix + n for n in names]
            raise ConfigError(f"unknown config key '{prefix}{key}' in {source}{did_you_mean(prefix + str(key), full)}; "
                              f"valid keys here: {', '.join(full)}")
        default = _field_default(fields[key])
        if isinstance(value, dict) and dataclasses.is_dataclass(default):  # a partial section keeps the field's own
            value = merge({key: to_dict(default)}, {key: value}, source, prefix, cls)[key]  # defaults, as extends:
        kwargs[key] = _coerce(hints[key], value, f"{prefix}{key}", source)
    try:
        return cls(**kwargs)
    except ConfigError as e:  # a section's own check (__post_init__), e.g. an attention that cannot be causal
        raise ConfigError(f"{e} (in {source})") from None


def _field_default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and hasattr(tp, "from_config"):  # a type with its own YAML form (AttentionSpec)
        return tp.from_config(value, key, source)
    if origin is Annotated:
        out = _coerce(args[0], value, key, source)
        for rule in (a for a in tp.__metadata__ if isinstance(a, Range)):
            if isinstance(out, (int, float)) and (broken := rule.violation(out)):
                raise ConfigError(f"config key '{key}' in {source} must be {broken}, got {out!r}")
        return out
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value if value is not None else {}, source, key + ".")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, key, source)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"config key '{key}' in {source} must be one of {', '.join(map(repr, args))}, "
                              f"got {_show(value)}{did_you_mean(str(value), map(str, args))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}' in {source} must be a list, got {_show(value)} "
                              f"(write it as {key}=[a,b] on the command line)")
        inner = args[0] if args else Any
        return [_coerce(inner, v, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' in {source} must be a mapping, got {_show(value)}")
        return dict(value)
    if tp is Any:
        return value
    if tp is float and (isinstance(value, (int, float)) and not isinstance(value, bool)
                        or isinstance(value, str) and _SCIENTIFIC.match(value)):
        number = float(value)
        if not math.isfinite(number):  # 1e400 reads as inf; .nan and .inf are YAML floats
            raise ConfigError(f"config key '{key}' in {source} must be a finite number, got {value!r}"
                              + (" (a number beyond ±1.8e308 reads as inf)" if math.isinf(number) else ""))
        return number
    if tp in (int, str, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"config key '{key}' in {source} must be {getattr(tp, '__name__', tp)}, got {_show(value)}")


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def to_dict(cfg: Any) -> Any:
    """A config as plain YAML-able data: dataclasses become mappings, types with ``to_config`` their own form."""
    if hasattr(cfg, "to_config"):
        return cfg.to_config()
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return copy.deepcopy(cfg)


def config_yaml(cfg: Any) -> str:
    """A config as the YAML text a run's and a checkpoint's ``config.yaml`` hold."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
