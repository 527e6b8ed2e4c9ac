"""``compare --rerun``: which cells of a study are trained again, and the removal of what they hold.

A cell is kept only while its resolved config equals the study's (:func:`check_reusable`); one trained with another
config is refused, or with ``--rerun`` marked to be trained again. Nothing is removed while the study is planned: a
cell to train again is only checked (:func:`check_removable`: not a link, holding nothing the study did not write,
not being worked on), and the study removes the cells it marked (:func:`remove_cells`) once every cell's config and
model have checked out, and never in a dry run. What is removed is what the study wrote there (:data:`STUDY_WRITES`,
and what a writer killed mid-write left), nothing else. Torch-free.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from lavo_zoo.atomic import is_temporary
from lavo_zoo.compare.jobs import JOB_FILE, LOG_FILE, RESULTS_FILE, TIMING_FILE
from lavo_zoo.compare.locks import CELL_LOCK, FolderLock
from lavo_zoo.engine.records import CELL_FILE
from lavo_zoo.errors import UsageError
from lavo_zoo.outputs import RUN_FILES

SLURM_DIR = "slurm"  # a cell's Slurm job files (lavo_zoo.compare.slurm.submissions.JOB_DIR)
# what a study writes in a cell folder: the training run's own entries and lock, the cell's evaluation, timing,
# record and lock, the local launcher's job and log, the Slurm launcher's job files
STUDY_WRITES = frozenset({*RUN_FILES, RESULTS_FILE, TIMING_FILE, CELL_FILE, CELL_LOCK, JOB_FILE, LOG_FILE, SLURM_DIR})


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): data}


def config_difference(cell_dir: Path, resolved: dict[str, Any]) -> list[str]:
    """How the config a cell was trained with (its ``config.yaml``) differs from ``resolved`` (the cell's config in
    this study, as a mapping): ``key: old there, new now`` per key; empty when they agree or the cell has no
    config.yaml yet (its run had not started)."""
    import yaml

    saved_file = Path(cell_dir) / "config.yaml"
    if not saved_file.is_file():
        return []
    from lavo_zoo.attention.spec import with_option_defaults  # options left out compare at their defaults

    saved, now = (_flat(with_option_defaults(c)) for c in (yaml.safe_load(saved_file.read_text()), resolved))
    return [f"{k}: {saved.get(k)!r} there, {now.get(k)!r} now" for k in sorted(set(saved) | set(now))
            if saved.get(k) != now.get(k)]


def check_reusable(cell_dir: Path, resolved: dict[str, Any], rerun: bool) -> bool:
    """Whether ``cell_dir`` is to be trained again: False when it was trained with ``resolved`` (the cell's resolved
    config as a mapping; a cell without a config.yaml yet is kept, its run had not started). A cell trained otherwise
    is refused naming the difference, or with ``rerun`` checked (:func:`check_removable`) and marked: True. Removes
    nothing.

    Raises:
        UsageError: the cell was trained with another config and ``rerun`` is off, or it cannot be removed.
    """
    diff = config_difference(cell_dir, resolved)
    if not diff:
        return False
    if rerun:
        check_removable(cell_dir)
        return True
    raise UsageError(f"{cell_dir} was trained with another config ({'; '.join(diff[:6])}"
                     f"{' ...' if len(diff) > 6 else ''}); its results would not be comparable. Give another --out, "
                     "the study's earlier settings, or --rerun to train the cell again")


def foreign_entries(cell_dir: Path) -> list[str]:
    """The entries of ``cell_dir`` the study did not write (links among them: the study writes none)."""
    found = []
    for entry in sorted(Path(cell_dir).iterdir()):
        name = entry.name
        if entry.is_symlink() or not (name in STUDY_WRITES or is_temporary(name) or name.startswith(".old-")):
            found.append(name + (f" (a link to {os.readlink(entry)})" if entry.is_symlink() else ""))
    return found


def check_removable(cell_dir: Path) -> None:
    """Refuse, before anything is removed, a cell ``--rerun`` cannot empty: a link (what it points at is not the
    study's), a folder holding anything the study did not write, a cell another process works on.

    Raises:
        UsageError: naming the cell and what to do.
    """
    cell_dir = Path(cell_dir)
    if cell_dir.is_symlink():
        raise UsageError(f"--rerun: {cell_dir} is a link (to {os.readlink(cell_dir)}), not a folder the study "
                         "wrote, and --rerun removes only what the study wrote; remove the link yourself (what it "
                         "points at is kept) and run the command again to train the cell here")
    foreign = foreign_entries(cell_dir)
    if foreign:
        raise UsageError(f"--rerun: {cell_dir} holds {', '.join(foreign[:6])}{' ...' if len(foreign) > 6 else ''}, "
                         "which the study did not write, and --rerun removes only what the study wrote; move "
                         "them away and run the command again")
    busy = FolderLock(cell_dir / CELL_LOCK).busy()
    if busy:
        raise UsageError(f"--rerun: {cell_dir} is being worked on by {busy}; wait for it to end, or stop it, "
                         "before training the cell again")


def remove_cells(cells: list[Path]) -> None:
    """Remove what the study wrote in each of ``cells`` (checked by :func:`check_removable` when the study was
    planned, and again here), then the emptied folder, so that each is trained again from the start.

    Raises:
        UsageError: a cell that can no longer be removed (changed since it was planned); the cells before it are
            removed, the others are not.
    """
    for cell_dir in cells:
        check_removable(cell_dir)
        for entry in Path(cell_dir).iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        Path(cell_dir).rmdir()
