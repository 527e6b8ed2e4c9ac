"""Recall data: the settings (:class:`DataConfig`), the JSON-lines format and its reader, the dataset.

Layout (``lavo-zoo data recall --out DIR`` writes it; ``data.path=DIR`` reads it)::

    DIR/train.jsonl  DIR/validation.jsonl  DIR/test.jsonl

One example per line, a JSON object with exactly these keys::

    {"task": "mqar", "tokens": [3, 70, 5, 66, ...], "queries": [20, 24], "sources": [2, 0], "answers": [66, 70]}

- ``task``: ``mqar``, ``selective_copying`` or ``induction_heads`` (a file may mix them).
- ``tokens``: the input sequence, ``data.seq_len`` ids in ``[0, data.vocab_size)``.
- ``queries``: the positions where the model answers, ascending: its output at position q (the next-token
  prediction after reading ``tokens[q]``) is scored against the answer. Every other position is not scored (the
  -100 targets of Zoology's labels).
- ``sources``: for each query, the earlier position it recalls: the key (MQAR) or the trigger (induction heads)
  whose next token is the answer, or the data token itself (selective copying). ``query - source`` is the
  key-to-query distance the evaluator buckets by.
- ``answers``: the right token at each query.

The reader checks every line against the task's rule (MQAR and induction heads: ``tokens[source] ==
tokens[query]`` and ``answer == tokens[source + 1]``, before the query; selective copying: ``answer ==
tokens[source]``), so a file whose answers do not follow from its tokens is refused, naming the file and line.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeInt, PositiveInt, Range
from lavo_zoo.errors import DataError, MissingSplit, not_a_file
from lavo_zoo.formats.text import json_rows, read_lines

TASKS = ("mqar", "selective_copying", "induction_heads")
KEYS = ("task", "tokens", "queries", "sources", "answers")  # every line has exactly these
IGNORE = -100  # the target of a position that is not scored (Zoology's and PyTorch's ignore index)


@dataclass
class DataConfig:
    # a folder of train.jsonl / validation.jsonl / test.jsonl (the format above); unset: the built-in data
    path: str | None = None
    task: Literal["mqar", "selective_copying", "induction_heads"] = "mqar"  # what the built-in data generates
    vocab_size: Annotated[int, Range(ge=3, le=2**31 - 1)] = 8192  # Zoology's; token 0 is the blank / noise token
    seq_len: PositiveInt = 64  # tokens per example (every line of a file has this many)
    # mqar: key-value pairs; selective_copying: tokens to copy; induction_heads: not used (one query)
    num_pairs: PositiveInt = 4
    # the least key-to-query distance: the generators leave a blank stretch so that every query is at least this
    # far from what it recalls (e.g. beyond a local window of w: min_distance = w + 2 puts the value out of it too)
    min_distance: PositiveInt = 1
    power_a: Annotated[float, Range(gt=0, le=1)] = 0.01  # mqar: query offsets ~ a * g^(a - 1) (1: uniform)
    random_fill: bool = True  # mqar: random tokens between the queries (not the example's keys); false: blank 0
    builtin_size: PositiveInt = 100_000  # built-in training examples (Zoology: 100,000)
    eval_size: PositiveInt = 3_000  # built-in validation and test examples, each (Zoology: 3,000)
    builtin_seed: NonNegativeInt = 0  # the generator's seed (every split draws its own stream from it)
    cache_dir: str | None = None  # built-in data (default: $LAVO_ZOO_CACHE/recall or the user cache)


# --------------------------------------------------------------------------------------------------- the reader
def _ints(row: dict[str, Any], key: str, where: str) -> list[int]:
    """``row[key]``; a DataError naming ``where`` unless it is a non-empty list of integers."""
    value = row[key]
    if not isinstance(value, list) or not value or not all(type(v) is int for v in value):
        raise DataError(f"{where}: '{key}' must be a non-empty list of integers, got {str(value)[:60]}")
    return value


def check_answers(task: str, tokens: list[int], queries: list[int], sources: list[int]) -> list[int]:
    """The answers that ``task``'s rule gives for ``queries`` and their ``sources`` in ``tokens``; a ValueError
    naming the first query that breaks the rule. MQAR and induction heads: the source holds the same token as the
    query (the key, the trigger) and the answer is the token after it; selective copying: the source's token."""
    if task == "selective_copying":
        return [tokens[s] for s in sources]
    for i, (q, s) in enumerate(zip(queries, sources)):
        if tokens[s] != tokens[q] or s + 1 >= q:
            raise ValueError(f"query {i} at position {q} (token {tokens[q]}) does not repeat the token at its "
                             f"source {s} ({tokens[s]}) with the answer between them")
    return [tokens[s + 1] for s in sources]


SET_SEQ_LEN = "set data.seq_len to the file's length"


