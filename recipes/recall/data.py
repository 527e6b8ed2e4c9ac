"""Recall data: the settings (:class:`DataConfig`), the JSON-lines format and its reader, the dataset.

Layout (``lavo-zoo data recall --out DIR`` writes it; ``data.path=DIR`` reads it)::

    DIR/train.jsonl  DIR/validation.jsonl  DIR/test.jsonl

One example per line, a JSON object with exactly these keys::

    {"task": "mqar", "tokens": [3, 70, 5, 66, ...], "queries": [20, 24], "sources": [2, 0], "answers": [66, 70]}

- ``task``: ``mqar``, ``selective_copying``, ``induction_heads`` (causal recall: a decoder reads ``tokens`` left to
  right), ``noncausal_mqar`` (an encoder reads the whole of ``tokens``) or ``cross_mqar`` (an encoder-decoder: the
  target ``tokens`` reads the source ``context``). A file may mix the tasks of one pattern; ``data.task`` says which
  pattern, and so which model (:data:`TASK_PATTERNS`).
- ``tokens``: the input sequence, ``data.seq_len`` ids in ``[0, data.vocab_size)``; in ``cross_mqar`` the target,
  one query after another (``data.num_queries`` ids, or ``data.num_pairs`` when that is 0).
- ``context`` (``cross_mqar`` only, and there required): the source, ``data.seq_len`` ids.
- ``queries``: the positions in ``tokens`` where the model answers, ascending: its output at position q (the
  next-token prediction after reading ``tokens[q]``; the encoder's output there in noncausal recall) is scored
  against the answer. Every other position is not scored (the -100 targets of Zoology's labels).
- ``sources``: for each query, the position it recalls: the key (MQAR, in ``context`` for ``cross_mqar``) or the
  trigger (induction heads) whose next token is the answer, or the data token itself (selective copying); before
  the query in causal recall, before or after it in ``noncausal_mqar``. ``query - source`` is the key-to-query
  distance the evaluator buckets by (``context`` length ``- source + query`` in cross recall, as if the target
  followed the source), and ``source`` the position it buckets by.
- ``answers``: the right token at each query.

The reader checks every line against the task's rule (MQAR and induction heads: ``tokens[source] ==
tokens[query]`` and ``answer == tokens[source + 1]``, before the query; noncausal MQAR the same, before or after it
and the answer not the query; cross MQAR: ``context[source] == tokens[query]`` and ``answer == context[source + 1]``;
selective copying: ``answer == tokens[source]``), so a file whose answers do not follow from its tokens is refused,
naming the file and line.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from lavo_zoo.atomic import put_file
from lavo_zoo.config import NonNegativeInt, PositiveInt, Range
from lavo_zoo.data.cache import cached_file, file_stats
from lavo_zoo.errors import ConfigError, DataError, MissingSplit, not_a_file
from lavo_zoo.evaluators.classification import recall_distance
from lavo_zoo.formats.text import json_rows, read_lines

TASKS = ("mqar", "selective_copying", "induction_heads", "noncausal_mqar", "cross_mqar")
# the attention pattern each task is recalled through, which fixes the model: a decoder (causal), an encoder
# (noncausal), an encoder-decoder whose cross attention reads the source (cross)
TASK_PATTERNS = {"mqar": "causal", "selective_copying": "causal", "induction_heads": "causal",
                 "noncausal_mqar": "noncausal", "cross_mqar": "cross"}
KEYS = ("task", "tokens", "queries", "sources", "answers")  # every line has exactly these
CROSS_KEYS = ("task", "context", "tokens", "queries", "sources", "answers")  # ... and a cross_mqar line these
IGNORE = -100  # the target of a position that is not scored (Zoology's and PyTorch's ignore index)
# the format of the cached arrays of a file (cached_examples): raise it when read_examples changes what it accepts or
# returns, so that no array read by an older reader is served
EXAMPLES_FORMAT = 1


@dataclass
class DataConfig:
    # a folder of train.jsonl / validation.jsonl / test.jsonl (the format above); unset: the built-in data
    path: str | None = None
    # what the built-in data generates, and the pattern (so the model) of data.path's files: TASK_PATTERNS
    task: Literal["mqar", "selective_copying", "induction_heads", "noncausal_mqar", "cross_mqar"] = "mqar"
    vocab_size: Annotated[int, Range(ge=3, le=2**31 - 1)] = 8192  # Zoology's; token 0 is the blank / noise token
    seq_len: PositiveInt = 64  # tokens per example (every line of a file has this many; cross_mqar: the source's)
    # mqar, noncausal_mqar, cross_mqar: key-value pairs; selective_copying: tokens to copy; induction_heads: not used
    num_pairs: PositiveInt = 4
    # noncausal_mqar, cross_mqar: the pairs asked about (0: every pair; the others are distractors); cross_mqar: the
    # target's length
    num_queries: NonNegativeInt = 0
    # noncausal_mqar, cross_mqar: pairs at the very start of the sequence (k1 v1 k2 v2 ... from position 0); the
    # others at random places
    start_pairs: NonNegativeInt = 0
    # the least key-to-query distance: the generators leave a blank stretch so that every query is at least this
    # far from what it recalls (e.g. beyond a local window of w: min_distance = w + 2 puts the value out of it too);
    # noncausal_mqar: on either side (|query - key|); cross_mqar: not used
    min_distance: PositiveInt = 1
    power_a: Annotated[float, Range(gt=0, le=1)] = 0.01  # mqar: query offsets ~ a * g^(a - 1) (1: uniform)
    # random tokens between the pairs and queries, never the example's keys (mqar: from the whole vocabulary;
    # noncausal_mqar, cross_mqar: from the keys' half, so that every value follows its key); false: blank 0
    random_fill: bool = True
    builtin_size: PositiveInt = 100_000  # built-in training examples (Zoology: 100,000)
    eval_size: PositiveInt = 3_000  # built-in validation and test examples, each (Zoology: 3,000)
    builtin_seed: NonNegativeInt = 0  # the generator's seed (every split draws its own stream from it)
    cache_dir: str | None = None  # built-in data (default: $LAVO_ZOO_CACHE/recall or the user cache)

    def __post_init__(self) -> None:
        for key in ("num_queries", "start_pairs"):
            if getattr(self, key) > self.num_pairs:
                raise ConfigError(f"data.{key}={getattr(self, key)} is more than data.num_pairs={self.num_pairs}: "
                                  f"they count pairs of the {self.num_pairs} in each example")

    @property
    def pattern(self) -> str:
        """The attention pattern of ``task`` (:data:`TASK_PATTERNS`): causal, noncausal or cross."""
        return TASK_PATTERNS[self.task]

    @property
    def target_len(self) -> int | None:
        """cross_mqar: the target's length (one token per query); None for the one-sequence tasks."""
        return (self.num_queries or self.num_pairs) if self.pattern == "cross" else None


