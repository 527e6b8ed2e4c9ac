"""A run counts once, however many paths reach it: the one rule of every command that gathers results from folders
(``lavo-zoo compare``'s table of its own cells and ``--collect``, a recipe's study plots such as ``recall-plot``).

A file reached twice (the same path given twice, a folder and a file in it, a link to it) is read once; a copy of a
run (the same weights, by their sha256, scored on the same split; or a file with the same content) is kept once. Each
repeat is skipped with a note on stderr naming the file it repeats, so that no mean or spread comes from copies.
``compare``'s own table keeps its cells by the same rule (:func:`distinct_runs`), and every gathering walks the
folders it is given with one collector (:func:`collect_runs`: ``compare --collect``, ``recall-plot``).

Here and not in :mod:`lavo_zoo.engine.records` (the record, its reader and the summary over seeds), which this module
builds on: the collector counts each run once by the rule above.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lavo_zoo.engine.records import CELL_FILE, CellRecord, note
from lavo_zoo.errors import UsageError


class RunsSeen:
    """What a gathering has read so far: ``new_file`` before reading a file, ``new_run`` once it is read (``quiet``:
    repeats are skipped without a note)."""

    def __init__(self, quiet: bool = False) -> None:
        self.files: dict[Path, Path] = {}  # resolved file -> the path it was first reached by
        self.runs: dict[tuple, Path] = {}  # a run's identity -> the file it was first read from
        self.quiet = quiet

    def note(self, text: str) -> None:
        if not self.quiet:
            note(text)

    def new_file(self, file: Path) -> bool:
        """Whether ``file`` is reached for the first time (else a note says which path reached it before).

        Args:
            file: a results JSON or a cell record, as found (through links, relative or not).
        """
        real = Path(file).resolve()
        if real in self.files:
            self.note(f"{file} is {self.files[real]} again (the same file): counted once")
            return False
        self.files[real] = Path(file)
        return True

    def new_run(self, file: Path, data: dict[str, Any]) -> bool:
        """Whether the run ``data`` (the results JSON or cell record read from ``file``) was not read before under
        another path (else a note names the file it repeats and why they are one run); records it.

        Args:
            file: where ``data`` was read.
            data: its content: a mapping with ``metrics`` and, where known, ``checkpoint_sha256`` and ``split``.
        """
        identities = run_identities(Path(file), data)
        first = next((self.runs[i] for i in identities if i in self.runs), None)
        if first is not None:
            kind = next(i for i in identities if i in self.runs)
            why = (f"the same weights, sha256 {kind[1][:12]}..., scored on the {kind[2] or 'same'} split"
                   if kind[0] == "weights" else "the same content")
            again = (" (a copy in a study's cell: remove it, or the cell's folder, and run the study's command to "
                     "train that cell)") if Path(file).name == CELL_FILE and Path(first).name == CELL_FILE else ""
            self.note(f"{file} holds the same run as {first} ({why}): counted once{again}")
            return False
        self.runs.update(dict.fromkeys(identities, Path(file)))
        return True


def distinct_runs(records: list[CellRecord], quiet: bool = False) -> list[CellRecord]:
    """``records`` (in their order) with each run once, by the rule of :class:`RunsSeen`: what a study's own table
    holds, as ``--collect`` would read the same cells (a cell.json copied into another cell's folder, or a cell
    folder that is a link to another, is one run). A record without a ``source`` (the file it was read from) is
    kept.

    Args:
        records: cell records read from their cell.json (``source``).
        quiet: skip repeats without a note (a table rewritten as cells finish notes them once, at the end).
    """
    seen, kept = RunsSeen(quiet), []
    for record in records:
        if record.source is None or (seen.new_file(Path(record.source))
                                     and seen.new_run(Path(record.source), record.to_json())):
            kept.append(record)
    return kept


def run_identities(file: Path, data: dict[str, Any]) -> list[tuple]:
    """What makes two files one run: the weights scored (their sha256, and the split) where known, and the content.
    A cell record of an earlier version without the sha256 takes it from the ``results.json`` beside it."""
    content = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    ids: list[tuple] = [("content", content)]
    sha = data.get("checkpoint_sha256")
    if sha is None and file.name == CELL_FILE:
        beside = file.parent / "results.json"
        try:
            sha = json.loads(beside.read_text()).get("checkpoint_sha256") if beside.is_file() else None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            sha = None
    if isinstance(sha, str):
        ids.append(("weights", sha, data.get("split")))
    return ids


def collect_runs(paths: list[Path], skip_damaged: bool = False, results: bool = False) -> list[CellRecord]:
    """The finished runs under ``paths``, each once however many paths reach it (:class:`RunsSeen`), in the order
    found: the cell records (``cell.json``) under each folder (a study's, a cell's) or each file given; with
    ``results``, also results JSONs (what ``lavo-zoo eval --out`` writes): a file given by name that is not a cell
    record, and the JSON files with ``metrics`` under a folder that holds no cell record (a run folder: not its
    checkpoints' meta).

    Args:
        paths: folders and files, as the user gave them.
        skip_damaged: a cell record that cannot be read is noted and left out (``compare --collect``), instead of
            stopping with its error (``recall-plot``): the one reader's one argument (:meth:`CellRecord.read`).
        results: read results JSONs as well as cell records (``compare --collect``).

    Raises:
        UsageError: a path that does not exist, a cell record that cannot be read (without ``skip_damaged``), or
            nothing found.
    """
    records: list[CellRecord] = []
    seen = RunsSeen()
    for path in map(Path, paths):
        if not path.exists():
            raise UsageError(f"{path} does not exist; give the --out folder of a `lavo-zoo compare` study, a cell's "
                             "folder or its cell.json" + (", or a results JSON (`lavo-zoo eval --out`)"
                                                          if results else ""))
        for file in _run_files(path, results):
            if not seen.new_file(file):
                continue
            if results and file.name != CELL_FILE:
                found = _results_record(file, given=path.is_file())
            else:
                record = CellRecord.read(file, skip_damaged)
                found = None if record is None else (record, record.to_json())
            if found is not None and seen.new_run(file, found[1]):
                records.append(found[0])
    if not records:
        raise UsageError(f"found no finished compare cell ({CELL_FILE})"
                         + (" and no results JSON (a file with 'metrics')" if results else "")
                         + f" under {', '.join(map(str, paths))}")
    return records


def _run_files(path: Path, results: bool) -> list[Path]:
    """The files of ``path`` that may hold a run: itself, else its cell records, else (``results``) its JSON files
    outside checkpoints (whose meta.json is not a result)."""
    if path.is_file():
        return [path]
    cells = sorted(path.rglob(CELL_FILE))
    if cells or not results:
        return cells
    return sorted(p for p in path.rglob("*.json") if "checkpoints" not in p.relative_to(path).parts)


def _results_record(file: Path, given: bool) -> tuple[CellRecord, dict[str, Any]] | None:
    """The record of a results JSON and its content, or None for a file that holds none (noted when the file was
    ``given`` by name; any other JSON under a run folder is passed over quietly)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # JSON and UTF-8 errors are ValueErrors
        if given:
            note(f"{file} cannot be read ({e}), so it is left out")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        if given:
            note(f"{file} holds no results ('metrics'), so it is left out")
        return None
    return CellRecord.from_results(data, str(file)), data
