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
- **Noncausal MQAR** (``noncausal_mqar``, for an encoder): MQAR's keys and values in one sequence of two-token slots;
  the first ``start_pairs`` pairs fill the first slots (position 0 on), every other pair and every query
  (``num_queries`` of the keys at random, all when 0; the other pairs are distractors) takes a slot drawn at random
  among the rest, so that a query stands before or after its pair alike. A query is its key followed by fill, a
  pair its key followed by its value; the fill comes from the keys' half of the vocabulary (never the example's
  keys) or is the blank 0, so every value follows its key and nothing else looks like a pair.
- **Cross MQAR** (``cross_mqar``, for an encoder-decoder): the source (``context``) holds the pairs as noncausal
  MQAR places them (the first ``start_pairs`` at the start, the others at random slots among fill); the target
  holds ``num_queries`` of the keys (all when 0), one after another in random order; the answer at each is its
  key's value in the source, which only the cross attention can bring to the target.

``min_distance`` puts a stretch of fill before the queries (MQAR: after the pairs; selective copying: blanks before
the markers; induction heads: the first trigger is placed early enough) so that no query is nearer than that to its
source; noncausal MQAR draws the slots again for an example where a query is nearer than that to its key, on either
side.

Deliberate differences from the reference code: MQAR's random fill never draws this example's keys (Zoology's may,
so a key could appear again before its query; here each queried key appears exactly once before it), and the
answer is not fed back as the next input (as in Zoology, the queries' next positions hold fill).

The generators' arguments, stated here once (each takes those its task uses; the ``data.`` settings of the same
names give them):

    rng: the generator the examples are drawn from.
    n: the examples to generate.
    vocab_size: V, the ids' range 0 .. V - 1.
    seq_len: T, each sequence's length (cross MQAR: the source's).
    num_pairs: K, the key-value pairs of an example.
    num_tokens: selective copying's data tokens to copy (``data.num_pairs``).
    num_queries: the keys asked for (0: every one).
    start_pairs: the pairs placed first, from position 0 on.
    min_distance: the least distance from a query to its source (above).
    power_a: MQAR's a, the power law of the queries' offsets (above).
    random_fill: fill with random tokens (else the blank 0).

Each raises a ConfigError naming the ``data.`` setting when the sequence is too short or the vocabulary too small
for the task.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.engine.recipe import SPLITS
from lavo_zoo.errors import ConfigError
from lavo_zoo.recipes.recall.data import CROSS_KEYS, TASKS, DataConfig

GENERATOR_VERSION = 1  # bump when a generator's output changes, so that cached built-in data is made again
CHUNK = 1024  # examples generated at a time (bounds the memory of the vectorised draws)
REDRAWS = 100  # noncausal MQAR: rounds of drawing the slots again for examples that break data.min_distance


@dataclass
class Examples:
    """A task's examples as arrays (Q queries per example)."""

    task: str
    tokens: np.ndarray   # [N, T] int64 (cross MQAR: the target)
    queries: np.ndarray  # [N, Q] ascending positions in tokens
    sources: np.ndarray  # [N, Q] the position each query recalls (cross MQAR: in context)
    answers: np.ndarray  # [N, Q]
    context: np.ndarray | None = None  # [N, S] cross MQAR's source


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
    """``n`` MQAR examples; its arguments are stated in `lavo_zoo.recipes.recall.builtin`."""
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


