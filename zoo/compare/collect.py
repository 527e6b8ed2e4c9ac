"""``lavo-zoo compare --collect PATH ...``: the study's records from results that already exist (compare folders,
run folders, results JSON files), with the efficiency lengths their compare folders measured.

A run counts once: a file reached twice (the same path given twice, a folder and a file in it, a link to it) and a
copy of a run (the same weights, by their sha256, scored on the same split; or a file with the same content) are
kept once, with a note, so that no spread comes from copies.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import click

from lavo_zoo.compare.efficiency import collect_efficiency
from lavo_zoo.compare.records import attention_names, label_records
from lavo_zoo.engine.records import CELL_FILE, CellRecord
from lavo_zoo.errors import UsageError


def collect(paths: list[Path], efficiency: bool = True) -> list[CellRecord]:
    """Cell records from compare folders (their cell.json files), run folders or results JSON files, each run once
    (see the module docstring); with ``efficiency``, each record gets the efficiency lengths its row has in a compare
    folder's ``efficiency/`` (:func:`~lavo_zoo.compare.efficiency.collect_efficiency`, never measured here)."""
    records = []
    files_seen: dict[Path, Path] = {}  # resolved file -> the path it was first reached by
    runs_seen: dict[tuple, Path] = {}  # a run's identity -> the file it was first read from
    for path in paths:
        if not path.exists():
            raise UsageError(f"--collect: {path} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob(CELL_FILE)) or sorted(
            p for p in path.rglob("*.json") if "checkpoints" not in p.relative_to(path).parts)  # not checkpoint meta
        for file in files:
            real = file.resolve()
            if real in files_seen:
                _note(f"{file} is {files_seen[real]} again (the same file): counted once")
                continue
            files_seen[real] = file
            try:
                data = json.loads(file.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(data, dict) or "metrics" not in data:
                continue
            record = _record(file, data)
            identities = _identities(file, data, record)
            first = next((runs_seen[i] for i in identities if i in runs_seen), None)
            if first is not None:
                _note(f"{file} holds the same run as {first} ({_why(identities, runs_seen)}): counted once")
                continue
            runs_seen.update(dict.fromkeys(identities, file))
            records.append(record)
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


def _record(file: Path, data: dict[str, Any]) -> CellRecord:
    if file.name == CELL_FILE:
        return CellRecord.from_json(data, source=str(file))
    config = data.get("config") or {}  # a plain results JSON: attention and seed from its config
    return CellRecord(attention=attention_names(config), metrics=data["metrics"],
                      seed=(config.get("train") or {}).get("seed"), checkpoint=data.get("checkpoint"),
                      checkpoint_sha256=data.get("checkpoint_sha256"), split=data.get("split"), source=str(file))


def _identities(file: Path, data: dict[str, Any], record: CellRecord) -> list[tuple]:
    """What makes two files one run: the weights scored (their sha256, and the split) where known, and the content."""
    content = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    ids: list[tuple] = [("content", content)]
    sha = record.checkpoint_sha256
    if sha is None and file.name == CELL_FILE:  # a cell of an earlier version: its results.json names the weights
        beside = file.parent / "results.json"
        try:
            sha = json.loads(beside.read_text()).get("checkpoint_sha256") if beside.is_file() else None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            sha = None
    if isinstance(sha, str):
        ids.append(("weights", sha, record.split))
    return ids


def _why(identities: list[tuple], seen: dict[tuple, Path]) -> str:
    kind = next(i for i in identities if i in seen)
    if kind[0] == "weights":
        return f"the same weights, sha256 {kind[1][:12]}..., scored on the {kind[2] or 'same'} split"
    return "the same content"


def _note(text: str) -> None:
    click.echo(f"note: {text}", err=True)
