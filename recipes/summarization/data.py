"""Multi-document summarization data: the Multi-News layout, JSON lines, tokenized examples.

Layouts of ``data.path`` (``data.format: auto`` tells them apart; ``multinews`` or ``jsonl`` forces one):

- ``multinews`` (as released): ``{train,val,test}.src`` and ``.tgt``, line-aligned, one example per line. A source
  line holds the articles separated by ``|||||``, newlines inside them written as ``NEWLINE_CHAR``; a target line
  is the summary, starting with "– ".
- ``jsonl`` (the Hugging Face export): ``{train,validation,test}.jsonl``, one JSON object per line with string
  fields ``document`` (articles separated by ``|||||``) and ``summary``.

The validation split is read from ``val.*`` or ``validation.*``. Bad input is refused with a :class:`DataError`
naming the file and line: ``.src``/``.tgt`` line counts that differ, an empty split, a line that is not UTF-8, a
JSON line that is not an object with both fields. Examples whose source or summary is empty are skipped and counted
in the log.

Without ``data.path`` the recipe uses a built-in corpus in the Multi-News layout, generated once from this Python's
standard library (:mod:`.builtin`), so that every command works offline.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch.utils.data import Dataset

from lavo_zoo.config import PositiveInt
from lavo_zoo.errors import DataError, MissingSplit, not_a_file
from lavo_zoo.formats.multinews import (
    ARTICLE_SEPARATOR,
    SUMMARY_MARK,
    clean_summary,
    encode_newlines,
    split_articles,
)
from lavo_zoo.formats.text import json_rows, read_lines
from lavo_zoo.nn.tokenizers import get_tokenizer

log = logging.getLogger(__name__)

SPLIT_FILES = {"train": ("train",), "validation": ("val", "validation"), "test": ("test",)}
FORMATS = ("multinews", "jsonl")


@dataclass
class DataConfig:
    path: str | None = None  # a folder in the Multi-News or JSON-lines layout; unset: the built-in corpus
    format: Literal["auto", "multinews", "jsonl"] = "auto"
    tokenizer: Literal["gpt2"] = "gpt2"
    max_source_tokens: PositiveInt = 4096  # sources truncated to this many tokens (articles joined, separators too)
    max_target_tokens: PositiveInt = 400  # summaries are truncated to this many tokens (before BOS/EOS)
    cache_dir: str | None = None  # built-in corpus (default: $LAVO_ZOO_CACHE/summarization or the user cache)


@dataclass
class Example:
    """One multi-document example: its id (``<file>:<line>`` or the built-in name), its articles and summary."""

    id: str
    articles: list[str]
    summary: str


@dataclass
class SplitData:
    """The usable examples of one split and how many were skipped as empty."""

    examples: list[Example]
    skipped: int = 0
    files: list[Path] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------------ loaders
def detect_format(root: Path) -> str:
    """``multinews`` when ``root`` holds ``*.src`` files, ``jsonl`` when it holds ``*.jsonl``; else a DataError."""
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a directory; it must hold the Multi-News layout "
                        "({train,val,test}.src/.tgt) or JSON lines ({train,validation,test}.jsonl)")
    if any(root.glob("*.src")):
        return "multinews"
    if any(root.glob("*.jsonl")):
        return "jsonl"
    raise DataError(f"{root} holds neither Multi-News files ({{train,val,test}}.src/.tgt) nor JSON lines "
                    "({train,validation,test}.jsonl); point data.path at such a folder")


def split_file(root: Path, split: str, suffix: str) -> Path:
    """``root/<name><suffix>`` for the first existing name of ``split`` (validation: val or validation)."""
    if split not in SPLIT_FILES:
        raise DataError(f"unknown split '{split}'; choose one of {', '.join(SPLIT_FILES)}")
    candidates = [root / f"{name}{suffix}" for name in SPLIT_FILES[split]]
    for path in candidates:
        if path.is_file():
            return path
    for path in candidates:
        if path.exists() or path.is_symlink():
            raise DataError(f"split '{split}': {path} {not_a_file(path)}")
    raise MissingSplit(f"split '{split}' is missing: expected {' or '.join(map(str, candidates))}")


def load_split(root: str | Path, split: str, data_format: str = "auto") -> SplitData:
    """The examples of ``split`` under ``root`` in the detected (or forced) layout, empty ones skipped."""
    root = Path(root).expanduser()
    fmt = detect_format(root) if data_format == "auto" else data_format
    if fmt not in FORMATS:
        raise DataError(f"unknown data.format '{data_format}'; choose auto, {' or '.join(FORMATS)}")
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a directory")
    if fmt == "multinews":
        src, tgt = split_file(root, split, ".src"), split_file(root, split, ".tgt")
        data = SplitData(*_skip_empty(read_multinews(src, tgt)), files=[src, tgt])
    else:
        path = split_file(root, split, ".jsonl")
        data = SplitData(*_skip_empty(read_jsonl(path)), files=[path])
    if data.skipped:
        log.warning("%s: skipped %d example(s) with an empty source or summary", " + ".join(map(str, data.files)),
                    data.skipped)
    if not data.examples:
        raise DataError(f"split '{split}' is empty: {' + '.join(map(str, data.files))} has no example with a "
                        f"non-empty source and summary ({data.skipped} empty skipped)")
    return data


def read_multinews(src: Path, tgt: Path) -> Iterator[Example]:
    """Examples of a line-aligned Multi-News ``.src``/``.tgt`` pair (ids ``<src name>:<line>``)."""
    sources, targets = read_lines(src), read_lines(tgt)
    if len(sources) != len(targets):
        first = min(len(sources), len(targets)) + 1
        longer = src if len(sources) > len(targets) else tgt
        raise DataError(f"{src} has {len(sources)} lines but {tgt} has {len(targets)}: the files must be "
                        f"line-aligned (line {first} of {longer} has no partner)")
    if not sources:
        raise DataError(f"split file {src} is empty (and so is {tgt}): it must hold one example per line")
    for number, (source, target) in enumerate(zip(sources, targets), 1):
        yield Example(f"{src.stem}:{number}", split_articles(source), clean_summary(target))


def read_jsonl(path: Path) -> Iterator[Example]:
    """Examples of a JSON-lines file with string fields ``document`` and ``summary`` (ids ``<name>:<line>``)."""
    lines = read_lines(path)
    if not any(line.strip() for line in lines):
        raise DataError(f"split file {path} is empty: it must hold one JSON object per line with 'document' and "
                        "'summary' fields")
    for number, row in json_rows(lines, path):
        if not isinstance(row, dict):
            raise DataError(f"{path}, line {number}: expected a JSON object with 'document' and 'summary' fields, "
                            f"got {type(row).__name__}")
        missing = [key for key in ("document", "summary") if not isinstance(row.get(key), str)]
        if missing:
            raise DataError(f"{path}, line {number}: the object has no string field {' or '.join(map(repr, missing))}"
                            f" (keys: {', '.join(map(str, row)) or 'none'}); every line needs 'document' and "
                            "'summary'")
        yield Example(f"{path.stem}:{number}", split_articles(row["document"]), clean_summary(row["summary"]))


def _skip_empty(examples: Iterable[Example]) -> tuple[list[Example], int]:
    kept, skipped = [], 0
    for example in examples:
        if example.articles and example.summary:
            kept.append(example)
        else:
            skipped += 1
    return kept, skipped


def write_multinews(examples: Iterable[Example], out: Path, split_name: str) -> int:
    """Write examples as ``out/<split_name>.src`` and ``.tgt`` (the released layout); returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(out / f"{split_name}.src", "w", encoding="utf-8", newline="\n") as src, \
            open(out / f"{split_name}.tgt", "w", encoding="utf-8", newline="\n") as tgt:
        for example in examples:
            src.write(f" {ARTICLE_SEPARATOR} ".join(encode_newlines(a) for a in example.articles) + "\n")
            tgt.write(SUMMARY_MARK + encode_newlines(example.summary) + "\n")
            count += 1
    return count


