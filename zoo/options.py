"""What every command shares: its click options (one spelling, one default and one help text each, used by the
core's commands and the recipes' ``cli.py``). What a command may write where, and how (``--out``, ``--overwrite``),
is the output policy of :mod:`lavo_zoo.outputs`.

Torch-free, so that ``lavo-zoo --help`` stays fast.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

device_option = click.option("--device", default=None, metavar="cpu|cuda|cuda:N",
                             help="Where to run (default: cuda when available, else cpu).")
overwrite_option = click.option("--overwrite", is_flag=True,
                                help="Replace this command's earlier output (an existing --out is refused otherwise; "
                                     "what this command did not write, never).")
json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
json_records_option = click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                                   help="Also write every record (and the machine) to this JSON file; a benchmark's "
                                        "record of its last run, replacing an earlier benchmark's record (never "
                                        "another file).")


def out_option(help: str, required: bool = False, default: Path | None = None, folder: bool = False
               ) -> Callable[[F], F]:
    """``--out PATH``: the file (or ``folder``) a command writes.

    Args:
        help: the option's help text.
        required: the command needs it.
        default: its default, or None.
        folder: the command writes a folder (else a file).
    """
    kind = NonEmptyPath(file_okay=not folder, dir_okay=folder, path_type=Path)
    return click.option("--out", "out", type=kind, required=required, default=default,
                        show_default=default is not None, help=help)


class NonEmptyPath(click.Path):
    """A click path that refuses the empty string, which would name the current folder (``--out "$UNSET"``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; name the file or folder to write (an unset shell variable?)", param, ctx)
        return super().convert(value, param, ctx)
