"""The standard-library documents the built-in Text and Retrieval stand-ins are cut from: LRA's selection of the
shared corpus (:mod:`lavo_zoo.data.stdlib`): the whole tree without tests, demos and hidden folders, split by a
sha256 of each file's path."""
from __future__ import annotations

from pathlib import Path

from lavo_zoo.data.split import hash_split
from lavo_zoo.data.stdlib import stdlib_files as _stdlib_files
from lavo_zoo.data.stdlib import stdlib_root

SKIP_PARTS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3", "turtledemo"}


def stdlib_files(*names: str) -> list[Path]:
    """Sorted ``.py`` files of the given stdlib modules/packages (all of the stdlib when none), tests excluded."""
    return _stdlib_files(*names, skip_folders=SKIP_PARTS, skip=_skipped)


def _skipped(rel: Path) -> bool:
    return rel.name.startswith("test_") or any(part.startswith(".") for part in rel.parts[:-1])


def stdlib_split(path: Path, fractions: tuple[float, float] = (0.8, 0.1)) -> str:
    """A file's split, fixed by a hash of its stdlib-relative name: train / validation / test (80/10/10)."""
    shares = (("train", fractions[0]), ("validation", fractions[1]), ("test", 1 - fractions[0] - fractions[1]))
    return hash_split(str(path.relative_to(stdlib_root())), shares, digest="sha256")
