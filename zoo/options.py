"""What every command shares: its click options (one spelling, one default and one help text each, used by the
core's commands and the recipes' ``cli.py``) and the rule for files it writes: a user's file is never replaced
without ``--overwrite``, and no command leaves a partial file under a final name (a write goes to a temporary file
that is linked into place only when complete, so two commands racing for one name cannot both win).

Torch-free, so that ``lavo-zoo --help`` stays fast.
"""
from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from lavo_zoo.errors import UsageError, ZooError

F = TypeVar("F", bound=Callable[..., Any])

device_option = click.option("--device", default=None, metavar="cpu|cuda|cuda:N",
                             help="Where to run (default: cuda when available, else cpu).")
overwrite_option = click.option("--overwrite", is_flag=True,
                                help="Replace existing output files (an existing --out is refused otherwise).")
json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
json_records_option = click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                                   help="Also write every record (and the machine) to this JSON file; a benchmark's "
                                        "record of its last run, replaced if it exists.")


def out_option(help: str, required: bool = False, default: Path | None = None, folder: bool = False
               ) -> Callable[[F], F]:
    """``--out PATH``: the file (or ``folder``) a command writes."""
    kind = click.Path(file_okay=not folder, dir_okay=folder, path_type=Path)
    return click.option("--out", "out", type=kind, required=required, default=default,
                        show_default=default is not None, help=help)


def check_writable(path: Path, overwrite: bool, option: str = "--out") -> Path:
    """Refuse, before any work is done, an existing ``path`` (without ``overwrite``) and a folder it cannot be
    written in: nothing is computed only to be thrown away at the end."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise UsageError(f"{option} {path} already exists; nothing replaces it without --overwrite. Give another "
                         f"{option}, or add --overwrite.")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: the folder {parent} is not writable; give another {option}")
    return path


def write_file(path: Path, data: bytes | str, overwrite: bool = False, option: str = "--out") -> Path:
    """Write ``data`` to ``path`` atomically: into a temporary file beside it, then linked into place if the name
    is still free (or replacing it with ``overwrite``). A full disk or a race leaves ``path`` as it was."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise UsageError(f"{option} {path} was created by someone else while this command ran; it was not "
                                 f"replaced. Give another {option}, or add --overwrite.") from None
    except OSError as e:
        reason = "the disk is full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        raise ZooError(f"could not write {path}: {reason}; nothing was written there") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path