# --------------------------------------------------------------------------------------------------- the reader
def _ints(row: dict[str, Any], key: str, where: str) -> list[int]:
    """``row[key]``; a DataError naming ``where`` unless it is a non-empty list of integers."""
    value = row[key]
    if not isinstance(value, list) or not value or set(map(type, value)) != {int}:  # bool is no int here
        raise DataError(f"{where}: '{key}' must be a non-empty list of integers, got {str(value)[:60]}")
    return value


def check_answers(task: str, tokens: list[int], queries: list[int], sources: list[int],
                  context: list[int] | None = None) -> list[int]:
    """The answers that ``task``'s rule gives for ``queries`` and their ``sources``; a ValueError naming the first
    query that breaks the rule. MQAR and induction heads: the source holds the same token as the query (the key, the
    trigger) and the answer is the token after it, between them; noncausal MQAR the same on either side of the query,
    the answer not the query itself; cross MQAR: the key at the source of ``context`` (the source sequence), the
    answer after it there; selective copying: the source's token.

    Args:
        task: the task (:data:`TASKS`).
        tokens: the example's tokens (cross MQAR: the target).
        queries: the queries' positions in ``tokens``.
        sources: the position each query recalls (cross MQAR: in ``context``).
        context: cross MQAR's source, else None.

    Raises:
        ValueError: the first query that breaks the rule.
    """
    if task == "selective_copying":
        return [tokens[s] for s in sources]
    keys = context if task == "cross_mqar" else tokens
    for i, (q, s) in enumerate(zip(queries, sources)):
        if task == "cross_mqar":
            broken = keys[s] != tokens[q] or s + 1 >= len(keys)
            rule = "the context's token at its source (the key), with the answer after it"
        elif task == "noncausal_mqar":
            broken = keys[s] != tokens[q] or s + 1 >= len(keys) or s + 1 == q
            rule = "the token at its source, with the answer after that source"
        else:
            broken = keys[s] != tokens[q] or s + 1 >= q
            rule = "the token at its source, with the answer between them"
        if broken:
            raise ValueError(f"query {i} at position {q} (token {tokens[q]}) does not repeat {rule}: source {s} "
                             f"holds {keys[s]}")
    return [keys[s + 1] for s in sources]


