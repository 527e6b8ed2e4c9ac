"""The output policy's checks before a command's work: what no output may be (:func:`belongs_to`: a checkpoint's or a
training run's own file, anything in a study's cells), a file output (:func:`check_writable`), a folder output
(:func:`check_folder_output`), a training run's folder (:func:`check_run_output`) and a folder that cannot be
written (:func:`check_folder_writable`). Torch-free."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lavo_zoo.errors import UsageError
from lavo_zoo.outputs.kinds import FILE_SUFFIXES, FileKind, FolderKind, check_suffix, ending
from lavo_zoo.outputs.manifests import check_recorded

# a checkpoint's own files (lavo_zoo.engine.checkpoint_io): no output replaces them
CHECKPOINT_FILES = ("model.safetensors", "config.yaml", "meta.json", "train_state.pt")
# a training run's own entries (lavo_zoo.engine.run_dir, the run lock of lavo_zoo.engine.run_dir.RunLock)
RUN_FILES = ("config.yaml", "metrics.jsonl", "tensorboard", "checkpoints", ".lock")
STUDY_CELLS = "cells"  # a study's cells are the training runs in OUT/cells/ (lavo_zoo.compare), each file theirs
CELL_RECORD = "cell.json"  # what marks a study cell elsewhere (lavo_zoo.engine.records.CELL_FILE)
HEAD = 1 << 16  # bytes of an existing file read to tell its kind


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a training run's folder (its ``checkpoints/`` beside ``config.yaml`` or
    ``metrics.jsonl``, or a run's lock)."""
    folder = Path(folder)
    return ((folder / "checkpoints").is_dir() and ((folder / "config.yaml").is_file()
                                                   or (folder / "metrics.jsonl").is_file())) \
        or (folder / ".lock").is_file()


def _is_cell(folder: Path) -> bool:
    return (folder / CELL_RECORD).is_file() or (folder.parent.name == STUDY_CELLS and is_run_folder(folder))


STUDY_TABLES = ("table.md", "table.csv")  # what a study writes beside its cells (lavo_zoo.compare.table)


def is_study_folder(folder: Path) -> bool:
    """Whether ``folder`` is a study's (``lavo-zoo compare --out``): a ``cells/`` folder beside the study's table,
    or holding a cell (a folder with a cell record or a training run)."""
    cells = Path(folder) / STUDY_CELLS
    if not cells.is_dir():
        return False
    if any((Path(folder) / name).is_file() for name in STUDY_TABLES):
        return True
    try:
        return any(_is_cell(entry) for entry in cells.iterdir() if entry.is_dir())
    except OSError:
        return False


def study_of_cells(path: Path) -> Path | None:
    """The study whose ``cells/`` holds ``path`` (or is it), links followed: only ``lavo-zoo compare`` writes
    there. None when no study does."""
    try:
        real = Path(path).resolve()
    except OSError:
        return None
    for folder in (real, *real.parents):
        if folder.name == STUDY_CELLS and is_study_folder(folder.parent):
            return folder.parent
    return None


def folder_resolved(path: Path) -> Path:
    """``path`` with its folder's links resolved (not its own: a link is replaced, not what it points at)."""
    path = Path(path)
    try:
        return path.parent.resolve() / path.name
    except OSError:
        return path.absolute()


def belongs_to(path: Path) -> str | None:
    """What ``path`` is part of that no output may replace, in words after its name, or None: a checkpoint's own
    file, a training run's own entry, anything in a run's ``checkpoints/``, an existing file of a study cell."""
    path = folder_resolved(path)
    parent = path.parent
    if path.name in CHECKPOINT_FILES and (parent / "meta.json").is_file():
        return f"is a file of the checkpoint in {parent}, which it would destroy"
    if path.name in RUN_FILES and is_run_folder(parent):
        return f"is part of the training run {parent}, which it would destroy"
    if _is_cell(parent) and (path.exists() or path.is_symlink()):
        return f"is a file of the study cell {parent}, which it would destroy"
    for folder in path.parents:
        if folder.name == "checkpoints" and is_run_folder(folder.parent):
            return f"is in the checkpoints of the training run {folder.parent}, which it would damage"
    study = study_of_cells(parent)
    if study is not None:
        return (f"is in the cells of the study {study}, which only `lavo-zoo compare` writes (a cell's record says "
                "what it holds)")
    return None


