"""One run of a ``lavo-zoo compare`` study as a typed record: :class:`CellRecord`, what a finished cell's
``cell.json`` holds (or what a collected results JSON says), read back by one reader with one error policy
(:meth:`CellRecord.read`), and how its overrides are read: which is its seed (:func:`is_seed`), which its attention's
name (or schedule of layers), and its options in short (:meth:`CellRecord.options`); and one summary of a metric's
values over seeds (:class:`MetricSummary`). Below the recipes, so that a recipe's analysis of studies
(``recall-plot``) reads them as ``compare`` writes them; the walk that finds the runs under folders, each once, is
:func:`lavo_zoo.engine.run_identity.collect_runs`.
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

import click

from lavo_zoo.errors import UsageError, os_error_reason

SEED_KEY = "train.seed"  # the override that sets a cell's seed
CELL_FILE = "cell.json"
# what a record gains after it is read, never in cell.json
_NOT_SAVED = ("source", "label", "efficiency", "recipe")
# what to do about a record that cannot be read: compare writes it whole, so it was changed since
RETRAIN = "remove it (or the cell's folder) and run the study's command to train the cell again"
REPAIR = f"`lavo-zoo compare` writes a cell's record whole, so this one was changed since: {RETRAIN}"


@dataclass
class CellRecord:
    """One run: a study's (attention, seed) cell, or a results JSON given to ``compare --collect``."""

    # the mechanism, or {site: mechanism} ("" for a single-attention model) of a collected results JSON
    attention: str | dict[str, str]
    metrics: dict[str, dict[str, Any]]  # name -> {"value", "higher_is_better", ...} as `lavo-zoo eval` writes them
    seed: int | None = None
    site: str | None = None  # the site the study varied (encoder-decoder recipes)
    config: str | None = None  # the study's CONFIG
    overrides: list[str] = field(default_factory=list)  # the cell's overrides (its attention and seed included)
    num_samples: int | None = None
    checkpoint: str | None = None  # the weights it was scored with (checkpoints/best, or last)
    checkpoint_sha256: str | None = None  # their sha256: the same weights scored twice are one run
    parameters: int | None = None
    train_time_s: float | None = None  # wall time of the training (first-use costs of the process included)
    # steady-state step time (median, s) and step memory (bytes above what a step starts with), measured so that the
    # order the cells run in does not matter (lavo_zoo.compare.steps); None in records of earlier versions
    step_time_s: float | None = None
    step_memory_bytes: int | None = None
    memory_method: str | None = None
    measured_steps: int | None = None  # steps the step time is the median of
    device: str | None = None
    split: str | None = None
    # how the cell ran (lavo_zoo.compare.launchers): {"launcher": "local", "cells_at_once": 2, "threads": 1, ...} or
    # {"launcher": "slurm", "slurm_job": "4711", "slurm_restarts": 1, ...}, with the host; None: in the study's process
    launch: dict[str, Any] | None = None
    source: str | None = None  # the file a record was read from (a cell.json or a collected results JSON)
    label: str | None = None  # its row in the table (lavo_zoo.compare.records.label_records)
    efficiency: dict[str, Any] | None = None  # its row's efficiency lengths (lavo_zoo.compare.efficiency)
    recipe: str | None = None  # the recipe a collected results JSON names

    def to_json(self) -> dict[str, Any]:
        """The record as ``cell.json`` holds it."""
        return {k: v for k, v in asdict(self).items() if k not in _NOT_SAVED}

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str | None = None) -> CellRecord:
        """A record from a ``cell.json`` mapping (keys it does not know are ignored).

        Raises:
            UsageError: ``data`` lacks the record's ``attention`` or ``metrics``.
        """
        if not isinstance(data.get("metrics"), dict) or "attention" not in data:
            raise UsageError(f"{source or 'a cell record'} is not a compare cell record (it needs 'attention' and "
                             "'metrics')")
        known = {f.name for f in fields(cls)} - set(_NOT_SAVED)
        return cls(**{k: v for k, v in data.items() if k in known}, **({"source": source} if source else {}))

    @classmethod
    def from_results(cls, data: dict[str, Any], source: str) -> CellRecord:
        """The record of a results JSON (what ``lavo-zoo eval --out`` writes, ``data``, with its ``metrics``): its
        attention and seed read from its config."""
        config = data.get("config") or {}
        return cls(attention=attention_names(config), metrics=data["metrics"],
                   seed=(config.get("train") or {}).get("seed"), checkpoint=data.get("checkpoint"),
                   checkpoint_sha256=data.get("checkpoint_sha256"), split=data.get("split"), source=source,
                   recipe=data["recipe"] if isinstance(data.get("recipe"), str) else None)

    @classmethod
    def read(cls, file: Path, skip_damaged: bool = False) -> CellRecord | None:
        """The record in ``file`` (a cell's ``cell.json``), its ``source`` the file.

        One policy for a record that cannot be read (the file cannot be opened, is not UTF-8 or not JSON, or holds no
        cell record): one message (:class:`DamagedRecord`) names the file, the line and column where its text breaks,
        what is wrong and what to do (:data:`REPAIR`: train the cell again). A study stops there (it must not count,
        or train over, a cell it cannot read); a gathering of existing results may go on without it.

        Args:
            file: the record.
            skip_damaged: a record that cannot be read is noted on stderr (:func:`note`) and left out (None), instead
                of stopping with the error (``compare --collect`` gathers what it can; ``compare`` and
                ``recall-plot`` stop).

        Raises:
            DamagedRecord: the record cannot be read (and ``skip_damaged`` is off); a :class:`UsageError`.
        """
        try:
            return cls.from_json(_record_json(Path(file)), str(file))
        except DamagedRecord as e:
            if not skip_damaged:
                raise
            note(e.describe(", so it is left out"))
            return None

    def options(self) -> list[str]:
        """The overrides the cell was trained with besides its seed and its attention's name, shortened
        (:func:`short_override`): what sets it apart from the other cells of its attention."""
        return [short_override(o) for o in self.overrides or [] if not is_seed(o) and not _is_attention_name(o)]


