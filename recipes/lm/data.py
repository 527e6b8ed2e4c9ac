"""PG-19 data: the on-disk layout, a memory-mapped token cache, fixed-length blocks.

Layout (as DeepMind's PG-19 release)::

    DIR/train/<book_id>.txt  DIR/validation/<book_id>.txt  DIR/test/<book_id>.txt  [DIR/metadata.csv]

Each split is tokenized once (progress bar on a terminal) into one flat array of token ids (books in file-name
order, each ended by the tokenizer's ``eod``), ``<cache>/lm/tokens/<dir>-<hash>/<split>-<tokenizer>-<key>.bin``,
memory-mapped on use. ``key`` hashes the tokenizer, the token type and every source file's name, size and
modification time, so editing, adding or removing a book rebuilds the cache (and the stale file is removed).
``<cache>`` is ``$LAVO_ZOO_CACHE`` or the user's cache directory. A book that is not UTF-8 text or that holds a NUL
byte (binary data; NUL is also the ``bytes`` tokenizer's end of document) is refused, naming the file and the byte
offset; with ``skip_bad_files`` such books are left out, counted and named in a warning (again on every cache
hit). Without ``data.path`` the recipe uses a built-in corpus in the same layout (:mod:`.builtin`), generated once
from the Python standard library's module sources, so every command works offline on any machine.
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from lavo_zoo.atomic import put_file
from lavo_zoo.config import NonNegativeInt, PositiveInt
from lavo_zoo.data.cache import cached_file, file_stats
from lavo_zoo.engine.memory import format_bytes
from lavo_zoo.errors import DataError, MissingSplit
from lavo_zoo.nn.tokenizers import Tokenizer

log = logging.getLogger(__name__)
CACHE_FORMAT = 2  # bump when the token file layout changes, so that old caches are rebuilt


@dataclass
class DataConfig:
    path: str | None = None  # a PG-19-layout folder; unset: the built-in corpus (Python standard library sources)
    tokenizer: Literal["gpt2", "bytes"] = "gpt2"
    block_size: PositiveInt = 8192  # training context length L
    cache_dir: str | None = None  # token cache and built-in corpus (default: $LAVO_ZOO_CACHE/lm or the user cache)
    builtin_size: NonNegativeInt = 0  # built-in corpus: the first N standard-library modules as books (0: all)
    skip_bad_files: bool = False  # leave out (and name) books that are not UTF-8 text or hold NUL bytes; else refuse


# ------------------------------------------------------------------------------------------------ the PG-19 layout
def split_files(root: Path, split: str) -> list[Path]:
    """The ``<book_id>.txt`` files of ``root/split``, sorted; a missing or empty split is a :class:`DataError`."""
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a directory; it must hold the PG-19 layout "
                        f"(train/, validation/, test/ folders of <book_id>.txt files)")
    folder = root / split
    if not folder.is_dir():
        raise MissingSplit(f"PG-19 split '{split}' is missing: expected a folder {folder} of <book_id>.txt files")
    files = sorted(folder.glob("*.txt"))
    if not files or all(f.stat().st_size == 0 for f in files):
        raise DataError(f"PG-19 split '{split}' is empty: {folder} has no non-empty <book_id>.txt files")
    return files


def read_book(path: Path) -> str:
    """The text of one book; a :class:`DataError` naming the file and byte offset when it is not UTF-8 text or holds
    a NUL byte."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not valid UTF-8 text: byte offset {e.start} ({e.reason}); a book must be a "
                        f"UTF-8 .txt file") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise DataError(f"{path} holds a NUL byte at byte offset {nul}: binary data, not text (NUL would also end a "
                        f"document early for the bytes tokenizer)")
    return text


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id."""
    return np.dtype(np.uint8 if vocab_size <= 1 << 8 else np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def load_tokens(root: Path, split: str, tokenizer: Tokenizer, cache_dir: Path, skip_bad_files: bool = False
                ) -> np.ndarray:
    """The token ids of ``root/split`` as a read-only memory map, tokenizing into the cache first if needed.

    The token files go to ``cache_dir`` (the recipe's ``tokens/`` cache folder). A book that is not text
    (:func:`read_book`) is a :class:`DataError`, or with ``skip_bad_files`` left out with a warning that counts and
    names the skipped files.

    Args:
        root: the corpus folder.
        split: the split (its files: :func:`split_files`).
        tokenizer: the tokenizer.
        cache_dir: the token cache's folder.
        skip_bad_files: leave out, with a warning, the books that are not text (else a DataError).
    """
    root = Path(root).resolve()
    files = split_files(root, split)
    payload = {"format": CACHE_FORMAT, "tokenizer": tokenizer.name, "vocab": tokenizer.vocab_size,
               "dtype": token_dtype(tokenizer.vocab_size).str, "files": [(f.name, *file_stats(f)) for f in files],
               "skip": skip_bad_files}
    path = cached_file(cache_dir, root, f"{split}-{tokenizer.name}-", payload, ".bin",
                       lambda path: _tokenize(files, tokenizer, path, skip_bad_files))
    skipped_file = path.with_suffix(".skipped.json")
    if skipped_file.is_file():
        skipped = json.loads(skipped_file.read_text())
        log.warning("skipped %d of %d books of %s that are not text (data.skip_bad_files=true): %s", len(skipped),
                    len(files), root / split, "; ".join(skipped))
    tokens = np.memmap(path, dtype=token_dtype(tokenizer.vocab_size), mode="r")
    if tokens.size < 2:
        raise DataError(f"PG-19 split '{split}' in {root} has fewer than 2 tokens")
    return tokens


def _tokenize(files: list[Path], tokenizer: Tokenizer, path: Path, skip_bad_files: bool = False) -> None:
    """Write the concatenated documents' ids to ``path`` atomically (temp file + rename); with ``skip_bad_files``
    the reasons for the books left out go to ``<path stem>.skipped.json``."""
    dtype = token_dtype(tokenizer.vocab_size)
    total = sum(f.stat().st_size for f in files)
    log.info("tokenizing %d books (%s) of %s with %s into %s", len(files), format_bytes(total), files[0].parent,
             tokenizer.name, path)
    def fill(out: BinaryIO) -> None:
        skipped = []
        with tqdm(total=total, unit="B", unit_scale=True, disable=None, file=sys.stderr,
                  desc=f"tokenizing {files[0].parent.name}") as bar:
            for f in files:
                try:
                    text = read_book(f)
                except DataError as e:
                    if not skip_bad_files:
                        raise DataError(f"{e}. Fix or remove the file, or set data.skip_bad_files=true to leave out "
                                        "every book that is not text") from None
                    skipped.append(str(e))
                    continue
                out.write(tokenizer.encode_document(text).astype(dtype).tobytes())
                bar.update(f.stat().st_size)
        if len(skipped) == len(files):
            raise DataError(f"every book of {files[0].parent} is not text; the first: {skipped[0]}")
        if skipped:  # written before the tokens, so that a cache hit always repeats the warning
            put_file(path.with_suffix(".skipped.json"), json.dumps(skipped, indent=1))

    put_file(path, fill)
    log.info("tokenized %s: %d tokens", files[0].parent.name, path.stat().st_size // dtype.itemsize)


# --------------------------------------------------------------------------------------------------------- blocks
class TokenBlocks(Dataset):
    """Non-overlapping blocks of a token stream: item i is ``tokens[i*T : i*T + T + 1]`` as int64 ``[T + 1]``.

    Inputs are ``item[:-1]`` and targets ``item[1:]``, so every token after the first is a target exactly once
    (fairseq-eval-lm with context window 0). ``max_tokens`` caps the stream's length (quick evaluations).
    """

    def __init__(self, tokens: np.ndarray, block_size: int, max_tokens: int | None = None) -> None:
        if block_size < 1:
            raise DataError(f"block size must be positive, got {block_size}")
        self.tokens = tokens[:max_tokens + 1] if max_tokens else tokens
        self.block_size = block_size
        if len(self) == 0:
            raise DataError(f"a stream of {self.tokens.size} tokens holds no block of {block_size} + 1 tokens; "
                            "use a shorter block (data.block_size) or a larger split")

    def __len__(self) -> int:
        return (self.tokens.size - 1) // self.block_size

    def __getitem__(self, index: int) -> torch.Tensor:
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} out of range for {len(self)} blocks")
        start = index * self.block_size
        return torch.from_numpy(self.tokens[start:start + self.block_size + 1].astype(np.int64))  # [T + 1]