def check_run_output(path: Path, option: str = "--out") -> Path:
    """Refuse, before any work is done, a training run's folder (``lavo-zoo train --out``) in another command's
    outputs: a study's cell or anything in a study's ``cells/`` (links followed: a cell's record and the checkpoint
    it scored would go stale), a study's own folder, a checkpoint, or a folder inside a training run or a checkpoint
    (a run nested in a run). An earlier run of ``train`` in ``path`` is its own (``--resume`` continues it).

    Args:
        path: the run folder.
        option: how the user gave it, for the messages.

    Returns:
        ``path``.

    Raises:
        UsageError: naming what ``path`` is part of and what to give instead.
    """
    path = Path(path)
    fix = f"give another {option} (a folder of its own, e.g. runs/NAME)"
    study = study_of_cells(path)
    if study is not None:
        raise UsageError(f"{option} {path} is in the cells of the study {study}, which `lavo-zoo compare` trains and "
                         "scores: training there would change the weights its record (cell.json) scored. Run the same "
                         f"compare command to continue the study, or {fix}")
    real = folder_resolved(path)
    try:
        real = real.resolve()
    except OSError:
        pass
    if is_study_folder(real):
        raise UsageError(f"{option} {path} is the folder of a study (its cells/ and table); {fix}")
    if (real / "meta.json").is_file():
        raise UsageError(f"{option} {path} is a checkpoint, not a run folder; {fix} (--resume {path} continues "
                         "training from it)")
    for folder in real.parents:  # a run by what it holds (a lock file alone is any tool's, not a run's)
        trained = (folder / "checkpoints").is_dir() and any((folder / n).is_file() for n in RUN_FILES[:2])
        if trained or (folder / "meta.json").is_file():
            what = "training run" if trained else "checkpoint"
            raise UsageError(f"{option} {path} is inside the {what} {folder}: training there would nest a run in "
                             f"it; {fix}")
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _inside(inner: Path, outer: Path) -> bool:
    try:
        inner, outer = inner.resolve(), outer.resolve()
    except OSError:
        return False
    return inner == outer or outer in inner.parents


def head_of(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD)
    except OSError:
        return b""


# ------------------------------------------------------------------------------------------------------ checks
def check_writable(path: Path, overwrite: bool, option: str = "--out",
                   inputs: Mapping[str, Path | str | None] | None = None, kind: FileKind | None = None) -> Path:
    """Refuse, before any work is done, a file output the policy does not allow.

    Args:
        path: the file to write.
        overwrite: an existing ``path`` may be replaced (``--overwrite``), if it is of ``kind``.
        option: how the user gave ``path`` (``--out``, ``--png``, ``OUT``), for the messages.
        inputs: {option: path} of what the command reads; none of them is ever written.
        kind: what is written there: its suffix is checked and an existing file must be of that kind to be
            replaced (None: any name, any earlier content).

    Returns:
        ``path``.

    Raises:
        UsageError: an input, a checkpoint's or a run's own file, a suffix that names another format, an existing
            file without ``overwrite`` or of another kind, a folder, a folder that cannot be written.
    """
    path = Path(path)
    for name, given in (inputs or {}).items():
        if given is not None and _same_file(path, Path(given)):
            raise UsageError(f"{option} {path} is the {name} this command reads; writing there would destroy it. "
                             f"Give another {option}")
    owner = belongs_to(path)
    if owner:
        raise UsageError(f"{option} {path} {owner}; give another {option} (no output replaces it, even with "
                         "--overwrite)")
    if kind is not None:
        check_suffix(path, kind, option)
    if path.is_symlink() and not path.exists():
        if not overwrite:
            raise UsageError(f"{option} {path} is a link to {os.readlink(path)}, which does not exist; give another "
                             f"{option}, or add --overwrite to replace the link.")
    elif path.exists():
        if path.is_dir():
            raise UsageError(f"{option} {path} is a folder; give a file name")
        if kind is not None and not kind.recognise(head_of(path), path):
            raise UsageError(f"{option} {path} already exists and is not {kind.name} (what this command writes), so "
                             "it is not an earlier output of it, the only file --overwrite replaces. Give another "
                             f"{option}, or move that file away")
        if not overwrite:
            raise UsageError(f"{option} {path} already exists; nothing replaces it without --overwrite. Give another "
                             f"{option}, or add --overwrite.")
    check_folder_writable(path.parent, option, path)
    return path


