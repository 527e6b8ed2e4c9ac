"""What a command writes: the kinds of file (:class:`FileKind`: the endings that name one, how an earlier file of
the kind is told by its content) and of folder (:class:`FolderKind`) of the output policy, and the check of a file
name's ending (:func:`check_suffix`). Torch-free."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavo_zoo.errors import UsageError


@dataclass(frozen=True)
class FileKind:
    """What a command writes into a file: its name for messages, the endings that name it and how an earlier file of
    this kind is told by its content (what a ``--overwrite`` may replace).

    Attributes:
        name: the kind in words, for messages (``a WAV file``).
        suffixes: the endings the file's name takes, lower case (``.wav``); empty: any ending that names no other
            kind (:data:`FILE_SUFFIXES`), or none.
        recognise: ``recognise(head, path)``: whether an existing file whose first :data:`HEAD` bytes are ``head`` is
            of this kind.
        figure: the endings are the image formats matplotlib writes (:func:`figure_formats`).
    """

    name: str
    suffixes: tuple[str, ...]
    recognise: Callable[[bytes, Path], bool]
    figure: bool = False

    def accepted(self) -> tuple[str, ...]:
        """The endings a file of this kind takes (the image formats for a figure)."""
        return tuple("." + f for f in figure_formats()) if self.figure else self.suffixes


@dataclass(frozen=True)
class FolderKind:
    """What a command writes into a folder.

    Attributes:
        name: the kind in words, for messages (``a transformers model folder``).
        command: the command that writes it (``eval``), recorded in its manifest.
        writer: who writes it, for messages (``evaluation``: "no evaluation recorded writing there").
        writing: the phrase of a failure's message (``the built-in data into``: "could not write the built-in data
            into OUT: the disk is full").
        manifest: the file in the folder listing every file written there with its sha256 (what ``--overwrite``
            replaces); None: only an absent or empty folder is written.
        merge: the files are added to the folder beside what else it holds (a name taken by a file the manifest
            does not list is refused) instead of the folder being replaced whole.
        in_place: the command writes the folder itself, as it goes, under its own rules (a study: its cells resume);
            the claim only checks it.
    """

    name: str
    command: str
    writer: str
    writing: str
    manifest: str | None = None
    merge: bool = False
    in_place: bool = False


def figure_formats() -> list[str]:
    """The file formats matplotlib writes (png, pdf, svg, ...), by suffix."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _json_object_with(*keys: str) -> Callable[[bytes, Path], bool]:
    def recognise(head: bytes, path: Path) -> bool:
        data = _json(path) if head.lstrip()[:1] == b"{" else None
        return isinstance(data, dict) and all(k in data for k in keys)
    return recognise


def _json_lines_with(key: str) -> Callable[[bytes, Path], bool]:
    def recognise(head: bytes, path: Path) -> bool:
        first = head.split(b"\n", 1)[0]
        try:
            row = json.loads(first)
        except ValueError:
            return False
        return isinstance(row, dict) and key in row
    return recognise


def _starts_with(*prefixes: bytes) -> Callable[[bytes, Path], bool]:
    return lambda head, path: head.startswith(prefixes)


def _text_line(prefix: bytes) -> Callable[[bytes, Path], bool]:
    """A text file with a line starting with ``prefix``."""
    return lambda head, path: any(line.startswith(prefix) for line in head.splitlines())


def _text(head: bytes, path: Path) -> bool:
    """Plain UTF-8 text (no NUL byte)."""
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:  # a character cut at the end of the head is still text
        return e.start >= len(head) - 3
    return True


_IMAGE_MAGIC = {
    "png": (b"\x89PNG",), "pdf": (b"%PDF",), "jpg": (b"\xff\xd8",), "jpeg": (b"\xff\xd8",),
    "eps": (b"%!PS", b"\xc5\xd0\xd3\xc6"), "ps": (b"%!PS",), "tif": (b"II*\0", b"MM\0*"), "tiff": (b"II*\0", b"MM\0*"),
    "gif": (b"GIF8",), "webp": (b"RIFF",), "svgz": (b"\x1f\x8b",),
}