def _keys_and_values(rng: np.random.Generator, n: int, vocab_size: int, num_pairs: int) -> tuple[np.ndarray, ...]:
    """([n, K] keys from 1 .. V/2 - 1, [n, K] values from V/2 .. V - 1), each distinct within a row."""
    V, K = vocab_size, num_pairs
    if V // 2 - 1 < K:
        raise ConfigError(f"data.vocab_size={V} has {V // 2 - 1} keys (1 .. V/2 - 1), fewer than data.num_pairs={K}")
    return _distinct(rng, 1, V // 2, n, K), _distinct(rng, V // 2, V, n, K)


def _half_fill(rng: np.random.Generator, n: int, length: int, vocab_size: int, keys: np.ndarray,
               random_fill: bool) -> np.ndarray:
    """[n, length] fill of noncausal and cross MQAR: random tokens from the keys' half 0 .. V/2 - 1 that are not
    one of the row's ``keys`` [n, K] (so a value never follows anything but its key), or the blank 0."""
    if not random_fill:
        return np.zeros((n, length), np.int64)
    tokens = rng.integers(0, vocab_size // 2, size=(n, length))
    clash = (tokens[:, :, None] == keys[:, None, :]).any(-1)  # [n, length] fill that repeats one of the keys
    while clash.any():
        tokens[clash] = rng.integers(0, vocab_size // 2, size=int(clash.sum()))
        clash = (tokens[:, :, None] == keys[:, None, :]).any(-1)
    return tokens


def _slots(rng: np.random.Generator, n: int, slots: int, num_pairs: int, start_pairs: int, num_queries: int,
           place_queries: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two-token slots of noncausal and cross MQAR: ([n, K] each pair's slot: pair j < ``start_pairs`` at slot
    j, the others at distinct random slots after them; [n, Q] the slots of ``num_queries`` queries, distinct from
    those and random too ([n, 0] without ``place_queries``: cross MQAR's queries are the target); [n, Q] which pair
    each query asks for, distinct, in random order)."""
    K, P, Q = num_pairs, start_pairs, num_queries
    placed = K - P + (Q if place_queries else 0)
    drawn = np.argsort(rng.random((n, slots - P)), axis=1)[:, :placed] + P  # [n, placed] distinct slots
    pair_slots = np.concatenate([np.broadcast_to(np.arange(P), (n, P)), drawn[:, :K - P]], axis=1)
    asked = np.argsort(rng.random((n, K)), axis=1)[:, :Q]
    return pair_slots, drawn[:, K - P:], asked


def noncausal_mqar(rng: np.random.Generator, n: int, vocab_size: int, seq_len: int, num_pairs: int,
                   num_queries: int = 0, start_pairs: int = 0, min_distance: int = 1, random_fill: bool = True
                   ) -> Examples:
    """``n`` noncausal MQAR examples; its arguments are stated in `lavo_zoo.recipes.recall.builtin`."""
    T, K, P = seq_len, num_pairs, start_pairs
    Q = num_queries or K
    keys, values = _keys_and_values(rng, n, vocab_size, K)
    if T // 2 < K + Q:
        raise ConfigError(f"data.seq_len={T} is too short for {K} pairs and {Q} queries: each takes two tokens, so "
                          f"it needs at least {2 * (K + Q)} (or fewer pairs, data.num_queries)")
    pair_slots, query_slots, asked = _slots(rng, n, T // 2, K, P, Q)
    for _ in range(REDRAWS):
        near = (2 * np.abs(query_slots - np.take_along_axis(pair_slots, asked, 1)) < min_distance).any(1)  # [n]
        if not near.any():
            break
        pair_slots[near], query_slots[near], asked[near] = _slots(rng, int(near.sum()), T // 2, K, P, Q)
    else:
        raise ConfigError(f"data.min_distance={min_distance} leaves too few places for {Q} queries and {K} pairs in "
                          f"{T} tokens (with data.start_pairs={P}): lower it, or lengthen data.seq_len")
    tokens = _half_fill(rng, n, T, vocab_size, keys, random_fill)
    rows = np.arange(n)[:, None]
    tokens[rows, 2 * pair_slots], tokens[rows, 2 * pair_slots + 1] = keys, values
    tokens[rows, 2 * query_slots] = np.take_along_axis(keys, asked, 1)
    queries, sources = 2 * query_slots, 2 * np.take_along_axis(pair_slots, asked, 1)
    order = np.argsort(queries, axis=1)
    return Examples("noncausal_mqar", tokens, np.take_along_axis(queries, order, 1),
                    np.take_along_axis(sources, order, 1),
                    np.take_along_axis(np.take_along_axis(values, asked, 1), order, 1))


def cross_mqar(rng: np.random.Generator, n: int, vocab_size: int, seq_len: int, num_pairs: int, num_queries: int = 0,
               start_pairs: int = 0, random_fill: bool = True) -> Examples:
    """``n`` cross MQAR examples (the module docstring): a source of ``seq_len`` tokens, a target of ``num_queries``
    (0: ``num_pairs``). Its arguments are stated in `lavo_zoo.recipes.recall.builtin`."""
    S, K, P = seq_len, num_pairs, start_pairs
    Q = num_queries or K
    keys, values = _keys_and_values(rng, n, vocab_size, K)
    if S // 2 < K:
        raise ConfigError(f"data.seq_len={S} is too short for {K} pairs: each takes two tokens of the source, so it "
                          f"needs at least {2 * K} (or fewer pairs)")
    pair_slots, _, asked = _slots(rng, n, S // 2, K, P, Q, place_queries=False)
    context = _half_fill(rng, n, S, vocab_size, keys, random_fill)
    rows = np.arange(n)[:, None]
    context[rows, 2 * pair_slots], context[rows, 2 * pair_slots + 1] = keys, values
    return Examples("cross_mqar", np.take_along_axis(keys, asked, 1), np.broadcast_to(np.arange(Q), (n, Q)).copy(),
                    2 * np.take_along_axis(pair_slots, asked, 1), np.take_along_axis(values, asked, 1), context)


def selective_copying(rng: np.random.Generator, n: int, vocab_size: int, seq_len: int, num_tokens: int,
                      min_distance: int = 1) -> Examples:
    """``n`` selective-copying examples; its arguments are stated in `lavo_zoo.recipes.recall.builtin`."""
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
    """``n`` induction-heads examples; its arguments are stated in `lavo_zoo.recipes.recall.builtin`."""
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
        elif data.task == "induction_heads":
            parts.append(induction_heads(rng, m, data.vocab_size, data.seq_len, data.min_distance))
        elif data.task == "noncausal_mqar":
            parts.append(noncausal_mqar(rng, m, data.vocab_size, data.seq_len, data.num_pairs, data.num_queries,
                                        data.start_pairs, data.min_distance, data.random_fill))
        else:
            parts.append(cross_mqar(rng, m, data.vocab_size, data.seq_len, data.num_pairs, data.num_queries,
                                    data.start_pairs, data.random_fill))
    context = np.concatenate([p.context for p in parts]) if parts[0].context is not None else None
    return Examples(data.task, *(np.concatenate([getattr(p, f) for p in parts])
                                 for f in ("tokens", "queries", "sources", "answers")), context)


def write_jsonl(path: Path, examples: Examples) -> None:
    """One JSON object per example, in the layout of :mod:`.data` (a cross example's keys in CROSS_KEYS' order)."""
    context = examples.context if examples.context is not None else [None] * len(examples.tokens)
    with open(path, "w", encoding="utf-8") as f:
        for source, tokens, queries, sources, answers in zip(context, examples.tokens, examples.queries,
                                                             examples.sources, examples.answers):
            row = {"task": examples.task, "tokens": tokens.tolist(), "queries": queries.tolist(),
                   "sources": sources.tolist(), "answers": answers.tolist()}
            if source is not None:
                row = {key: source.tolist() if key == "context" else row[key] for key in CROSS_KEYS}
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


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
    """The five tasks (``mqar``, ``selective_copying``, ``induction_heads``, ``noncausal_mqar``, ``cross_mqar``),
    each written as the JSON-lines splits of :mod:`.data`: ``data.builtin_size`` training and ``data.eval_size``
    validation and test examples."""

    datasets = TASKS
    size_settings = ("--size (data.builtin_size)", "data.eval_size", "data.seq_len", "data.num_pairs")

    def config(self, data: DataConfig, dataset: str, size: int | None) -> DataConfig:
        """Task ``dataset`` with the default settings and ``size`` training examples."""
        return super().config(replace(data, task=dataset), dataset, size)

    def key(self, data: DataConfig) -> dict:
        key = {"dataset": data.task, "v": GENERATOR_VERSION, "vocab_size": data.vocab_size, "seq_len": data.seq_len,
               "num_pairs": data.num_pairs, "min_distance": data.min_distance, "power_a": data.power_a,
               "random_fill": data.random_fill, "size": data.builtin_size, "eval_size": data.eval_size,
               "seed": data.builtin_seed}
        if data.pattern != "causal":  # the settings only these tasks read (the causal tasks' keys stay as they were)
            key.update(num_queries=data.num_queries, start_pairs=data.start_pairs)
        return key

    def footprint(self, data: DataConfig) -> tuple[int, int]:
        """(memory, file bytes) of :func:`write_splits`: the largest split's examples held at once, twice while they
        are joined, plus one chunk's float draws; every example's line of digits (a cross example's target too)."""
        T, K = data.seq_len + (data.target_len or 0), data.num_pairs
        largest = max(data.builtin_size, data.eval_size)
        memory = 2 * largest * (T + 3 * K) * 8 + 4 * CHUNK * T * 8
        line = (T + 3 * K) * (len(str(data.vocab_size - 1)) + 1) + 80
        return memory, (data.builtin_size + 2 * data.eval_size) * line

    def write(self, out: Path, data: DataConfig) -> Path:
        """The task's generated splits as JSON lines (``data.py`` documents the format)."""
        return write_splits(out, data)
