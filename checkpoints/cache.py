"""The download cache: one folder per source, holding the verified file, its record and what it unpacked to.

    <cache>/downloads/<slug>-<hash of source>/
        <file>            the verified download (present only once its sha256 matched)
        <file>.part       an unfinished transfer, resumed by the next download
        record.json       {"source", "name", "file", "sha256", "size", "downloaded_at"}
        checkpoint/       the unpacked checkpoint directory, for archives
    <cache>/locks/<folder name>.lock   held while that folder is being written

The cache root is ``--cache-dir``, else ``LAVO_ZOO_CACHE``, else the user's cache directory.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavo_zoo.engine.checkpoint_io import sha256_file
from lavo_zoo.engine.env import cache_root

RECORD = "record.json"
UNPACKED = "checkpoint"
PART_SUFFIX = ".part"
_TRUE = {"1", "true", "yes", "on"}


def offline() -> bool:
    """True when ``LAVO_ZOO_OFFLINE`` or ``HF_HUB_OFFLINE`` asks to use only the cache."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("LAVO_ZOO_OFFLINE", "HF_HUB_OFFLINE"))


def offline_variable() -> str:
    """The variable that switched offline mode on, for messages."""
    return next((v for v in ("LAVO_ZOO_OFFLINE", "HF_HUB_OFFLINE")
                 if os.environ.get(v, "").strip().lower() in _TRUE), "LAVO_ZOO_OFFLINE")


def entry_dir(source: str, cache_dir: Path | str | None = None) -> Path:
    """The folder that holds the download of ``source`` (readable slug plus a hash of the full source)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", source.rstrip("/").rsplit("/", 1)[-1])[:60] or "download"
    return cache_root(cache_dir) / "downloads" / f"{slug}-{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def lock_path(folder: Path) -> Path:
    """The lock file guarding a cache folder (kept outside it, so that removing the folder is safe)."""
    return folder.parent.parent / "locks" / f"{folder.name}.lock"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to a temporary file next to ``path`` and rename it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class CacheEntry:
    """One folder of the cache as found on disk."""

    folder: Path
    record: dict[str, Any]

    @property
    def key(self) -> str:
        return self.folder.name

    @property
    def file(self) -> Path | None:
        """The verified file, or None when the download never finished."""
        name = self.record.get("file")
        return self.folder / name if name and (self.folder / name).is_file() else None

    @property
    def unpacked(self) -> Path | None:
        return self.folder / UNPACKED if (self.folder / UNPACKED).is_dir() else None

    @property
    def state(self) -> str:
        if self.file is not None:
            return "complete"
        return "partial" if any(self.folder.glob(f"*{PART_SUFFIX}")) else "empty"

    def size_on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file() and not p.is_symlink())

    def matches(self, pattern: str) -> bool:
        """True when the glob matches the key, the index name or the source."""
        return any(fnmatch.fnmatch(str(v), pattern) for v in (self.key, self.record.get("name"),
                                                               self.record.get("source")) if v)

    def summary(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.record.get("name") or "", "source": self.record.get("source", ""),
                "state": self.state, "sha256": self.record.get("sha256", ""), "size": self.size_on_disk(),
                "unpacked": self.unpacked is not None, "path": str(self.file or self.folder)}


def read_record(folder: Path) -> dict[str, Any]:
    """The folder's record.json, or {} when absent or unreadable."""
    try:
        return json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def list_entries(cache_dir: Path | str | None = None, pattern: str | None = None) -> list[CacheEntry]:
    """Cache folders, sorted by key, optionally filtered by a glob on key, name or source."""
    root = cache_root(cache_dir) / "downloads"
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    entries = [CacheEntry(f, read_record(f)) for f in folders]
    return [e for e in entries if pattern is None or e.matches(pattern)]


def verify_entry(entry: CacheEntry) -> str | None:
    """Re-hash a complete entry's file; None when it matches its record, else a description of the problem."""
    if entry.file is None:
        return "download not finished (no verified file)"
    actual = sha256_file(entry.file)
    if actual != entry.record.get("sha256"):
        return f"sha256 mismatch: recorded {entry.record.get('sha256')}, file has {actual}"
    return None


def remove_entry(entry: CacheEntry) -> None:
    """Delete one cache folder and everything in it."""
    shutil.rmtree(entry.folder)