def check_folder_writable(folder: Path, option: str = "--out", given: Path | None = None) -> Path:
    """Refuse, before any work is done, a ``folder`` that cannot be created or written in (a read-only mount, a
    folder of another user, a path through a file); ``given``: what the user gave, for the message."""
    folder, given = Path(folder), Path(given if given is not None else folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            raise UsageError(f"{option} {given}: {existing} is a link to {os.readlink(existing)}, which does not "
                             f"exist; create it, or give another {option}")
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {given}: {existing} is a file, not a folder; give another {option}")
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only(existing) else "is not writable"
        raise UsageError(f"{option} {given}: the folder {existing} {why}; give another {option}")
    return folder


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def check_folder_output(path: Path, kind: FolderKind, overwrite: bool, option: str = "--out",
                        inputs: Mapping[str, Path | str | None] | None = None) -> Path:
    """Refuse, before any work is done, a folder output the policy does not allow.

    Args:
        path: the folder to write.
        kind: what is written there (its manifest says what an earlier command of the kind wrote).
        overwrite: an earlier output of the kind may be replaced (``--overwrite``).
        option: how the user gave ``path``, for the messages.
        inputs: {option: path} of what the command reads: never inside ``path``.

    Returns:
        ``path``.

    Raises:
        UsageError: a link, a file, the current folder or one holding it, a name that names a file format, a folder
            holding an input, a checkpoint, a training run or part of one, a folder holding files no command of the
            kind recorded writing (with or without ``overwrite``), an earlier output without ``overwrite``, a folder
            that cannot be written.
    """
    path = Path(path)
    owner = belongs_to(path)
    if owner:
        raise UsageError(f"{option} {path} {owner}; give another {option} (no output replaces it, even with "
                         "--overwrite)")
    if path.is_dir() and (path / "meta.json").is_file():
        raise UsageError(f"{option} {path} is a checkpoint, which writing {kind.name} there would destroy; give "
                         f"another {option} (no output replaces it, even with --overwrite)")
    if path.is_dir() and is_run_folder(path):
        raise UsageError(f"{option} {path} is a training run (its checkpoints, metrics and config), which writing "
                         f"{kind.name} there would destroy; give another {option} (no output replaces it, even "
                         "with --overwrite)")
    if _inside(Path.cwd(), path):
        raise UsageError(f"{option} {path} is the current folder (or holds it); this command writes {kind.name} of "
                         "its own: give its path, e.g. out/NAME")
    for name, given in (inputs or {}).items() if not kind.in_place else ():  # in place: nothing is replaced whole
        if given is not None and Path(given).exists() and _inside(Path(given), path):
            raise UsageError(f"{option} {path} holds the {name} this command reads ({given}); writing there would "
                             f"destroy it. Give another {option}")
    if path.is_symlink():
        raise UsageError(f"{option} {path} is a link (to {os.readlink(path)}); {kind.name} is written in place of "
                         f"it: give the folder itself, or another {option}")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; this command writes {kind.name}: give a folder")
    suffix = ending(path, FILE_SUFFIXES)
    if suffix is not None:
        raise UsageError(f"{option} {path}: {suffix} names a file, but this command writes {kind.name}; give a "
                         "folder name without it")
    if path.is_dir():
        if kind.manifest is not None and not kind.merge:
            check_recorded(path, kind, overwrite, option)
        elif kind.manifest is None and not kind.in_place and any(path.iterdir()):
            raise UsageError(f"{option} {path} already exists and is not an empty directory; give a new {option} "
                             "directory")
    check_folder_writable(path if path.exists() else path.parent, option, path)
    return path

