#!/usr/bin/env python3
"""Move the lock (requirements/lock.txt) to the newest releases that pass the test suite.

The lock is the exact set the README's install command installs (``pip install -e ".[dev]" -c
requirements/lock.txt``) and the set the suite last passed with. This script moves it, and is the only way it moves:

1. a fresh virtual environment (``python3 -m venv``, this interpreter);
2. the project with every extra the README's install brings (``.[dev]``), at the newest releases that
   pyproject.toml's ranges admit (``--upgrade --upgrade-strategy eager``), or, with ``--move NAME[==VERSION]``, the
   current lock with only the named packages moved (to the newest release, or to VERSION);
3. ``pip freeze`` of that environment, plus the extras the README's install leaves out (``fla``: CUDA kernels),
   resolved against it, written as a candidate lock beside the lock;
4. the README's test command (read from its ``<!-- ci-commands -->`` block, as ``.ci/run`` reads it) in that
   environment, with ``LAVO_ZOO_LOCK`` pointing at the candidate (so the suite's drift test checks the candidate);
5. only when the suite passes, the candidate replaces the lock, and the packages that moved are listed.

A failing install or suite leaves the lock as it was and says where the environment is (kept for a look).
``--move`` moves only packages the lock names, and needs a lock it can read; without ``--move`` a lock that cannot be
read (not UTF-8, a line that is not name==version) is written afresh.

When to run it: to move the torch set (after moving its three pins in pyproject.toml together), before a release,
when a dependency's new release is wanted, or when ``--move`` of one package is enough (a patch of one library).
It takes about a quarter of an hour on two cores (the install, then the whole suite) and 6 GB for the environment.

Usage (from anywhere; the repository is this file's parent's parent):
    python3 requirements/move_lock.py                         # every package to the newest release in range
    python3 requirements/move_lock.py --move transformers     # one package moved, the rest as locked
    python3 requirements/move_lock.py --move numpy==2.4.7     # one package to a given release
    python3 requirements/move_lock.py --venv /tmp/lock-venv   # where the environment is made (default: a temp dir)
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the extras the README's install does not bring, resolved against the locked set for those who install them
EXTRA_EXTRAS = ("fla",)
PROJECT = "lavo-zoo"
# what the new environment's interpreter says of itself: "3.11 Linux x86_64"
PLATFORM_PROBE = ("import platform, sys; v = sys.version_info; "
                  "print(f'{v.major}.{v.minor}', platform.system(), platform.machine())")


def _load_lockfile() -> ModuleType:
    """The package's lock-file module (``zoo/lockfile.py``, standard library only), loaded by path: no environment
    with lavo-zoo exists yet when this script starts."""
    spec = importlib.util.spec_from_file_location("lavo_zoo_lockfile", ROOT / "zoo" / "lockfile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is made
    spec.loader.exec_module(module)
    return module


lockfile = _load_lockfile()


class MoveError(RuntimeError):
    """A step failed; the lock is unchanged. The message says which step and what to do."""


def readme_commands(readme: Path = README) -> list[str]:
    """The lines of the README's ``<!-- ci-commands -->`` block (what ``.ci/run`` runs): the install, then the
    tests."""
    lines, found, fence = [], False, 0
    for line in readme.read_text(encoding="utf-8").splitlines():
        if "<!-- ci-commands -->" in line:
            found = True
            continue
        if found and line.startswith("```"):
            fence += 1
            if fence == 2:
                break
            continue
        if found and fence == 1 and line.strip():
            lines.append(line.strip())
    if len(lines) < 2:
        raise MoveError(f"{readme} has no install and test commands in its <!-- ci-commands --> block")
    return lines


def suite_command(venv: Path, readme: Path = README) -> str:
    """The README's test commands (every line after the install) with its ``.venv`` replaced by ``venv``."""
    tests = readme_commands(readme)[1:]
    return " && ".join(line.replace(".venv/bin/", f"{shlex.quote(str(venv))}/bin/") for line in tests)


def parse_moves(moves: Sequence[str]) -> dict[str, str | None]:
    """``["torch==2.12.0", "numpy"]`` -> ``{"torch": "2.12.0", "numpy": None}`` (None: the newest in range).

    Raises:
        MoveError: a move that is not ``NAME`` or ``NAME==VERSION``.
    """
    out: dict[str, str | None] = {}
    for move in moves:
        name, sep, version = move.partition("==")
        if not name.strip() or (sep and not version.strip()) or any(c in move for c in "<>!~ ;@") or "=" in version:
            raise MoveError(f"--move {move!r}: give a package name, or NAME==VERSION")
        out[lockfile.canonical(name.strip())] = version.strip() or None
    return out


