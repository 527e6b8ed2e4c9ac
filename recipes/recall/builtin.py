"""The built-in recall tasks, generated from a seed and written in the JSON-lines layout of :mod:`.data`.

- **MQAR** (multi-query associative recall, Arora et al. 2023, "Zoology"): ``num_pairs`` keys from the lower half
  of the vocabulary (1 .. V/2 - 1) and values from the upper half (V/2 .. V - 1), distinct within an example, as
  ``k1 v1 k2 v2 ...`` at the start; then every key once more as a query, at even offsets g of the query region drawn
  without replacement with probability proportional to a * (g + 1)^(a - 1) (``power_a``; most queries come early);
  the answer at a query is its key's value. The other positions hold random tokens (``random_fill``) or the blank 0.
- **Selective copying** (Gu & Dao 2023, "Mamba"; the S4 repository's copying task with random positions):
  ``num_pairs`` data tokens from 1 .. V - 2 at random, ordered positions among blanks (0), then ``num_pairs``
  markers (V - 1); at the i-th marker the answer is the i-th data token.
- **Induction heads** (as in H3 and Mamba): random tokens from 1 .. V - 2 with a trigger (V - 1) once inside the
  sequence and once as the last token; the answer at the last token is the token that followed the first trigger.

``min_distance`` puts a stretch of fill before the queries (MQAR: after the pairs; selective copying: blanks before
the markers; induction heads: the first trigger is placed early enough) so that no query is nearer than that to its
source.

Deliberate differences from the reference code: MQAR's random fill never draws this example's keys (Zoology's may,
so a key could appear again before its query; here each queried key appears exactly once before it), and the
answer is not fed back as the next input (as in Zoology, the queries' next positions hold fill).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.engine.recipe import SPLITS
from lavo_zoo.errors import ConfigError
from lavo_zoo.recipes.recall.data import TASKS, DataConfig

GENERATOR_VERSION = 1  # bump when a generator's output changes, so that cached built-in data is made again
CHUNK = 1024  # examples generated at a time (bounds the memory of the vectorised draws)


@dataclass
class Examples:
    """A task's examples as arrays (Q queries per example)."""

    task: str
    tokens: np.ndarray   # [N, T] int64
    queries: np.ndarray  # [N, Q] ascending positions
    sources: np.ndarray  # [N, Q] the position each query recalls
    answers: np.ndarray  # [N, Q]


def _draw_without_replacement(rng: np.random.Generator, log_p: np.ndarray, n: int, k: int) -> np.ndarray:
    """[n, k] indices into ``log_p`` ([m] log-probabilities), each row k distinct ones drawn one after another with
    probability proportional to p among those left (Gumbel top-k), in the order drawn."""
    scores = log_p[None, :] + rng.gumbel(size=(n, log_p.size))
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def _distinct(rng: np.random.Generator, low: int, high: int, n: int, k: int) -> np.ndarray:
    """[n, k] integers from low .. high - 1, distinct within each row, uniformly."""
    return np.stack([rng.choice(high - low, k, replace=False) for _ in range(n)]) + low


