"""The standard-library corpus: real documents every Python installation ships, which the built-in text data of
several recipes is made from (``lm``'s books, ``summarization``'s code and docstrings, ``lra``'s Text and Retrieval
stand-ins), so that every command works offline.

One implementation, each recipe's choice a parameter of it: which files (:func:`stdlib_files`: the whole tree or its
top level, the folders and files left out) and the split of each document, fixed by a hash of its name
(:func:`hash_split`: which hash, which shares). A recipe's choices are part of the cache key of its generated data
(through the generator's version), so they are never changed silently.
"""
from __future__ import annotations

import hashlib
import os
import sysconfig
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

SPLITS_90_5_5 = (("validation", 0.05), ("test", 0.05), ("train", 0.90))  # 20 buckets of crc32: 1, 1 and 18


@lru_cache(maxsize=1)
def stdlib_root() -> Path:
    """The folder of this Python's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(*names: str, recursive: bool = True, skip_folders: frozenset[str] | set[str] = frozenset(),
                 skip: Callable[[Path], bool] = lambda rel: False) -> list[Path]:
    """The standard library's ``.py`` files, sorted.

    Args:
        names: modules (``json.py``) or packages (``email``) to take files from, relative to the standard library's
            folder; none: all of it.
        recursive: enter sub-folders (else the top level's files only).
        skip_folders: folder names never entered (``site-packages``, ``test``, ...), wherever they are.
        skip: a file is left out when ``skip(rel)`` is true for its path relative to the standard library.

    Returns:
        The files' absolute paths, sorted.
    """
    root = stdlib_root()
    tops = [root / n for n in names] if names else [root]
    files: set[Path] = set()
    for top in tops:
        if top.suffix == ".py":
            candidates = [top]
        elif not recursive:
            candidates = list(top.glob("*.py"))
        else:
            candidates = []
            for folder, dirs, filenames in os.walk(top):
                dirs[:] = [d for d in dirs if d not in skip_folders]  # pruned: never walked
                candidates += [Path(folder) / f for f in filenames if f.endswith(".py")]
        for path in candidates:
            rel = path.relative_to(root)
            if path.is_file() and not skip_folders.intersection(rel.parts[:-1]) and not skip(rel):
                files.add(path)
    return sorted(files)


def hash_split(name: str, shares: Sequence[tuple[str, float]] = SPLITS_90_5_5,
               digest: Literal["crc32", "sha256"] = "crc32") -> str:
    """The split of the document ``name``, fixed by a hash of it (the same on every machine and run).

    The hash gives a number u in [0, 1); the split is the first of ``shares`` whose cumulative share passes it.

    Args:
        name: what identifies the document (a module's name, a path relative to the standard library).
        shares: (split, share) in order, the shares summing to 1.
        digest: ``crc32``: u = (crc32 mod 20) / 20, shares in steps of 5%; ``sha256``: u from the digest's first
            32 bits.

    Returns:
        The split's name.
    """
    if digest == "crc32":
        u = (zlib.crc32(name.encode()) % 20) / 20
    else:
        u = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 2**32
    passed = 0.0
    for split, share in shares:
        passed += share
        if u < passed:
            return split
    return shares[-1][0]
