"""A cache of what is computed from a dataset folder (``lm``'s token ids, ``tts``'s log-mel features): one folder per
dataset, one file per split and settings, named by a fingerprint of everything the file depends on (the settings,
each source file's name, size and modification time), so that an edited file or a changed setting is never served
stale, and the file it replaces is removed.

    <cache>/<dataset folder name>-<hash of its path>/<stem><fingerprint><suffix>
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def fingerprint(payload: Any) -> str:
    """16 hex digits of the sha256 of ``payload``'s JSON (its key order kept)."""
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


def file_stats(path: Path) -> tuple[int, int]:
    """(size, modification time in ns) of ``path``: what tells that a file changed, for a fingerprint."""
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def cached_file(cache: Path, root: Path, stem: str, payload: Any, suffix: str, make: Callable[[Path], None]) -> Path:
    """The cache file of the dataset folder ``root`` for ``stem`` (a split and its settings' name) and ``payload``
    (everything the file depends on), made by ``make(path)`` (which writes ``path`` atomically) when missing, the
    files it replaces (those of ``stem`` with another fingerprint) then removed.

    Args:
        cache: the recipe's cache folder for this kind of file.
        root: the dataset folder the file is computed from (resolved).
        stem: the start of the file's name (``train-gpt2-``).
        payload: JSON-able: the settings, and each source file's name and :func:`file_stats`.
        suffix: the file's suffix (``.bin``).
        make: writes the file.

    Returns:
        The file's path.
    """
    folder = Path(cache) / f"{root.name}-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"
    path = folder / f"{stem}{fingerprint(payload)}{suffix}"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        make(path)
        for stale in folder.glob(f"{stem}*"):  # with the files beside it (<name>.skipped.json)
            if stale.name.split(".")[0] != path.name.split(".")[0]:
                stale.unlink(missing_ok=True)
    return path
