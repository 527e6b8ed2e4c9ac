"""The wheels the GPU machine needs: the packages of wheels.txt at the lock's versions (requirements/lock.txt, the
one list of versions; wheels.txt names packages and how to get each). Standard library only: fetch_wheels.sh runs it
with a bare ``python3``. Usage: ``python3 benchmarks/gpu/wheels.py`` prints ``NAME==VERSION HOW`` per line."""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(__file__).resolve().parent / "wheels.txt"
HOWS = ("wheel", "build", "skip")


def _load_lockfile():
    """The package's lock-file module, loaded by path (lavo-zoo need not be installed where this runs)."""
    spec = importlib.util.spec_from_file_location("lavo_zoo_lockfile", ROOT / "zoo" / "lockfile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lockfile = _load_lockfile()


@dataclass(frozen=True)
class Wheel:
    """One line of wheels.txt with its version from the lock."""

    name: str     # canonical
    version: str  # the lock's
    how: str      # wheel, build or skip
    reason: str   # why it is skipped ("" otherwise)


def read_wheels(path: Path = WHEELS, lock_path: Path | None = None) -> list[Wheel]:
    """wheels.txt's packages at the lock's versions.

    Args:
        path: the list (NAME [how [reason]] per line, # comments).
        lock_path: the lock (default: ``$LAVO_ZOO_LOCK``, else requirements/lock.txt).

    Raises:
        ValueError: the list cannot be read, a line with a version (the lock holds them), an unknown way, a
            package listed twice, or a package the lock does not name (move the lock: requirements/move_lock.py).
    """
    import os

    lock = lockfile.read_lock(lock_path or Path(os.environ.get("LAVO_ZOO_LOCK") or ROOT / lockfile.LOCK_RELPATH))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read the wheel list {path}: {e.strerror or e}") from None
    out, seen = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.strip().startswith("#"):
            continue
        fields = line.split(None, 2)  # NAME [how [reason]], any whitespace between them
        name, how, reason = fields[0], (fields[1:2] or ["wheel"])[0], (fields[2:] or [""])[0]
        if any(c in name for c in "=<>!~@"):
            raise ValueError(f"{path}:{number}: '{name}': name the package only; its version is the lock's")
        if how not in HOWS:
            raise ValueError(f"{path}:{number}: unknown way '{how}' for {name} (one of {', '.join(HOWS)})")
        if lockfile.canonical(name) in seen:  # two ways for one package: two wheels, which stop the install
            raise ValueError(f"{path}:{number}: {name} is listed twice (first on line "
                             f"{seen[lockfile.canonical(name)]}): keep one line")
        seen[lockfile.canonical(name)] = number
        version = lock.version(name)
        if version is None:
            raise ValueError(f"{path}:{number}: {name} is not in the lock {lock.path}: a package lavo-zoo needs is "
                             f"locked by {lockfile.MOVE_COMMAND}")
        out.append(Wheel(lockfile.canonical(name), version, how, reason.strip()))
    return out


if __name__ == "__main__":
    try:
        wheels = read_wheels()
    except (ValueError, lockfile.LockFileError) as e:
        print(f"wheels.py: {e}", file=sys.stderr)
        sys.exit(2)
    for wheel in wheels:
        print(f"{wheel.name}=={wheel.version} {wheel.how}")
