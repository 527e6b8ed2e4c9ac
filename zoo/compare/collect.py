"""``lavo-zoo compare --collect PATH ...``: the study's records from results that already exist (compare folders,
run folders, results JSON files), with the efficiency lengths their compare folders measured."""
from __future__ import annotations

import json
from pathlib import Path

from lavo_zoo.compare.efficiency import collect_efficiency
from lavo_zoo.compare.records import CELL_FILE, CellRecord, attention_names, label_records
from lavo_zoo.errors import UsageError


def collect(paths: list[Path], efficiency: bool = True) -> list[CellRecord]:
    """Cell records from compare folders (their cell.json files), run folders or results JSON files; with
    ``efficiency``, each record gets the efficiency lengths its row has in a compare folder's ``efficiency/``
    (:func:`~lavo_zoo.compare.efficiency.collect_efficiency`, never measured here)."""
    records = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"--collect: {path} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob(CELL_FILE)) or sorted(
            p for p in path.rglob("*.json") if "checkpoints" not in p.relative_to(path).parts)  # not checkpoint meta
        for file in files:
            try:
                data = json.loads(file.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(data, dict) or "metrics" not in data:
                continue
            if file.name == CELL_FILE:
                records.append(CellRecord.from_json(data, source=str(file)))
            else:  # a plain results JSON: attention and seed from its config
                config = data.get("config") or {}
                records.append(CellRecord(attention=attention_names(config), metrics=data["metrics"],
                                          seed=(config.get("train") or {}).get("seed"), source=str(file)))
    if not records:
        raise UsageError(f"--collect found no results JSON (a file with 'metrics') under {', '.join(map(str, paths))}")
    label_records(records)
    found = collect_efficiency(paths) if efficiency else {}
    if found:
        from lavo_zoo.bench.efficiency import BASELINE

        found.setdefault(BASELINE, {"is_baseline": True})
    for r in records:
        if r.label in found:
            r.efficiency = found[r.label]
    return records
