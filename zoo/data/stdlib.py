"""The standard-library corpus: real documents every Python installation ships, which the built-in text data of
several recipes is made from (``lm``'s books, ``summarization``'s code and docstrings, ``lra``'s Text and Retrieval
stand-ins), so that every command works offline.

One implementation, each recipe's choice a parameter of it: which files (:func:`stdlib_files`: the whole tree or its
top level, the folders and files left out) and the split of each document, fixed by a hash of its name
(:func:`lavo_zoo.data.split.hash_split`: which hash, which shares). A recipe's choices decide its generated data
(and so the figures measured on it): they are never changed silently.
"""
from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path


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
