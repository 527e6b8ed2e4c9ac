"""One run of a study as a typed record (:class:`CellRecord`: what a cell's ``cell.json`` holds, or what a collected
results JSON says), and the row label each record gets in the table (:func:`label_records`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lavo_zoo.errors import UsageError

CELL_FILE = "cell.json"
_NOT_SAVED = ("source", "label", "efficiency")  # what a record gains after it is read, never in cell.json


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
    source: str | None = None  # the results JSON a collected record was read from
    label: str | None = None  # its row in the table (:func:`label_records`)
    efficiency: dict[str, Any] | None = None  # its row's efficiency lengths (lavo_zoo.compare.efficiency)

    def to_json(self) -> dict[str, Any]:
        """The record as ``cell.json`` holds it."""
        return {k: v for k, v in asdict(self).items() if k not in _NOT_SAVED}

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str | None = None) -> CellRecord:
        """A record from a ``cell.json`` mapping (keys it does not know are ignored)."""
        if not isinstance(data.get("metrics"), dict) or "attention" not in data:
            raise UsageError(f"{source or 'a cell record'} is not a compare cell record (it needs 'attention' and "
                             "'metrics')")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}, **({"source": source} if source else {}))


# ------------------------------------------------------------------------------------------------------- labels
def attention_label(config: dict[str, Any]) -> str:
    """A config's attention as one name: the mechanism, or its sites' mechanisms (``sdpa``, ``lavo+sdpa+lavo``)."""
    names = attention_names(config)
    return "+".join(names.values()) if names else "model"


def attention_names(config: dict[str, Any]) -> dict[str, str]:
    """{site: mechanism} of a results JSON's config (site "" for single-attention models)."""
    attention = (config.get("model") or {}).get("attention")
    if isinstance(attention, dict) and "name" in attention:
        return {"": str(attention["name"])}
    if isinstance(attention, dict):
        return {site: str(spec.get("name")) for site, spec in attention.items() if isinstance(spec, dict)}
    return {"": str(attention)} if attention is not None else {}


def label_records(records: list[CellRecord]) -> None:
    """Give every record a row label: its attention, or the sites whose mechanism differs between records; records
    of different studies that share a label (e.g. LAVO with and without an option) get what tells them apart."""
    multi = [r for r in records if isinstance(r.attention, dict)]
    sites = sorted({s for r in multi for s in r.attention})
    varying = [s for s in sites if len({r.attention.get(s) for r in multi}) > 1] or sites
    for r in records:
        if isinstance(r.attention, dict):
            names = r.attention
            r.label = ",".join(names[s] if s == "" else f"{s}={names.get(s)}" for s in varying if s in names)
        else:
            r.label = r.attention
    _tell_apart(records)


def _short(override: str) -> str:
    """``model.attention.decoder_self.window_size=32`` -> ``window_size=32``."""
    key, sep, value = override.partition("=")
    return key.rsplit(".", 1)[-1] + sep + value


def _setting(record: CellRecord) -> tuple[str, ...]:
    """What a cell was trained with besides its seed: its config and its overrides (shortened)."""
    overrides = [_short(o) for o in record.overrides or [] if not o.startswith("train.seed=")]
    config = [record.config] if isinstance(record.config, str) else []
    return (*config, *sorted(overrides))


def _tell_apart(records: list[CellRecord]) -> None:
    groups: dict[str, list[CellRecord]] = {}
    for r in records:
        groups.setdefault(r.label, []).append(r)
    for label, group in groups.items():
        settings = {id(r): _setting(r) for r in group}
        if len(set(settings.values())) < 2:
            continue
        common = set.intersection(*(set(v) for v in settings.values()))
        for r in group:
            own = [item for item in settings[id(r)] if item not in common]
            r.label = f"{label} ({', '.join(own)})" if own else label