class Runner:
    """Runs the steps' commands (the tests replace it to run none)."""

    def run(self, cmd: Sequence[str] | str, env: dict[str, str] | None = None, capture: bool = False,
            cwd: Path = ROOT) -> subprocess.CompletedProcess:
        shown = cmd if isinstance(cmd, str) else shlex.join(cmd)
        print(f"$ {shown}", flush=True)
        return subprocess.run(cmd, shell=isinstance(cmd, str), env=env, cwd=cwd, text=True, check=False,
                              capture_output=capture)


def install_args(venv: Path, moves: dict[str, str | None], constraints: Path | None) -> list[str]:
    """The pip command that installs the project into ``venv``: the newest releases in range (no moves), or the lock
    (as ``constraints``, the moved packages left out of it) with the moved packages asked for."""
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    if not moves:
        return pip + ["--upgrade", "--upgrade-strategy", "eager", "-e", f"{ROOT}[dev]"]
    asked = [name if version is None else f"{name}=={version}" for name, version in moves.items()]
    return pip + ["--upgrade", "--upgrade-strategy", "only-if-needed", "-c", str(constraints), "-e", f"{ROOT}[dev]",
                  *asked]


def constraints_without(lock, moves: dict[str, str | None], out: Path) -> Path:
    """The lock's installed set minus the moved packages, as a constraints file at ``out``."""
    kept = {name: version for name, version in lock.pins.items() if name not in moves}
    out.write_text("".join(f"{name}=={version}\n" for name, version in sorted(kept.items())), encoding="utf-8")
    return out


def extra_pins(runner: Runner, venv: Path, constraints: Path, work: Path) -> dict[str, dict[str, str]]:
    """What each extra of :data:`EXTRA_EXTRAS` adds to the installed set, resolved (not installed) against it."""
    out: dict[str, dict[str, str]] = {}
    for extra in EXTRA_EXTRAS:
        report = work / f"extra-{extra}.json"
        result = runner.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                             "--dry-run", "--quiet", "--report", str(report), "-c", str(constraints), "-e",
                             f"{ROOT}[dev,{extra}]"], capture=True)
        if result.returncode != 0:
            raise MoveError(f"the '{extra}' extra does not resolve against the new set:\n{result.stderr[-3000:]}")
        data = json.loads(report.read_text(encoding="utf-8"))
        out[extra] = {lockfile.canonical(item["metadata"]["name"]): item["metadata"]["version"]
                      for item in data.get("install", [])
                      if lockfile.canonical(item["metadata"]["name"]) != PROJECT}
    return out


def changes(old, new) -> list[str]:
    """The packages that moved between two locks, one line each (``numpy 2.4.6 -> 2.4.7``, added, removed)."""
    def flat(lock) -> dict[str, str]:
        out = dict(lock.pins)
        for pins in lock.extras.values():
            out.update(pins)
        return out

    before, after = (flat(old) if old else {}), flat(new)
    lines = [f"{n} {before[n]} -> {after[n]}" for n in sorted(before.keys() & after.keys()) if before[n] != after[n]]
    lines += [f"{n} {after[n]} (new)" for n in sorted(after.keys() - before.keys())]
    lines += [f"{n} {before[n]} (gone)" for n in sorted(before.keys() - after.keys())]
    return lines


