"""The dependencies lavo-zoo checks before it relies on them, and the set it was tested with.

PyTorch publishes ``torch``, ``torchaudio`` and ``torchvision`` as one matched release: torchaudio's compiled library
is built against one torch and fails to load beside another (``libtorchaudio.so: undefined symbol ...``).
pyproject.toml pins the three exactly; :func:`import_torchaudio` is the one way the project imports torchaudio (MCD
features, resampling, Griffin-Lim), and turns a mismatched pair into one line naming both versions and the command
that repairs it, instead of a missing symbol deep in a test or a training run.

:func:`declared_requirements` reads the pins from lavo-zoo's own installed metadata (pyproject.toml is their one
source), so the repair command and ``lavo-zoo env`` always name the set this installation declares.

The lock (:mod:`lavo_zoo.lockfile`, ``requirements/lock.txt``) pins the whole tested set exactly; :func:`lock_status`
says whether this environment is that set (``lavo-zoo env``, and the suite's drift test).
"""
from __future__ import annotations

import importlib
import os
import re
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from lavo_zoo.errors import ZooError
from lavo_zoo.lockfile import INSTALL_COMMAND, LOCK_RELPATH, Lock, LockFileError, drift, read_lock

# the lock to compare with instead of the source checkout's (the lock-moving script points the suite at the lock it
# is about to write)
LOCK_VARIABLE = "LAVO_ZOO_LOCK"

# PyTorch's ABI-coupled packages, in the order a repair command names them
TORCH_SET = ("torch", "torchaudio", "torchvision")


class DependencyError(ZooError):
    """An installed dependency lavo-zoo cannot use as it is (a mismatched build, a library that fails to load)."""


def _release(version: str) -> tuple[int, ...] | str:
    """The release of a version string without its local build tag (``2.11.0+cu130`` -> (2, 11, 0)); an
    unparsable string is compared as it is."""
    try:
        return Version(version).release
    except InvalidVersion:
        return version


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None where it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def declared_requirements() -> list[tuple[str, str, str]]:
    """lavo-zoo's declared requirements as (name, specifier, extra) from its installed metadata: ``("torch",
    "==2.11.0", "")``, ``("transformers", "<=5.24.0,>=5.24", "hf")``; empty where lavo-zoo is not installed."""
    try:
        lines = metadata.requires("lavo-zoo") or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", str(req.marker or ""))
        if req.name.lower() != "lavo-zoo":
            out.append((req.name, str(req.specifier), extra.group(1) if extra else ""))
    return out


def tested_torch_set() -> list[str]:
    """The exact pins of the ABI-coupled set as pip arguments (``["torch==2.11.0", "torchaudio==2.11.0", ...]``),
    from lavo-zoo's metadata."""
    pins = {name.lower(): spec for name, spec, extra in declared_requirements() if not extra}
    return [f"{name}{pins[name]}" for name in TORCH_SET if pins.get(name, "").startswith("==")]


def repair_command() -> str:
    """The pip command that installs the tested torch set into this environment."""
    pins = tested_torch_set() or [f"{name}=={installed_version('torch')}" for name in TORCH_SET[:2]]
    return "pip install " + " ".join(f"'{pin}'" for pin in pins)


def check_torchaudio_matches() -> None:
    """Refuse a torchaudio built for another torch release, before its compiled library is loaded.

    Raises:
        DependencyError: torchaudio's release differs from torch's (one line naming both and the repair).
    """
    torch_version, audio_version = installed_version("torch"), installed_version("torchaudio")
    if torch_version is None or audio_version is None:
        missing = "torch" if torch_version is None else "torchaudio"
        raise DependencyError(f"{missing} is not installed; install the tested set with: {repair_command()}")
    if _release(torch_version) != _release(audio_version):
        raise DependencyError(
            f"torchaudio {audio_version} does not match torch {torch_version} (PyTorch builds them as one set and "
            f"torchaudio's compiled library fails to load beside another torch); repair: {repair_command()}")


