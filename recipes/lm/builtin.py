"""The built-in corpus: this Python's standard-library modules as books, in the PG-19 layout, so that every command
works offline on any machine (what ``lavo-zoo data lm`` writes and a config without ``data.path`` reads)."""
from __future__ import annotations

import csv
import platform
import sys
from pathlib import Path

from lavo_zoo.data.split import hash_split
from lavo_zoo.data.stdlib import stdlib_files
from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.engine.recipe import SPLITS
from lavo_zoo.recipes.lm.data import CACHE_FORMAT, DataConfig


class BuiltinCorpus(BuiltinData):
    """``stdlib``: the standard-library corpus of this Python version (``data.builtin_size`` books, 0: all)."""

    datasets = ("stdlib",)

    def key(self, data: DataConfig) -> dict:
        return {"dataset": "stdlib", "python": platform.python_version(), "books": data.builtin_size,
                "format": CACHE_FORMAT}

    def write(self, out: Path, data: DataConfig) -> Path:
        return write_stdlib_corpus(out, max_books=data.builtin_size or None)


def write_stdlib_corpus(out: Path, max_books: int | None = None) -> Path:
    """Write a PG-19-layout corpus of this Python's standard-library modules (one module source = one "book") into
    ``out``; returns ``out``. The split of each module is fixed by a hash of its name (about 90% train, 5%
    validation, 5% test); ``max_books`` keeps the first that many modules (by name), for a smaller corpus.
    """
    version = "{}.{}.{}".format(*sys.version_info[:3])
    out = Path(out)
    for split in SPLITS:
        (out / split).mkdir(parents=True, exist_ok=True)
    rows = []
    for source in stdlib_files(recursive=False)[:max_books]:  # the top level's modules, every one
        book_id = source.stem
        split = hash_split(book_id)
        title = f"The {book_id} module of the Python {version} standard library"
        text = source.read_text(encoding="utf-8", errors="replace")
        (out / split / f"{book_id}.txt").write_text(f"{title}\n\n{text}", encoding="utf-8")
        rows.append([book_id, title, version, source.as_uri()])
    with open(out / "metadata.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return out
