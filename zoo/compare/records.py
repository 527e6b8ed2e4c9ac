"""The row label each record of a study (:class:`~lavo_zoo.engine.records.CellRecord`: what a cell's ``cell.json``
holds, or what a collected results JSON says) gets in the table (:func:`label_records`)."""
from __future__ import annotations

from typing import Any

from lavo_zoo.engine.records import CellRecord, attention_names, is_seed, short_override


# ------------------------------------------------------------------------------------------------------- labels
def attention_label(config: dict[str, Any]) -> str:
    """A config's attention as one name: the mechanism, or its sites' mechanisms (``sdpa``, ``lavo+sdpa+lavo``)."""
    names = attention_names(config)
    return "+".join(names.values()) if names else "model"


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


def _setting(record: CellRecord) -> tuple[str, ...]:
    """What a cell was trained with besides its seed: its config and its overrides (shortened)."""
    overrides = [short_override(o) for o in record.overrides or [] if not is_seed(o)]
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
