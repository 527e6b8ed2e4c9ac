"""The row label each record of a study (:class:`~lavo_zoo.engine.records.CellRecord`: what a cell's ``cell.json``
holds, or what a collected results JSON says) gets in the table (:func:`label_records`)."""
from __future__ import annotations

from typing import Any

from lavo_zoo.engine.records import CellRecord, is_seed, short_override


# ------------------------------------------------------------------------------------------------------- labels
def attention_label(config: dict[str, Any]) -> str:
    """A config's attention as one name: the mechanism, or its sites' mechanisms (``sdpa``, ``lavo+sdpa+lavo``)."""
    names = attention_names(config)
    return "+".join(names.values()) if names else "model"


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