def move_lock(lock_file: Path, moves: dict[str, str | None], venv: Path, runner: Runner) -> list[str]:
    """Build the environment, lock it, run the suite against the candidate and put it in place when it passes.

    Args:
        lock_file: the lock to move (requirements/lock.txt).
        moves: the packages to move (empty: all to the newest release in range).
        venv: a folder for the fresh environment (must not exist, or be empty).
        runner: runs the commands.

    Returns:
        the packages that moved, one line each.

    Raises:
        MoveError: a step failed; ``lock_file`` is unchanged.
    """
    if lock_file.exists() and not lock_file.is_file():
        raise MoveError(f"{lock_file} is not a file: the lock is the text file {lockfile.LOCK_RELPATH}")
    try:
        old = lockfile.read_lock(lock_file) if lock_file.is_file() else None
    except lockfile.LockFileError as e:
        if moves:  # a move keeps every other package as locked: it needs the lock
            raise MoveError(f"--move keeps the other packages as locked, and the lock cannot be read: {e}; or run "
                            "without --move to write every package afresh") from None
        print(f"move_lock: the lock cannot be read ({e}); it is written afresh", file=sys.stderr)
        old = None
    if moves and old is None:
        raise MoveError(f"--move needs a lock to start from and {lock_file} is missing: run without --move")
    unknown = sorted(name for name in moves if old is not None and name not in old.pins)
    if unknown:  # pip would install it, and the lock would name a package the README's install does not bring
        raise MoveError(f"--move {', '.join(unknown)}: not in the lock, which holds exactly what the README's install "
                        f"brings ({lock_file}); move a package it names")
    if venv.exists() and (not venv.is_dir() or any(venv.iterdir())):
        raise MoveError(f"{venv} is a file or is not empty: give --venv a new folder (the environment must be fresh)")
    work = Path(tempfile.mkdtemp(prefix="lavo-zoo-lock-"))
    candidate = venv / "lock.candidate.txt"  # kept with the environment when the suite fails
    try:
        if runner.run([sys.executable, "-m", "venv", str(venv)]).returncode != 0:
            raise MoveError(f"python3 -m venv {venv} failed")
        constraints = constraints_without(old, moves, work / "constraints.txt") if moves else None
        if runner.run(install_args(venv, moves, constraints)).returncode != 0:
            hint = (" (a moved package that needs others moved too: run without --move to move every package)"
                    if moves else "")
            raise MoveError(f"the install into {venv} failed{hint}; the lock is unchanged")
        frozen = runner.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all", "--exclude-editable"],
                            capture=True)
        if frozen.returncode != 0:
            raise MoveError(f"pip freeze failed: {frozen.stderr[-2000:]}")
        pins = lockfile.parse_freeze(frozen.stdout, PROJECT)
        installed_constraints = work / "installed.txt"
        installed_constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())), encoding="utf-8")
        extras = extra_pins(runner, venv, installed_constraints, work)
        extras = {extra: {n: v for n, v in found.items() if n not in pins} for extra, found in extras.items()}
        python = runner.run([str(venv / "bin" / "python"), "-c", PLATFORM_PROBE], capture=True).stdout.split()
        moved = "every package to the newest release in range" if not moves else "moved: " + ", ".join(
            name if v is None else f"{name}=={v}" for name, v in moves.items())
        header = ["The tested set: every package the README's install brings (`pip install -e \".[dev]\" -c",
                  "requirements/lock.txt`), at the versions the test suite passed with. Written by",
                  "requirements/move_lock.py (run it to move this file; never edit it by hand).",
                  f"Written on {datetime.date.today().isoformat()} ({moved})."]
        text = lockfile.format_lock(pins, extras, header, python=python[0], system=" ".join(python[1:3]))
        candidate.write_text(text, encoding="utf-8")
        env = {**os.environ, "LAVO_ZOO_LOCK": str(candidate), "VIRTUAL_ENV": str(venv),
               "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        if runner.run(suite_command(venv), env=env).returncode != 0:
            raise MoveError(f"the suite failed with the new set; the lock is unchanged (the environment is kept at "
                            f"{venv} and the candidate lock at {candidate} for a look)")
        new = lockfile.read_lock(candidate)
        staged = lock_file.with_name(f".{lock_file.name}.new")
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, lock_file)  # whole or not at all
        return changes(old, new)
    except MoveError:
        raise
    except lockfile.LockFileError as e:
        raise MoveError(str(e)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None, runner: Runner | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--move", action="append", default=[], metavar="NAME[==VERSION]",
                        help="move only this package (repeat for several); the rest stay as locked")
    parser.add_argument("--venv", type=Path, default=None, help="where to make the fresh environment (default: a "
                        "new temporary folder, removed when the lock moved)")
    parser.add_argument("--lock", type=Path, default=ROOT / lockfile.LOCK_RELPATH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    runner = runner or Runner()
    made = args.venv is None
    venv = args.venv or Path(tempfile.mkdtemp(prefix="lavo-zoo-lock-venv-")) / "venv"
    try:
        moved = move_lock(args.lock, parse_moves(args.move), venv, runner)
    except MoveError as e:
        print(f"move_lock: {e}", file=sys.stderr)
        return 1
    if made:
        shutil.rmtree(venv.parent, ignore_errors=True)
    print(f"the suite passed; wrote {args.lock}: " + (f"{len(moved)} moved" if moved else "nothing moved"))
    for line in moved:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