SET_SEQ_LEN = "set data.seq_len to the file's length"


def parse_example(row: Any, vocab_size: int, seq_len: int, where: str, fix: str = SET_SEQ_LEN,
                  pattern: str = "causal", target_len: int | None = None
                  ) -> tuple[int, list[int], list[int], list[int], list[int], list[int] | None]:
    """(task index, tokens [T], queries [Q], sources [Q], answers [Q], context [S] or None) of one parsed JSON line;
    a DataError naming ``where`` (file and line) and what is wrong otherwise.

    Args:
        row: the parsed line.
        vocab_size: the ids' range: every id is in [0, vocab_size).
        seq_len: the sequence's length (cross recall: the context's).
        where: the file and line, for the messages.
        fix: what to do about another length than ``seq_len``, where the caller's settings are fixed.
        pattern: the model's pattern (``data.task``'s): a line of another pattern's task is refused.
        target_len: cross recall: the target's length.
    """
    keys = CROSS_KEYS if pattern == "cross" else KEYS
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object with keys {', '.join(keys)}, got {type(row).__name__}")
    if row.get("task") in TASKS and TASK_PATTERNS[row["task"]] != pattern:
        fix_task = (f"set data.task to the file's task to train on it (a checkpoint's task is fixed with its model: "
                    f"evaluate it on a split of a {pattern} task)" if fix == SET_SEQ_LEN
                    else f"give a split of a {pattern} task")
        raise DataError(f"{where}: a {row['task']} example is {TASK_PATTERNS[row['task']]} recall, but data.task "
                        f"makes a {pattern} model (the task fixes the model: {_MODELS}); {fix_task}")
    if len(row) != len(keys) or any(k not in row for k in keys):
        missing, extra = [k for k in keys if k not in row], sorted(set(row) - set(keys))
        raise DataError(f"{where}: " + "; ".join(x for x in (
            f"missing key(s) {', '.join(missing)}" if missing else "",
            f"unknown key(s) {', '.join(extra)}" if extra else "") if x) + f" (the keys are {', '.join(keys)})")
    if row["task"] not in TASKS:
        raise DataError(f"{where}: task {str(row['task'])[:40]!r} is not one of {', '.join(TASKS)}")
    tokens, queries, sources, answers = (_ints(row, k, where) for k in KEYS[1:])
    context = _ints(row, "context", where) if pattern == "cross" else None
    source_seq = context if context is not None else tokens
    if len(source_seq) != seq_len:
        name = "'context' holds" if context is not None else "holds"
        raise DataError(f"{where}: {name} {len(source_seq)} tokens, but data.seq_len is {seq_len}; every example of "
                        f"a file has data.seq_len tokens ({fix})")
    if context is not None and len(tokens) != target_len:
        raise DataError(f"{where}: the target ('tokens') holds {len(tokens)} tokens, but the model's targets hold "
                        f"{target_len} (data.num_queries, or data.num_pairs when it is 0); every target of a file is "
                        "as long (" + ("set data.num_queries to the file's target length" if fix == SET_SEQ_LEN
                                       else fix) + ")")
    for key, values in (("tokens", tokens), ("answers", answers), *((("context", context),) if context else ())):
        low, high = min(values), max(values)
        if low < 0 or high >= vocab_size:
            raise DataError(f"{where}: '{key}' holds {low}..{high}, outside the vocabulary 0..{vocab_size - 1} "
                            f"(data.vocab_size={vocab_size})")
    if not len(queries) == len(sources) == len(answers):
        raise DataError(f"{where}: {len(queries)} queries, {len(sources)} sources and {len(answers)} answers; they "
                        "must be as many")
    if queries[0] < 0 or queries[-1] >= len(tokens) or any(a >= b for a, b in itertools.pairwise(queries)):
        raise DataError(f"{where}: 'queries' must be ascending, distinct positions in 0..{len(tokens) - 1}, got "
                        f"{queries[:12]}")
    for q, s in zip(queries, sources):
        if pattern == "causal" and not 0 <= s < q:
            raise DataError(f"{where}: source {s} of query {q} is not an earlier position")
        if pattern == "noncausal" and (not 0 <= s < len(tokens) or s == q):
            raise DataError(f"{where}: source {s} of query {q} is not another position of 'tokens' "
                            f"(0..{len(tokens) - 1})")
        if pattern == "cross" and not 0 <= s < len(source_seq):
            raise DataError(f"{where}: source {s} of query {q} is not a position of 'context' "
                            f"(0..{len(source_seq) - 1})")
    try:
        expected = check_answers(row["task"], tokens, queries, sources, context)
    except ValueError as e:
        raise DataError(f"{where}: {e} ({row['task']})") from None
    for q, s, a, e in zip(queries, sources, answers, expected):
        if a != e:
            raise DataError(f"{where}: answer {a} of query {q} should be {e} by the {row['task']} rule (the token "
                            f"{'at' if row['task'] == 'selective_copying' else 'after'} its source {s}"
                            f"{' in the context' if context is not None else ''})")
    return TASKS.index(row["task"]), tokens, queries, sources, answers, context


