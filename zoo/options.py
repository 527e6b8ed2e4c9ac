"""What every command shares: its click options (one spelling, one default and one help text each, used by the
core's commands and the recipes' ``cli.py``) and the checks before it writes: a user's file is never replaced
without ``--overwrite``, nor a checkpoint's own file or one of the command's inputs, and a folder that cannot be
written is refused before the work. How the file is then written (a temporary file linked into place only when
complete, so two commands racing for one name cannot both win) is :mod:`lavo_zoo.atomic`.

Torch-free, so that ``lavo-zoo --help`` stays fast.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from lavo_zoo.atomic import write_file
from lavo_zoo.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])
# a checkpoint's own files (lavo_zoo.engine.checkpoint_io), which no command's output may replace
CHECKPOINT_FILES = ("model.safetensors", "config.yaml", "meta.json", "train_state.pt")

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
    kind = NonEmptyPath(file_okay=not folder, dir_okay=folder, path_type=Path)
    return click.option("--out", "out", type=kind, required=required, default=default,
                        show_default=default is not None, help=help)


class NonEmptyPath(click.Path):
    """A click path that refuses the empty string, which would name the current folder (``--out "$UNSET"``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; name the file or folder to write (an unset shell variable?)", param, ctx)
        return super().convert(value, param, ctx)


def check_writable(path: Path, overwrite: bool, option: str = "--out",
                   inputs: dict[str, Path | str | None] | None = None) -> Path:
    """Refuse, before any work is done, an existing ``path`` (without ``overwrite``), a folder it cannot be
    written in, a checkpoint's own file, and one of the command's ``inputs`` ({option: path}: what it reads, which
    the output would destroy even with ``overwrite``): nothing is computed only to be thrown away at the end."""
    path = Path(path)
    for name, given in (inputs or {}).items():
        if given is not None and _same_file(path, Path(given)):
            raise UsageError(f"{option} {path} is the {name} this command reads; writing there would destroy it. "
                             f"Give another {option}")
    if path.is_symlink() and not path.exists() and not overwrite:
        raise UsageError(f"{option} {path} is a link to {os.readlink(path)}, which does not exist; give another "
                         f"{option}, or add --overwrite to replace the link.")
    if path.exists() and not overwrite:
        raise UsageError(f"{option} {path} already exists; nothing replaces it without --overwrite. Give another "
                         f"{option}, or add --overwrite.")
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file name")
    if path.name in CHECKPOINT_FILES and (path.parent / "meta.json").is_file():
        raise UsageError(f"{option} {path} is a file of the checkpoint in {path.parent}, which it would destroy; "
                         f"give another {option} (outside the checkpoint's folder)")
    check_folder_writable(path.parent, option, path)
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_folder_writable(folder: Path, option: str = "--out", given: Path | None = None) -> Path:
    """Refuse, before any work is done, a ``folder`` that cannot be created or written in (a read-only mount, a
    folder of another user, a path through a file); ``given``: what the user gave, for the message."""
    folder, given = Path(folder), Path(given if given is not None else folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            raise UsageError(f"{option} {given}: {existing} is a link to {os.readlink(existing)}, which does not "
                             f"exist; create it, or give another {option}")
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {given}: {existing} is a file, not a folder; give another {option}")
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only(existing) else "is not writable"
        raise UsageError(f"{option} {given}: the folder {existing} {why}; give another {option}")
    return folder


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def figure_formats() -> list[str]:
    """The file formats matplotlib writes (png, pdf, svg, ...), by suffix."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_figure_path(path: Path, option: str = "--out") -> Path:
    """Refuse, before any work, a figure file whose suffix names no format matplotlib writes (the format is read
    from the suffix)."""
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    formats = figure_formats()
    if suffix not in formats:
        raise UsageError(f"{option} {path}: {f'.{suffix}' if suffix else 'a name without a suffix'} names no image "
                         f"format; end it in one of {', '.join('.' + f for f in formats)} (.png for a picture)")
    return path


def save_figure(fig: Any, path: Path, overwrite: bool = True, option: str = "--out", **savefig: Any) -> Path:
    """Write a matplotlib figure to ``path`` in the format its suffix names (refused before drawing if none),
    atomically (:func:`lavo_zoo.atomic.write_file`)."""
    import io

    path = check_figure_path(path, option)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lower().lstrip("."), **savefig)
    return write_file(path, buffer.getvalue(), overwrite, option)
