"""Text (IMDB reviews, byte level) in the ``aclImdb`` layout: ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``
(``pos`` = 1, ``neg`` = 0). As LRA, the validation split is the test split (IMDB has no separate one).

Built-in stand-in (same layout): 2-class topic classification of real documents, windows of Python standard
library sources: internet-data modules (email, http, urllib, xml, json, html, mail clients; ``neg``) against
concurrency modules (asyncio, concurrent, multiprocessing, threading, subprocess, ...; ``pos``). Each file belongs
to one split (by a hash of its name), so test documents come from modules never seen in training; the evidence
(identifiers such as ``loop``, ``await``, ``header``, ``charset``) is spread thinly over the whole document, so the
classifier has to pool over all of it, as in sentiment classification.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data.common import Example, encode_bytes
from lavo_zoo.recipes.lra.data.stdlib import stdlib_files, stdlib_split

NUM_CLASSES = 2
LABELS = {"neg": 0, "pos": 1}
RATINGS = {"neg": range(1, 5), "pos": range(7, 11)}  # aclImdb: negative <= 4 stars, positive >= 7 of 10
FOLDER = {"train": "train", "validation": "test", "test": "test"}
NAME = re.compile(r"^(\d+)_(\d+)\.txt$")
TOPICS = {
    "neg": ("email", "http", "urllib", "xml", "json", "html", "mailbox.py", "imaplib.py", "smtplib.py",
            "ftplib.py", "poplib.py", "mimetypes.py"),
    "pos": ("asyncio", "concurrent", "multiprocessing", "threading.py", "queue.py", "sched.py", "selectors.py",
            "subprocess.py"),
}


def imdb_root(root: Path) -> Path:
    """``root`` itself or its ``aclImdb`` child, whichever holds ``train/`` and ``test/``."""
    return root / "aclImdb" if (root / "aclImdb").is_dir() else root


def load_split(root: Path, split: str, max_length: int) -> list[Example]:
    """Every review of ``split`` (``pos`` then ``neg``, by file name); refuses bad names and undecodable files."""
    folder = imdb_root(root) / FOLDER[split]
    if not folder.is_dir():
        raise DataError(f"{folder} does not exist: the Text task reads aclImdb/{{train,test}}/{{pos,neg}}/*.txt")
    examples = []
    for sentiment, label in LABELS.items():
        sub = folder / sentiment
        if not sub.is_dir():
            raise DataError(f"{sub} does not exist: each aclImdb split holds 'pos' and 'neg' folders")
        for path in sorted(sub.glob("*.txt")):
            match = NAME.match(path.name)
            if not match:
                raise DataError(f"{path}: malformed file name; reviews are named <id>_<rating>.txt")
            if int(match.group(2)) not in RATINGS[sentiment]:
                raise DataError(f"{path}: rating {match.group(2)} is out of range for '{sentiment}' (ratings "
                                f"{RATINGS[sentiment].start}..{RATINGS[sentiment].stop - 1})")
            data = path.read_bytes()
            if not data:
                raise DataError(f"{path}: the review is empty; every review needs at least one byte")
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            examples.append(Example((encode_bytes(data, max_length),), label))
    if not examples:
        raise DataError(f"{folder}: the split is empty (no <id>_<rating>.txt reviews in pos/ or neg/)")
    return examples


def _windows(files: list[Path], count: int, rng: random.Random, min_bytes: int, max_bytes: int) -> list[str]:
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    weights = [len(t) for t in texts]
    out = []
    for _ in range(count):
        text = rng.choices(texts, weights)[0]
        size = min(len(text), rng.randint(min_bytes, max_bytes))
        start = rng.randrange(0, len(text) - size + 1)
        out.append(text[start:start + size])
    return out


def write_dataset(out: Path, sizes: dict[str, int], seed: int, min_bytes: int = 1000, max_bytes: int = 4000) -> None:
    """``out/aclImdb/{train,test}/{pos,neg}/<i>_<rating>.txt``: balanced windows of the two stdlib topics.

    Args:
        out: the folder to write into.
        sizes: reviews per split (half of each sentiment).
        seed: the generator's seed.
        min_bytes: the shortest review (a window of a module's source), in bytes.
        max_bytes: the longest review, in bytes.
    """
    rng = random.Random(seed)
    for split in ("train", "test"):
        for sentiment, modules in TOPICS.items():
            files = [p for p in stdlib_files(*modules) if stdlib_split(p, (0.8, 0.0)) == split]
            if not files:
                raise DataError(f"no standard-library sources for the built-in Text task ({sentiment}, {split})")
            folder = out / "aclImdb" / split / sentiment
            folder.mkdir(parents=True)
            rating = 10 if sentiment == "pos" else 1
            for i, text in enumerate(_windows(files, sizes[split] // 2, rng, min_bytes, max_bytes)):
                (folder / f"{i}_{rating}.txt").write_text(text, encoding="utf-8")