_MODELS = "a decoder for " + ", ".join(t for t, p in TASK_PATTERNS.items() if p == "causal") + ", an encoder for " + \
    ", ".join(t for t, p in TASK_PATTERNS.items() if p == "noncausal") + ", an encoder-decoder for " + \
    ", ".join(t for t, p in TASK_PATTERNS.items() if p == "cross")


class RecallExamples(Dataset):
    """Examples as arrays: item i is ``{"tokens": [T], "targets": [T] (the answer at each query, -100 elsewhere),
    "distances": [T] (the key-to-query distance at each query, 0 elsewhere), "positions": [T] (the position of each
    query's source, 0 elsewhere), "task": []}`` (int64 tensors), and ``"context": [S]`` (the source) in cross recall.
    """

    def __init__(self, tokens: np.ndarray, targets: np.ndarray, distances: np.ndarray, tasks: np.ndarray,
                 positions: np.ndarray | None = None, context: np.ndarray | None = None) -> None:
        self.tokens, self.targets, self.distances, self.tasks = tokens, targets, distances, tasks
        self.positions = positions if positions is not None else np.zeros_like(distances)
        self.context = context

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"example {index} out of range for {len(self)} examples")
        item = {"tokens": torch.from_numpy(self.tokens[index].astype(np.int64)),
                "targets": torch.from_numpy(self.targets[index].astype(np.int64)),
                "distances": torch.from_numpy(self.distances[index].astype(np.int64)),
                "positions": torch.from_numpy(self.positions[index].astype(np.int64)),
                "task": torch.tensor(int(self.tasks[index]))}
        if self.context is not None:
            item["context"] = torch.from_numpy(self.context[index].astype(np.int64))
        return item


