"""Retrieval (ACL Anthology Network citation pairs, byte level) as LRA ships it:
``new_aan_pairs.{train,eval,test}.tsv``, rows ``label<TAB>id1<TAB>id2<TAB>text1<TAB>text2`` without a header,
label 1 when the two documents are linked. Each text is cut to ``max_length`` bytes.

Built-in stand-in (same format): do two windows of Python standard-library source come from the SAME module?
Windows are whitespace-collapsed (one line per row, as AAN's texts) and each module belongs to one split (by a
hash of its name). The evidence is the module-specific vocabulary shared across the two whole documents, so the
two-tower model has to compress each document into one vector, as in AAN.
"""
from __future__ import annotations

import random
from pathlib import Path

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data.common import Example, check_label, encode_bytes, require_file
from lavo_zoo.recipes.lra.data.stdlib import stdlib_files, stdlib_root, stdlib_split

NUM_CLASSES = 2
FILES = {"train": "new_aan_pairs.train.tsv", "validation": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}


def load_split(root: Path, split: str, max_length: int) -> list[Example]:
    """The document pairs of ``split`` from the release's tab-separated file under ``root``, each text byte-encoded to
    ``max_length``; a malformed line is a :class:`DataError` naming it."""
    path = require_file(root / FILES[split], f"the Retrieval {split} split")
    examples = []
    with path.open(encoding="utf-8", newline="\n") as f:
        for line_no, line in enumerate(f, 1):
            fields = line.rstrip("\r\n").split("\t")
            where = f"{path}, line {line_no}"
            if len(fields) != 5:
                raise DataError(f"{where}: malformed row with {len(fields)} tab-separated field(s); each row is "
                                "label, id1, id2, text1, text2")
            label = check_label(fields[0], NUM_CLASSES, where)
            empty = [name for name, text in (("text1", fields[3]), ("text2", fields[4])) if not text]
            if empty:
                raise DataError(f"{where}: {' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty; "
                                "every document needs at least one byte")
            examples.append(Example((encode_bytes(fields[3], max_length), encode_bytes(fields[4], max_length)), label))
    if not examples:
        raise DataError(f"{path}: the split is empty (no rows)")
    return examples


def _collapse(text: str) -> str:
    return " ".join(text.split())


def write_dataset(out: Path, sizes: dict[str, int], seed: int, min_bytes: int = 1000, max_bytes: int = 4000) -> None:
    """``out/new_aan_pairs.{train,eval,test}.tsv``: half same-module pairs (label 1), half different-module.

    Args:
        out: the folder to write into.
        sizes: pairs per split.
        seed: the generator's seed.
        min_bytes: the shortest document (a window of a module's source), in bytes.
        max_bytes: the longest document, in bytes.
    """
    rng = random.Random(seed)
    root = stdlib_root()
    by_split: dict[str, dict[str, str]] = {split: {} for split in sizes}
    for p in stdlib_files():
        text = _collapse(p.read_text(encoding="utf-8", errors="replace"))
        if len(text) >= 2 * min_bytes and stdlib_split(p) in by_split:
            by_split[stdlib_split(p)][str(p.relative_to(root))] = text
    for split, n in sizes.items():
        texts = by_split[split]
        names = sorted(texts)
        if len(names) < 2:
            raise DataError(f"too few standard-library modules for the built-in Retrieval {split} split")

        def window(name: str, texts: dict[str, str] = texts) -> tuple[str, str]:
            text = texts[name]
            size = min(len(text) // 2, rng.randint(min_bytes, max_bytes))
            start = rng.randrange(0, len(text) - size + 1)
            return f"{name}@{start}", text[start:start + size]

        with (out / FILES[split]).open("w", encoding="utf-8", newline="\n") as f:
            for i in range(n):
                first = rng.choice(names)
                label = i % 2
                second = first if label else rng.choice([m for m in names if m != first])
                (id1, text1), (id2, text2) = window(first), window(second)
                f.write(f"{label}\t{id1}\t{id2}\t{text1}\t{text2}\n")
