"""``lavo-zoo compare --collect PATH ...``: the study's records from results that already exist (compare folders,
run folders, results JSON files), with the efficiency lengths their compare folders measured.

A run counts once: a file reached twice (the same path given twice, a folder and a file in it, a link to it) and a
copy of a run (the same weights, by their sha256, scored on the same split; or a file with the same content) are
kept once, with a note, so that no spread comes from copies (the rule: :mod:`lavo_zoo.engine.run_identity`). A file
left out (a cell record that cannot be read) is noted, and so are runs of several recipes in one table.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from lavo_zoo.compare.efficiency import collect_efficiency
from lavo_zoo.compare.records import attention_names, label_records
from lavo_zoo.engine.records import CELL_FILE, CellRecord
from lavo_zoo.engine.run_identity import RunsSeen, note
from lavo_zoo.errors import UsageError


def collect(paths: list[Path], efficiency: bool = True) -> list[CellRecord]:
    """Cell records from compare folders (their cell.json files), run folders or results JSON files, each run once
    (see the module docstring); with ``efficiency``, each record gets the efficiency lengths its row has in a compare
    folder's ``efficiency/`` (:func:`~lavo_zoo.compare.efficiency.collect_efficiency`, never measured here)."""
    records = []
    recipes: dict[str | None, list[CellRecord]] = defaultdict(list)  # the recipe each run trained
    seen = RunsSeen()  # the one rule: lavo_zoo.engine.run_identity
    for path in paths:
        if not path.exists():
            raise UsageError(f"--collect: {path} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob(CELL_FILE)) or sorted(
            p for p in path.rglob("*.json") if "checkpoints" not in p.relative_to(path).parts)  # not checkpoint meta
        for file in files:
            if not seen.new_file(file):
                continue
            try:
                data = json.loads(file.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                if file.name == CELL_FILE or path.is_file():  # a record, or a file given by name: say so
                    again = ("; it is a finished cell's record: remove it (or the cell's folder) and run the study's "
                             "command to train the cell again") if file.name == CELL_FILE else ""
                    note(f"{file} cannot be read ({e}), so it is left out{again}")
                continue
            if not isinstance(data, dict) or "metrics" not in data:
                if file.name == CELL_FILE or path.is_file():
                    note(f"{file} holds no results ('metrics'), so it is left out")
                continue
            try:
                record = _record(file, data)
            except UsageError as e:
                note(f"{e}: left out")
                continue
            if seen.new_run(file, data):
                records.append(record)
                recipes[_recipe(file, data)].append(record)
    if not records:
        raise UsageError(f"--collect found no results JSON (a file with 'metrics') under {', '.join(map(str, paths))}")
    known = {name: runs for name, runs in recipes.items() if name is not None}
    if len(known) > 1:
        note(f"the collected runs come from {len(known)} recipes ("
             + "; ".join(f"{name}: {len(runs)} run(s)" for name, runs in known.items())
             + "); they share one table, but their metrics compare only within a recipe")
    label_records(records)
    found = collect_efficiency(paths) if efficiency else {}
    if found:
        from lavo_zoo.bench.efficiency import BASELINE

        found.setdefault(BASELINE, {"is_baseline": True})
    for r in records:
        if r.label in found:
            r.efficiency = found[r.label]
    return records


def _recipe(file: Path, data: dict[str, Any]) -> str | None:
    """The recipe a run trained: a results JSON says it; a cell record's is in the results.json beside it."""
    if isinstance(data.get("recipe"), str):
        return data["recipe"]
    if file.name == CELL_FILE:
        try:
            beside = json.loads((file.parent / "results.json").read_text())
        except (OSError, ValueError):
            return None
        return beside.get("recipe") if isinstance(beside, dict) and isinstance(beside.get("recipe"), str) else None
    return None


def _record(file: Path, data: dict[str, Any]) -> CellRecord:
    if file.name == CELL_FILE:
        return CellRecord.from_json(data, source=str(file))
    config = data.get("config") or {}  # a plain results JSON: attention and seed from its config
    return CellRecord(attention=attention_names(config), metrics=data["metrics"],
                      seed=(config.get("train") or {}).get("seed"), checkpoint=data.get("checkpoint"),
                      checkpoint_sha256=data.get("checkpoint_sha256"), split=data.get("split"), source=str(file))