def read_examples(path: Path, vocab_size: int, seq_len: int, fix: str = SET_SEQ_LEN, pattern: str = "causal",
                  target_len: int | None = None) -> RecallExamples:
    """Every example of the JSON-lines file ``path`` (blank lines skipped), each checked by :func:`parse_example`.

    Args:
        path: the file.
        vocab_size: the ids' range: every id is in [0, vocab_size).
        seq_len: every sequence's length (cross recall: the context's).
        fix: the advice for another length.
        pattern: the model's pattern (``data.task``'s, :data:`TASK_PATTERNS`).
        target_len: cross recall: every target's length.
    """
    rows = list(json_rows(read_lines(path), path))
    if not rows:
        raise DataError(f"{path} holds no example (one JSON object per line)")
    length = target_len if pattern == "cross" else seq_len
    tokens = np.empty((len(rows), length), np.int32)
    targets = np.full((len(rows), length), IGNORE, np.int32)
    distances = np.zeros((len(rows), length), np.int32)
    positions = np.zeros((len(rows), length), np.int32)
    context = np.empty((len(rows), seq_len), np.int32) if pattern == "cross" else None
    tasks = np.empty(len(rows), np.int8)
    for i, (number, row) in enumerate(rows):
        tasks[i], tokens[i], queries, sources, answers, source_seq = parse_example(
            row, vocab_size, seq_len, f"{path}, line {number}", fix, pattern, target_len)
        targets[i, queries] = answers
        distances[i, queries] = [recall_distance(q, s, seq_len if context is not None else None)
                                 for q, s in zip(queries, sources)]
        positions[i, queries] = sources
        if context is not None:
            context[i] = source_seq
    return RecallExamples(tokens, targets, distances, tasks, positions, context)


def cached_examples(path: Path, cache: Path, vocab_size: int, seq_len: int, pattern: str = "causal",
                    target_len: int | None = None) -> RecallExamples:
    """:func:`read_examples` of ``path``, its checked arrays kept in the cache (``cache/examples``, one ``.npz`` per
    file and settings, :func:`~lavo_zoo.data.cache.cached_file`): a file is parsed and checked once, not by every
    run, cell and dry run that reads it (parsing is most of a short run's time); an edited file or other settings are
    parsed again, and a file that does not check out is refused every time (nothing is cached for it).

    Args:
        path: the JSON-lines file.
        cache: the recipe's cache folder.
        vocab_size: the ids' range: every id is in [0, vocab_size).
        seq_len: every sequence's length (cross recall: the context's).
        pattern: the model's pattern (``data.task``'s, :data:`TASK_PATTERNS`).
        target_len: cross recall: every target's length.
    """
    path = Path(path).resolve()
    payload = {"format": EXAMPLES_FORMAT, "file": [path.name, *file_stats(path)], "vocab_size": vocab_size,
               "seq_len": seq_len, "pattern": pattern, "target_len": target_len}
    made: list[RecallExamples] = []

    def make(out: Path) -> None:
        made.append(read_examples(path, vocab_size, seq_len, pattern=pattern, target_len=target_len))
        arrays = {k: v for k, v in vars(made[0]).items() if v is not None}
        put_file(out, lambda f: np.savez(f, **arrays))

    stored = cached_file(Path(cache) / "examples", path.parent, f"{path.stem}-", payload, ".npz", make)
    if made:
        return made[0]
    try:
        with np.load(stored, allow_pickle=False) as z:
            return RecallExamples(**{k: z[k] for k in z.files})
    except FileNotFoundError:  # removed meanwhile by a process that read the file with other settings
        return read_examples(path, vocab_size, seq_len, pattern=pattern, target_len=target_len)


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
