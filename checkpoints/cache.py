"""The download cache: one folder per source, holding the verified file, its record and what it unpacked to.

    <cache>/downloads/<slug>-<hash of source>/
        <file>            the verified download (present only once its sha256 matched)
        <file>.part       an unfinished transfer, resumed by the next download
        record.json       {"source", "name", "file", "sha256", "size", "downloaded_at"}
        checkpoint/       the unpacked checkpoint directory, for archives
        unpacked.json     {"archive_sha256", "files": {path: sha256}}: what checkpoint/ held when it was unpacked
                          from the verified file; checked on every use (a changed copy is unpacked again)
    <cache>/locks/<folder name>.lock   held while that folder is being written

The cache root is ``--cache-dir``, else ``LAVO_ZOO_CACHE``, else the user's cache directory.
"""
from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lavo_zoo.atomic import put_file
from lavo_zoo.engine.env import cache_root
from lavo_zoo.outputs import sha256_file, tree_hashes

RECORD = "record.json"
UNPACKED = "checkpoint"
UNPACKED_MANIFEST = "unpacked.json"
PART_SUFFIX = ".part"
_TRUE = {"1", "true", "yes", "on"}


def offline() -> bool:
    """True when ``LAVO_ZOO_OFFLINE`` or ``HF_HUB_OFFLINE`` asks to use only the cache."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("LAVO_ZOO_OFFLINE", "HF_HUB_OFFLINE"))


def offline_variable() -> str:
    """The variable that switched offline mode on, for messages."""
    return next((v for v in ("LAVO_ZOO_OFFLINE", "HF_HUB_OFFLINE")
                 if os.environ.get(v, "").strip().lower() in _TRUE), "LAVO_ZOO_OFFLINE")


def entry_name(source: str) -> str:
    """The name of the folder that holds the download of ``source`` (readable slug plus a hash of the source)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", source.rstrip("/").rsplit("/", 1)[-1])[:60] or "download"
    return f"{slug}-{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def entry_dir(source: str, cache_dir: Path | str | None = None) -> Path:
    """The folder that holds the download of ``source``."""
    return cache_root(cache_dir) / "downloads" / entry_name(source)


def lock_path(folder: Path) -> Path:
    """The lock file guarding a cache folder (kept outside it, so that removing the folder is safe)."""
    return folder.parent.parent / "locks" / f"{folder.name}.lock"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`lavo_zoo.atomic.put_file`): a failure (a full disk)
    leaves ``path`` as it was and no temporary file, and raises the ``OSError``."""

    def fill(f: BinaryIO) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8")
        json.dump(data, text, indent=2)
        text.write("\n")
        text.detach()  # flushes; f stays open for put_file

    put_file(path, fill)


def unpacked_problem(folder: Path, archive_sha256: str | None) -> str | None:
    """None when ``folder``'s unpacked checkpoint holds exactly what was unpacked from the archive of
    ``archive_sha256`` (its manifest), else what differs."""
    try:
        manifest = json.loads((folder / UNPACKED_MANIFEST).read_text())
        recorded, source = dict(manifest["files"]), manifest["archive_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"no record ({UNPACKED_MANIFEST}) of what was unpacked"
    if archive_sha256 is not None and source != archive_sha256:
        return "unpacked from another file than the one cached"
    actual = tree_hashes(folder / UNPACKED)
    changed = sorted(name for name in set(recorded) | set(actual) if recorded.get(name) != actual.get(name))
    if not changed:
        return None
    what = [f"{name} {'added' if name not in recorded else 'removed' if name not in actual else 'changed'}"
            for name in changed[:4]]
    return f"{UNPACKED}/ was changed after it was unpacked: " + ", ".join(what) + (" ..." if len(changed) > 4 else "")


@dataclass(frozen=True)
class CacheEntry:
    """One folder of the cache as found on disk."""

    folder: Path
    record: dict[str, Any]

    @property
    def key(self) -> str:
        """The entry's folder name (slug and hash of its source)."""
        return self.folder.name

    @property
    def file(self) -> Path | None:
        """The verified file, or None when the download never finished."""
        name = self.record.get("file")
        return self.folder / name if name and (self.folder / name).is_file() else None

    @property
    def unpacked(self) -> Path | None:
        """The unpacked checkpoint folder, or None."""
        return self.folder / UNPACKED if (self.folder / UNPACKED).is_dir() else None

    @property
    def state(self) -> str:
        """``complete`` (verified file), ``partial`` (a transfer to resume) or ``empty``."""
        if self.file is not None:
            return "complete"
        return "partial" if any(self.folder.glob(f"*{PART_SUFFIX}")) else "empty"

    def size_on_disk(self) -> int:
        """Bytes of every file in the entry's folder."""
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file() and not p.is_symlink())

    def matches(self, pattern: str) -> bool:
        """True when the glob matches the key, the index name or the source."""
        return any(fnmatch.fnmatch(str(v), pattern) for v in (self.key, self.record.get("name"),
                                                               self.record.get("source")) if v)

    def summary(self) -> dict[str, Any]:
        """What ``cache ls`` shows of the entry (key, name, source, state, sha256, size, unpacked, path)."""
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
    """Cache folders, sorted by key, optionally filtered by a glob on key, name or source. Only folders a download
    made count (a record.json whose source hashes to the folder's name): anything else under ``downloads/`` (a
    cache root given as a folder of the user's) is never listed, so never removed."""
    root = cache_root(cache_dir) / "downloads"
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
    entries = [CacheEntry(f, read_record(f)) for f in folders]
    return [e for e in entries if is_download(e) and (pattern is None or e.matches(pattern))]


def is_download(entry: CacheEntry) -> bool:
    """Whether ``entry``'s folder was made by a download: its record names a source whose folder it is."""
    source = entry.record.get("source")
    return isinstance(source, str) and entry_name(source) == entry.folder.name


def verify_entry(entry: CacheEntry) -> str | None:
    """Re-hash a complete entry's file and, where it was unpacked, the unpacked copy against what was unpacked;
    None when both match, else a description of the problem."""
    if entry.file is None:
        return "download not finished (no verified file)"
    actual = sha256_file(entry.file)
    if actual != entry.record.get("sha256"):
        return f"sha256 mismatch: recorded {entry.record.get('sha256')}, file has {actual}"
    if entry.unpacked is not None:
        problem = unpacked_problem(entry.folder, actual)
        if problem:
            return f"{problem} (the next use unpacks it again from the verified file)"
    return None


def remove_entry(entry: CacheEntry) -> None:
    """Delete one cache folder (a download's, :func:`is_download`) and everything in it."""
    if not is_download(entry) or entry.folder.is_symlink():
        raise ValueError(f"{entry.folder} is not a download's folder; not removed")
    shutil.rmtree(entry.folder)