# ------------------------------------------------------------------------------------------------ tokenization
class Vocabulary:
    """GPT-2 byte-level BPE (the LM recipe's offline tokenizer, 50,257 ids) plus BOS, EOS, PAD and a separator
    between articles, appended after GPT-2's ids."""

    def __init__(self, name: str = "gpt2") -> None:
        self.tokenizer = get_tokenizer(name)
        base = self.tokenizer.vocab_size
        self.bos, self.eos, self.pad, self.sep = base, base + 1, base + 2, base + 3
        self.size = base + 4
        self.specials = {self.bos, self.eos, self.pad, self.sep}

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        return self.tokenizer.encode(text)

    def encode_source(self, articles: list[str]) -> list[int]:
        """The articles' ids, one separator id between consecutive articles."""
        ids: list[int] = []
        for i, article in enumerate(articles):
            if i:
                ids.append(self.sep)
            ids.extend(self.encode(article))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first EOS, special ids dropped."""
        out = []
        for i in ids:
            if i == self.eos:
                break
            if i not in self.specials:
                out.append(int(i))
        return self.tokenizer.decode(out).strip()


class SummarizationDataset(Dataset):
    """Tokenized examples: item i is ``{"id", "source" [S] int64, "target" [T] int64, "reference"}``.

    ``source`` = the articles' tokens joined by the document-separator id, truncated to ``max_source_tokens``;
    ``target`` = BOS, the summary's tokens truncated to ``max_target_tokens``, EOS. ``reference`` is the full summary
    text (ROUGE is scored against it, not against the truncated tokens).
    """

    def __init__(self, examples: list[Example], vocab: Vocabulary, max_source_tokens: int,
                 max_target_tokens: int) -> None:
        if max_source_tokens < 1 or max_target_tokens < 1:
            raise DataError(f"data.max_source_tokens and data.max_target_tokens must be positive, got "
                            f"{max_source_tokens} and {max_target_tokens}")
        self.examples = examples
        self.vocab = vocab
        self.max_source_tokens = max_source_tokens
        self.max_target_tokens = max_target_tokens

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict:
        example = self.examples[index]
        source = self.vocab.encode_source(example.articles)[:self.max_source_tokens]
        summary = self.vocab.encode(example.summary)[:self.max_target_tokens]
        return {"id": example.id, "source": torch.tensor(source, dtype=torch.long),
                "target": torch.tensor([self.vocab.bos, *summary, self.vocab.eos], dtype=torch.long),
                "reference": example.summary}


def collate(samples: list[dict], pad: int) -> dict:
    """A padded batch: ``source`` [B, S], ``source_mask`` [B, S] (True = real), ``target`` [B, T] (``pad`` after the
    end), plus the ``ids`` and ``references`` lists."""
    def pad_stack(seqs: list[torch.Tensor]) -> torch.Tensor:
        return torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad)

    source = pad_stack([s["source"] for s in samples])  # [B, S]
    lengths = torch.tensor([len(s["source"]) for s in samples])
    return {"ids": [s["id"] for s in samples], "source": source,
            "source_mask": torch.arange(source.shape[1])[None] < lengths[:, None],  # [B, S]
            "target": pad_stack([s["target"] for s in samples]),  # [B, T]
            "references": [s["reference"] for s in samples]}