class DamagedRecord(UsageError):
    """A cell record that cannot be read: where (the file, and the line and column where its text breaks), what is
    wrong, and what to do."""

    def __init__(self, where: str, problem: str, repair: str = REPAIR) -> None:
        self.where, self.problem, self.repair = where, problem, repair
        super().__init__(self.describe())

    def describe(self, outcome: str = "") -> str:
        """The message, with what the reader does about the record (``outcome``: ", so it is left out")."""
        return f"{self.where}: the record of a finished cell cannot be read ({self.problem}){outcome}; {self.repair}"


def _record_json(file: Path) -> dict[str, Any]:
    """The mapping of a cell record, checked to hold one.

    Raises:
        DamagedRecord: naming the file, where its text breaks (line and column), what is wrong and what to do.
    """
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise DamagedRecord(str(file), os_error_reason(e), f"let this user read it, or {RETRAIN}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column = _line_column(raw, e.start)
        raise DamagedRecord(f"{file}, line {line}, column {column}", f"not UTF-8 text: byte {raw[e.start]:#04x}"
                            ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedRecord(f"{file}, line {e.lineno}, column {e.colno}", f"not JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise DamagedRecord(str(file), f"a JSON {type(data).__name__}, not a mapping")
    if not isinstance(data.get("metrics"), dict) or "attention" not in data:
        raise DamagedRecord(str(file), "not a compare cell record: it needs 'attention' and 'metrics'")
    return data


def _line_column(raw: bytes, offset: int) -> tuple[int, int]:
    """The line and column (both from 1, the column in bytes) of byte ``offset`` of ``raw``."""
    line_start = raw.rfind(b"\n", 0, offset) + 1
    return raw.count(b"\n", 0, offset) + 1, offset - line_start + 1


class MetricSummary(NamedTuple):
    """One metric's values over seeds: mean, sample standard deviation (0 for one value) and their number (no values:
    a NaN mean, n 0)."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> MetricSummary:
        """The summary of ``values`` (one per seed).

        Args:
            values: the metric's value in each run.
        """
        values = list(values)
        if not values:
            return cls(math.nan, 0.0, 0)
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))


def attention_names(config: dict[str, Any]) -> dict[str, str]:
    """{site: mechanism} of a results JSON's config (site "" for single-attention models); a site with a schedule of
    layers (``model.attention_schedule``) is named as ``compare`` takes it as a row, ``hybrid:lavo*3+sdpa``."""
    from lavo_zoo.attention.schedule import SCHEDULE_KEY, schedule_text

    model = config.get("model") or {}
    attention, schedule = model.get("attention"), model.get(SCHEDULE_KEY)

    def named(spec: Any, entries: Any) -> str:
        if isinstance(entries, list) and entries:
            return "hybrid:" + schedule_text([str(e.get("name") if isinstance(e, dict) else e) for e in entries])
        return str(spec.get("name") if isinstance(spec, dict) else spec)

    if isinstance(attention, dict) and "name" not in attention:
        schedule = schedule if isinstance(schedule, dict) else {}
        return {site: named(spec, schedule.get(site)) for site, spec in attention.items() if isinstance(spec, dict)}
    return {"": named(attention, schedule)} if attention is not None else {}


def is_seed(override: str) -> bool:
    """Whether ``override`` sets the seed (``train.seed=3``)."""
    return override.partition("=")[0] == SEED_KEY


def _is_attention_name(override: str) -> bool:
    """Whether ``override`` chooses an attention: a mechanism's name, or a schedule of layers (a hybrid row)."""
    key = override.partition("=")[0]
    return key.startswith("model.attention_schedule") or (key.startswith("model.attention") and key.endswith(".name"))


def short_override(override: str) -> str:
    """``model.attention.decoder_self.window_size=32`` -> ``window_size=32``."""
    key, sep, value = override.partition("=")
    return key.rsplit(".", 1)[-1] + sep + value


def note(text: str) -> None:
    """A note on stderr (``note: ...``): what a gathering of results left out or counted once."""
    click.echo(f"note: {text}", err=True)