def mqar(rng: np.random.Generator, n: int, vocab_size: int, seq_len: int, num_pairs: int, min_distance: int = 1,
         power_a: float = 0.01, random_fill: bool = True) -> Examples:
    """``n`` MQAR examples (the module docstring)."""
    V, T, K = vocab_size, seq_len, num_pairs
    context = 2 * K
    gap = max(0, min_distance - 2)  # fill after the pairs: the last key (at 2K - 2) is >= 2 + gap from a query
    space = (T - context - gap) // 2  # query slots at even offsets of the query region
    if V // 2 - 1 < K:
        raise ConfigError(f"data.vocab_size={V} has {V // 2 - 1} keys (1 .. V/2 - 1), fewer than data.num_pairs={K}")
    if space < K:
        raise ConfigError(f"data.seq_len={T} is too short for {K} pairs with data.min_distance={min_distance}: it "
                          f"needs at least {2 * context + gap} tokens (or fewer pairs, a smaller distance)")
    g = np.arange(1, space + 1, dtype=np.float64)
    log_p = np.log(power_a * g ** (power_a - 1))
    keys = _distinct(rng, 1, V // 2, n, K)  # [n, K]
    values = _distinct(rng, V // 2, V, n, K)  # [n, K]
    offsets = _draw_without_replacement(rng, log_p, n, K)  # [n, K] query slot of key j (Zoology: gaps[j])
    if random_fill:
        tokens = rng.integers(0, V, size=(n, T))
        clash = (tokens[:, :, None] == keys[:, None, :]).any(-1)  # [n, T] fill that repeats one of the keys
        while clash.any():
            tokens[clash] = rng.integers(0, V, size=int(clash.sum()))
            clash = (tokens[:, :, None] == keys[:, None, :]).any(-1)
    else:
        tokens = np.zeros((n, T), np.int64)
    rows = np.arange(n)[:, None]
    sources = np.broadcast_to(np.arange(K) * 2, (n, K))  # key j at 2j, its value at 2j + 1
    queries = context + gap + 2 * offsets  # [n, K]
    tokens[:, :context:2], tokens[:, 1:context:2] = keys, values
    tokens[rows, queries] = keys
    order = np.argsort(queries, axis=1)
    return Examples("mqar", tokens, np.take_along_axis(queries, order, 1), np.take_along_axis(sources, order, 1),
                    np.take_along_axis(values, order, 1))


def selective_copying(rng: np.random.Generator, n: int, vocab_size: int, seq_len: int, num_tokens: int,
                      min_distance: int = 1) -> Examples:
    """``n`` selective-copying examples (the module docstring)."""
    V, T, M = vocab_size, seq_len, num_tokens
    gap = max(0, min_distance - M)  # blanks before the markers: the i-th token is >= M + gap from the i-th marker
    region = T - M - gap  # where the data tokens go
    if region < M:
        raise ConfigError(f"data.seq_len={T} is too short to copy {M} tokens with data.min_distance={min_distance}: "
                          f"it needs at least {2 * M + gap} tokens")
    data = rng.integers(1, V - 1, size=(n, M))
    positions = np.sort(np.argsort(rng.random((n, region)), axis=1)[:, :M], axis=1)  # [n, M] distinct, ordered
    tokens = np.zeros((n, T), np.int64)
    tokens[np.arange(n)[:, None], positions] = data
    tokens[:, T - M:] = V - 1
    queries = np.broadcast_to(np.arange(T - M, T), (n, M))
    return Examples("selective_copying", tokens, queries.copy(), positions, data)


def induction_heads(rng: np.random.Generator, n: int, vocab_size: int, seq_len: int,
                    min_distance: int = 1) -> Examples:
    """``n`` induction-heads examples (the module docstring)."""
    V, T = vocab_size, seq_len
    distance = max(min_distance, 2)  # the token after the first trigger must come before the last one
    if T - 1 - distance < 0:
        raise ConfigError(f"data.seq_len={T} is too short for an induction head at data.min_distance={min_distance}"
                          f": it needs at least {distance + 1} tokens")
    tokens = rng.integers(1, V - 1, size=(n, T))
    trigger = rng.integers(0, T - distance, size=n)  # first trigger at 0 .. T - 1 - distance
    rows = np.arange(n)
    tokens[rows, trigger] = V - 1
    tokens[:, T - 1] = V - 1
    return Examples("induction_heads", tokens, np.full((n, 1), T - 1), trigger[:, None],
                    tokens[rows, trigger + 1][:, None])


def generate(data: DataConfig, n: int, rng: np.random.Generator) -> Examples:
    """``n`` examples of ``data.task`` with ``data``'s settings, ``CHUNK`` at a time from ``rng``."""
    parts = []
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        if data.task == "mqar":
            parts.append(mqar(rng, m, data.vocab_size, data.seq_len, data.num_pairs, data.min_distance, data.power_a,
                              data.random_fill))
        elif data.task == "selective_copying":
            parts.append(selective_copying(rng, m, data.vocab_size, data.seq_len, data.num_pairs, data.min_distance))
        else:
            parts.append(induction_heads(rng, m, data.vocab_size, data.seq_len, data.min_distance))
    return Examples(data.task, *(np.concatenate([getattr(p, f) for p in parts])
                                 for f in ("tokens", "queries", "sources", "answers")))


def write_jsonl(path: Path, examples: Examples) -> None:
    """One JSON object per example, in the layout of :mod:`.data`."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"task": examples.task, "tokens": tokens.tolist(), "queries": queries.tolist(),
                                 "sources": sources.tolist(), "answers": answers.tolist()}, separators=(",", ":"))
                     + "\n" for tokens, queries, sources, answers in zip(examples.tokens, examples.queries,
                                                                          examples.sources, examples.answers))


def write_splits(out: Path, data: DataConfig) -> Path:
    """``out/{train,validation,test}.jsonl``: ``data.builtin_size`` training and ``data.eval_size`` validation and
    test examples, each split from its own stream of ``data.builtin_seed``; returns ``out``."""
    out = Path(out)
    for index, split in enumerate(SPLITS):
        rng = np.random.default_rng([data.builtin_seed, index])
        write_jsonl(out / f"{split}.jsonl", generate(data, data.builtin_size if split == "train" else data.eval_size,
                                                     rng))
    return out


class BuiltinRecall(BuiltinData):
    """The three tasks (``mqar``, ``selective_copying``, ``induction_heads``), each written as the JSON-lines splits
    of :mod:`.data`: ``data.builtin_size`` training and ``data.eval_size`` validation and test examples."""

    datasets = TASKS
    size_settings = ("--size (data.builtin_size)", "data.eval_size", "data.seq_len", "data.num_pairs")

    def config(self, data: DataConfig, dataset: str, size: int | None) -> DataConfig:
        """Task ``dataset`` with the default settings and ``size`` training examples."""
        return super().config(replace(data, task=dataset), dataset, size)

    def key(self, data: DataConfig) -> dict:
        return {"dataset": data.task, "v": GENERATOR_VERSION, "vocab_size": data.vocab_size, "seq_len": data.seq_len,
                "num_pairs": data.num_pairs, "min_distance": data.min_distance, "power_a": data.power_a,
                "random_fill": data.random_fill, "size": data.builtin_size, "eval_size": data.eval_size,
                "seed": data.builtin_seed}

    def footprint(self, data: DataConfig) -> tuple[int, int]:
        """(memory, file bytes) of :func:`write_splits`: the largest split's examples held at once, twice while they
        are joined, plus one chunk's float draws; every example's line of digits."""
        T, K = data.seq_len, data.num_pairs
        largest = max(data.builtin_size, data.eval_size)
        memory = 2 * largest * (T + 3 * K) * 8 + 4 * CHUNK * T * 8
        line = (T + 3 * K) * (len(str(data.vocab_size - 1)) + 1) + 80
        return memory, (data.builtin_size + 2 * data.eval_size) * line

    def write(self, out: Path, data: DataConfig) -> Path:
        """The task's generated splits as JSON lines (``data.py`` documents the format)."""
        return write_splits(out, data)