def import_torchaudio() -> ModuleType:
    """torchaudio, imported after :func:`check_torchaudio_matches`; a compiled library that still fails to load is
    the same one-line message. The project imports torchaudio only through this.

    Raises:
        DependencyError: a mismatched torch / torchaudio pair, or a torchaudio whose library does not load.
    """
    check_torchaudio_matches()
    try:
        return importlib.import_module("torchaudio")
    except (ImportError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DependencyError(
            f"torchaudio {installed_version('torchaudio')} fails to load beside torch {installed_version('torch')} "
            f"({first}); repair: {repair_command()}") from None


def installed_distributions() -> dict[str, str]:
    """name -> version of every distribution this interpreter imports from (the first on ``sys.path`` where one is
    installed twice), lavo-zoo included."""
    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name not in out:
            out[name] = dist.version
    return out


def lock_path() -> Path | None:
    """The lock this installation is held to: ``$LAVO_ZOO_LOCK``, else ``requirements/lock.txt`` of the source
    checkout lavo-zoo runs from (an editable install); None where there is none (an install from a release, which
    is not locked)."""
    if os.environ.get(LOCK_VARIABLE):
        return Path(os.environ[LOCK_VARIABLE])
    root = Path(__file__).resolve().parents[1]  # zoo/ -> the repository
    path = root / LOCK_RELPATH
    return path if path.is_file() and (root / "pyproject.toml").is_file() else None


def read_project_lock() -> Lock:
    """The lock of :func:`lock_path`.

    Raises:
        DependencyError: there is none, or it cannot be read (the message names the file and line).
    """
    path = lock_path()
    if path is None:
        raise DependencyError("no lock: lavo-zoo is not installed from a source checkout (the lock holds the "
                              f"project's own tests; set {LOCK_VARIABLE} to a lock file to compare with one)")
    try:
        return read_lock(path)
    except LockFileError as e:
        named = (f" (the file {LOCK_VARIABLE} names: correct it, or unset it to use the checkout's lock)"
                 if os.environ.get(LOCK_VARIABLE) else "")
        raise DependencyError(f"{e}{named}") from None


def lock_status() -> dict[str, Any]:
    """Whether this environment is the locked set: ``{"lock": path, "for": "Python 3.11 on Linux x86_64",
    "fits_this_machine": bool, "matches": bool, "differences": [...], "repair": the install command}``, or
    ``{"lock": None, "reason": ...}`` where there is no lock to compare with.

    Raises:
        DependencyError: the lock cannot be read.
    """
    path = lock_path()
    if path is None:
        return {"lock": None, "reason": "not a source checkout: an install from a release is not locked"}
    lock = read_project_lock()
    differences = drift(lock, installed_distributions())
    return {"lock": str(path), "for": f"Python {lock.python} on {lock.system}",
            "fits_this_machine": lock.fits_this_machine(), "matches": not differences,
            "differences": differences, "repair": INSTALL_COMMAND}


# ------------------------------------------------------------------------------------------- optional extras
EXTRA_MODULES = {"hf": ("transformers", "huggingface_hub")}  # what each extra must import (the transformers form)


def extra_problem(extra: str) -> str | None:
    """Why lavo-zoo's ``extra`` (``hf``) cannot be used here, or None when each of its modules imports: its real
    state, not its metadata (a package whose files are gone or broken still has its metadata)."""
    for module in EXTRA_MODULES[extra]:
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a broken install may raise anything on import
            if isinstance(e, ModuleNotFoundError) and e.name == module:
                return f"{module} is not installed"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return f"{module} {installed_version(module) or ''} does not import ({type(e).__name__}: {first})"
    return None


def require_extra(extra: str, purpose: str) -> None:
    """Refuse, before any work, what needs lavo-zoo's ``extra`` where it cannot be used (:func:`extra_problem`),
    with the command that repairs it.

    Args:
        extra: the extra's name (``hf``).
        purpose: what needs it, for the message (``the transformers format``).

    Raises:
        DependencyError: naming the missing or broken module and ``pip install 'lavo-zoo[extra]'``.
    """
    problem = extra_problem(extra)
    if problem is not None:
        raise DependencyError(f"{purpose} needs lavo-zoo's [{extra}] extra, and {problem}: pip install "
                              f"'lavo-zoo[{extra}]' (or, in a checkout, pip install -e '.[{extra}]')")
