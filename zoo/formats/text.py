"""Plain text files the recipes and evaluators read: UTF-8 lines and JSON lines, with errors that name the file and
line. A path may be a pipe (``<(cmd)``) as well as a file."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lavo_zoo.errors import DataError


def read_bytes(path: Path) -> bytes:
    """The bytes of ``path`` (a file or a pipe, read once); an OSError is a DataError naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None


def read_lines(path: Path, raw: bytes | None = None) -> list[str]:
    """The lines of a UTF-8 text file (without line ends); a line that is not UTF-8 is a DataError naming it.
    ``raw``: its bytes, already read (a pipe is read once)."""
    raw = read_bytes(path) if raw is None else raw
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise DataError(f"{path}, line {number}: not UTF-8 (byte 0x{line[e.start]:02x} at column {e.start + 1}); "
                            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    return out


def json_rows(lines: Iterable[str], path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank JSON line of ``path``; invalid JSON is a DataError naming the
    line."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}, line {number}: not valid JSON ({e.msg} at column {e.colno})") from None


def holds_json_objects(lines: list[str]) -> bool:
    """Whether these lines are JSON lines of objects, by their content (not the file's name): the first non-blank
    line parses as a JSON object."""
    first = next((line for line in lines if line.strip()), "")
    if not first.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False
