"""``lavo-zoo compare --collect PATH ...``: the study's records from results that already exist (compare folders,
run folders, results JSON files), with the efficiency lengths their compare folders measured.

The walk is the one every gathering of results shares (:func:`~lavo_zoo.engine.run_identity.collect_runs`): a run
counts once (a file reached twice, or a copy of a run, is kept once, with a note), and a cell record that cannot be
read is noted and left out, the rest collected. Runs of several recipes in one table are noted too.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from lavo_zoo.compare.efficiency import collect_efficiency
from lavo_zoo.compare.records import label_records
from lavo_zoo.engine.records import CELL_FILE, CellRecord, note
from lavo_zoo.engine.run_identity import collect_runs


def collect(paths: list[Path], efficiency: bool = True) -> list[CellRecord]:
    """Cell records from compare folders (their cell.json files), run folders or results JSON files, each run once
    (see the module docstring); with ``efficiency``, each record gets the efficiency lengths its row has in a compare
    folder's ``efficiency/`` (:func:`~lavo_zoo.compare.efficiency.collect_efficiency`, never measured here).

    Args:
        paths: the arguments of ``--collect``.
        efficiency: attach the efficiency lengths measured earlier.

    Raises:
        UsageError: a path that does not exist, or no results under any.
    """
    records = collect_runs(paths, skip_damaged=True, results=True)
    recipes: dict[str, list[CellRecord]] = defaultdict(list)  # the recipe each run trained
    for record in records:
        name = _recipe(record)
        if name is not None:
            recipes[name].append(record)
    if len(recipes) > 1:
        note(f"the collected runs come from {len(recipes)} recipes ("
             + "; ".join(f"{name}: {len(runs)} run(s)" for name, runs in recipes.items())
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


def _recipe(record: CellRecord) -> str | None:
    """The recipe a run trained: a results JSON says it; a cell record's is in the results.json beside it."""
    if record.recipe is not None or record.source is None or Path(record.source).name != CELL_FILE:
        return record.recipe
    try:
        beside = json.loads((Path(record.source).parent / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return beside.get("recipe") if isinstance(beside, dict) and isinstance(beside.get("recipe"), str) else None