def parse_example(row: Any, vocab_size: int, seq_len: int, where: str, fix: str = SET_SEQ_LEN
                  ) -> tuple[int, list[int], list[int], list[int], list[int]]:
    """(task index, tokens [T], queries [Q], sources [Q], answers [Q]) of one parsed JSON line; a DataError naming
    ``where`` (file and line) and what is wrong otherwise (``fix``: what to do about another length than
    ``seq_len``, where the caller's settings are fixed)."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object with keys {', '.join(KEYS)}, got {type(row).__name__}")
    if len(row) != len(KEYS) or any(k not in row for k in KEYS):
        missing, extra = [k for k in KEYS if k not in row], sorted(set(row) - set(KEYS))
        raise DataError(f"{where}: " + "; ".join(x for x in (
            f"missing key(s) {', '.join(missing)}" if missing else "",
            f"unknown key(s) {', '.join(extra)}" if extra else "") if x) + f" (the keys are {', '.join(KEYS)})")
    if row["task"] not in TASKS:
        raise DataError(f"{where}: task {str(row['task'])[:40]!r} is not one of {', '.join(TASKS)}")
    tokens, queries, sources, answers = (_ints(row, k, where) for k in KEYS[1:])
    if len(tokens) != seq_len:
        raise DataError(f"{where}: {len(tokens)} tokens, but data.seq_len is {seq_len}; every example of a file has "
                        f"data.seq_len tokens ({fix})")
    for key, values in (("tokens", tokens), ("answers", answers)):
        low, high = min(values), max(values)
        if low < 0 or high >= vocab_size:
            raise DataError(f"{where}: '{key}' holds {low}..{high}, outside the vocabulary 0..{vocab_size - 1} "
                            f"(data.vocab_size={vocab_size})")
    if not len(queries) == len(sources) == len(answers):
        raise DataError(f"{where}: {len(queries)} queries, {len(sources)} sources and {len(answers)} answers; they "
                        "must be as many")
    if queries[0] < 0 or queries[-1] >= seq_len or any(a >= b for a, b in itertools.pairwise(queries)):
        raise DataError(f"{where}: 'queries' must be ascending, distinct positions in 0..{seq_len - 1}, got "
                        f"{queries[:12]}")
    for q, s in zip(queries, sources):
        if not 0 <= s < q:
            raise DataError(f"{where}: source {s} of query {q} is not an earlier position")
    try:
        expected = check_answers(row["task"], tokens, queries, sources)
    except ValueError as e:
        raise DataError(f"{where}: {e} ({row['task']})") from None
    for q, s, a, e in zip(queries, sources, answers, expected):
        if a != e:
            raise DataError(f"{where}: answer {a} of query {q} should be {e} by the {row['task']} rule (the token "
                            f"{'at' if row['task'] == 'selective_copying' else 'after'} its source {s})")
    return TASKS.index(row["task"]), tokens, queries, sources, answers


class RecallExamples(Dataset):
    """Examples as arrays: item i is ``{"tokens": [T], "targets": [T] (the answer at each query, -100 elsewhere),
    "distances": [T] (query - source at each query, 0 elsewhere), "task": []}`` (int64 tensors)."""

    def __init__(self, tokens: np.ndarray, targets: np.ndarray, distances: np.ndarray, tasks: np.ndarray) -> None:
        self.tokens, self.targets, self.distances, self.tasks = tokens, targets, distances, tasks

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"example {index} out of range for {len(self)} examples")
        return {"tokens": torch.from_numpy(self.tokens[index].astype(np.int64)),
                "targets": torch.from_numpy(self.targets[index].astype(np.int64)),
                "distances": torch.from_numpy(self.distances[index].astype(np.int64)),
                "task": torch.tensor(int(self.tasks[index]))}


def read_examples(path: Path, vocab_size: int, seq_len: int, fix: str = SET_SEQ_LEN) -> RecallExamples:
    """Every example of the JSON-lines file ``path`` (blank lines skipped), each checked by :func:`parse_example`
    (``fix``: its advice for another length)."""
    rows = list(json_rows(read_lines(path), path))
    if not rows:
        raise DataError(f"{path} holds no example (one JSON object per line)")
    tokens = np.empty((len(rows), seq_len), np.int32)
    targets = np.full((len(rows), seq_len), IGNORE, np.int32)
    distances = np.zeros((len(rows), seq_len), np.int32)
    tasks = np.empty(len(rows), np.int8)
    for i, (number, row) in enumerate(rows):
        tasks[i], tokens[i], queries, sources, answers = parse_example(row, vocab_size, seq_len,
                                                                       f"{path}, line {number}", fix)
        targets[i, queries] = answers
        distances[i, queries] = [q - s for q, s in zip(queries, sources)]
    return RecallExamples(tokens, targets, distances, tasks)


def split_file(root: Path, split: str) -> Path:
    """``root/<split>.jsonl``; a DataError saying how to make the layout when it is missing."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"data.path {root} is not a folder; it must hold train.jsonl, validation.jsonl and "
                        "test.jsonl (write them with `lavo-zoo data recall --out DIR`)")
    path = root / f"{split}.jsonl"
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise DataError(f"recall split '{split}': {path} {not_a_file(path)}")
    else:
        raise MissingSplit(f"recall split '{split}' is missing: expected {path} (one JSON example per line; "
                           "`lavo-zoo data recall --out DIR` writes the layout)")
    return path
