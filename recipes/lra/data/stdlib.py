"""Real documents every Python installation ships: the standard library's own sources (the built-in Text and
Retrieval stand-ins are cut from them)."""
from __future__ import annotations

import hashlib
import os
import sysconfig
from functools import lru_cache
from pathlib import Path

SKIP_PARTS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3", "turtledemo"}


@lru_cache(maxsize=1)
def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(*names: str) -> list[Path]:
    """Sorted ``.py`` files of the given stdlib modules/packages (all of the stdlib when none), tests excluded."""
    root = stdlib_root()
    tops = [root / n for n in names] if names else [root]
    files: set[Path] = set()
    for top in tops:
        if top.suffix == ".py":
            candidates = [top]
        else:
            candidates = []
            for folder, dirs, filenames in os.walk(top):
                dirs[:] = [d for d in dirs if d not in SKIP_PARTS and not d.startswith(".")]  # prune, do not walk
                candidates += [Path(folder) / f for f in filenames if f.endswith(".py")]
        for path in candidates:
            rel = path.relative_to(root)
            if path.is_file() and not SKIP_PARTS.intersection(rel.parts) and not rel.name.startswith("test_"):
                files.add(path)
    return sorted(files)


def split_of(path: Path, fractions: tuple[float, float] = (0.8, 0.1)) -> str:
    """A file's split, fixed by a hash of its stdlib-relative name: train / validation / test (80/10/10)."""
    rel = str(path.relative_to(stdlib_root()))
    u = int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) / 2**32
    return "train" if u < fractions[0] else "validation" if u < fractions[0] + fractions[1] else "test"