def _image(head: bytes, path: Path) -> bool:
    """An image in the format its suffix names (svg: XML; raw, rgba: no header to tell, any file)."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("svg", "pgf"):
        return _text(head, path) and (b"<svg" in head or b"<?xml" in head or b"pgf" in head)
    magic = _IMAGE_MAGIC.get(suffix)
    return head.startswith(magic) if magic else True


RESULTS = FileKind("a results JSON", (".json",), _json_object_with("metrics"))
def _bench_record(head: bytes, path: Path) -> bool:
    """A benchmark's JSON record: the machine it ran on at the top (``bench lm``, ...) or in its ``settings``
    (``bench attention``)."""
    data = _json(path) if head.lstrip()[:1] == b"{" else None
    return isinstance(data, dict) and ("machine" in data or "machine" in (data.get("settings") or {}))


BENCH_RECORD = FileKind("a benchmark's JSON record", (".json",), _bench_record)
ANSWERS = FileKind("JSON lines of answers", (".jsonl",), _json_lines_with("answers"))
SUMMARY_RECORDS = FileKind("JSON lines of summaries", (".jsonl",), _json_lines_with("hypothesis"))
FORECAST = FileKind("a forecast CSV", (".csv",), _starts_with(b"date,"))
WAV = FileKind("a WAV file", (".wav",), lambda head, path: head[:4] == b"RIFF" and head[8:12] == b"WAVE")
PCD = FileKind("a point cloud (.pcd)", (".pcd",), _starts_with(b"# .PCD", b"VERSION"))
FIGURE = FileKind("a figure", (), _image, figure=True)
PNG = FileKind("a PNG figure", (".png",), _image)
RECALL_TABLE = FileKind("a Markdown table of recall-plot", (".md", ".markdown", ".txt"),
                        _starts_with(b"| attention | setting |"))
STUDY_TABLE = FileKind("a study's Markdown table", (".md",), _text_line(b"| attention | seeds |"))
STUDY_CSV = FileKind("a study's CSV table", (".csv",), _starts_with(b"attention,seeds,"))
ARCHIVE = FileKind("a checkpoint archive", (".tar.gz", ".tgz"), _starts_with(b"\x1f\x8b"))
MODEL_CARD = FileKind("a model card", (".md",), _starts_with(b"---\n"))
TEXT = FileKind("text", (), _text)

EVAL_FILES = FolderKind("an evaluation's files folder", "eval", "evaluation", "the evaluation's files into",
                        manifest="eval-manifest.json")
HF_FOLDER = FolderKind("a transformers model folder", "export", "export", "the transformers folder",
                       manifest="export-manifest.json")
DATA_FOLDER = FolderKind("a dataset folder", "data", "lavo-zoo data", "the built-in data into",
                         manifest="data-manifest.json", merge=True)
PLUGIN_FOLDER = FolderKind("a plugin package folder", "new", "lavo-zoo new", "the plugin package")
STUDY_FOLDER = FolderKind("a study folder", "compare", "compare", "the study into", in_place=True)

# endings that name a file format: a text output or a folder is never named with one
FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".wav", ".mp3", ".flac", ".ogg", ".pcd", ".ply", ".md", ".tar.gz",
                 ".tgz", ".zip", ".gz", ".tar", ".npy", ".npz", ".pt", ".pth", ".safetensors", ".bin", ".pkl",
                 ".yaml", ".yml", ".parquet", ".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif",
                 ".tiff", ".webp", ".gif")


def ending(path: Path, suffixes: tuple[str, ...]) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(suffixes, key=len, reverse=True) if name.endswith(s) and name != s), None)


def check_suffix(path: Path, kind: FileKind, option: str = "--out") -> Path:
    """Refuse a file name whose ending does not name what ``kind`` writes (the format of a figure is read from its
    suffix; a text file's name must not name another format)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if kind.figure:
        formats = kind.accepted()
        if suffix not in formats:
            raise UsageError(f"{option} {path}: {suffix or 'a name without a suffix'} names no image format; end it "
                             f"in one of {', '.join(formats)} (.png for a picture)")
    elif kind.suffixes:
        if ending(path, kind.suffixes) is None:
            raise UsageError(f"{option} {path}: this command writes {kind.name}, which "
                             f"{suffix or 'a name without a suffix'} does not name; end it in "
                             f"{' or '.join(kind.suffixes)}")
    else:
        other = ending(path, FILE_SUFFIXES)
        if other is not None:
            raise UsageError(f"{option} {path}: {other} names another format, but this command writes {kind.name}; "
                             "give a name without that ending (.txt, say)")
    return path

