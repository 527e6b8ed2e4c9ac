"""The recall generators against properties checked by hand on fresh random examples (MQAR's disjoint key and value
halves, each queried key once before its query, the least distance, the power-law query offsets against numpy's
sequential sampler; selective copying's and induction heads' layouts; noncausal and cross MQAR's pairs, queries on
both sides, start pairs and distractors), the JSON-lines round trip, and the reader refusing malformed lines, naming
the file and line."""
import json
from pathlib import Path

import numpy as np
import pytest

from lavo_zoo.errors import ConfigError, DataError
from lavo_zoo.evaluators.classification import recall_distance
from lavo_zoo.recipes.recall import data as recall_data
from lavo_zoo.recipes.recall.builtin import (
    cross_mqar,
    generate,
    induction_heads,
    mqar,
    noncausal_mqar,
    selective_copying,
    write_splits,
)
from lavo_zoo.recipes.recall.data import IGNORE, TASKS, DataConfig, cached_examples, read_examples, split_file


@pytest.mark.parametrize("vocab, length, pairs, distance, fill", [
    (32, 40, 4, 1, True), (32, 40, 4, 10, False), (128, 64, 8, 20, True), (16, 24, 3, 7, True)])
def test_mqar_examples(vocab, length, pairs, distance, fill):
    rng = np.random.default_rng(vocab + distance)
    ex = mqar(rng, 300, vocab, length, pairs, distance, 0.01, fill)
    assert ex.tokens.shape == (300, length) and ex.queries.shape == (300, pairs)
    for tokens, queries, sources, answers in zip(ex.tokens, ex.queries, ex.sources, ex.answers):
        keys, values = tokens[0:2 * pairs:2], tokens[1:2 * pairs:2]
        assert np.all((1 <= keys) & (keys < vocab // 2)) and np.all((vocab // 2 <= values) & (values < vocab))
        assert len(set(keys)) == pairs and len(set(values)) == pairs
        assert sorted(queries) == list(queries) and sorted(sources) == list(range(0, 2 * pairs, 2))
        for q, s, a in zip(queries, sources, answers):
            assert tokens[q] == tokens[s] and a == tokens[s + 1]  # the query repeats its key, the answer is its value
            assert list(tokens[:q]).count(tokens[q]) == 1  # the key appears exactly once before its query
            assert list(tokens).count(tokens[q]) == 2  # ... and nowhere else but at the query
            assert q - s >= distance and (q - 2 * pairs - max(0, distance - 2)) % 2 == 0
        fill_positions = np.setdiff1d(np.arange(2 * pairs, length), queries)
        if not fill:
            assert np.all(tokens[fill_positions] == 0)


def test_mqar_query_offsets_follow_the_power_law():
    """The query of the first pair sits at offset g (slot g of the query region) with p(g) ~ a (g + 1)^(a - 1):
    the first of the draws without replacement; every pair's offsets together are distributed as numpy's
    sequential sampler (``choice(replace=False, p=p)``, Zoology's) gives them."""
    vocab, length, pairs, a, n = 64, 40, 3, 0.3, 20_000
    ex = mqar(np.random.default_rng(1), n, vocab, length, pairs, 1, a, False)
    space = (length - 2 * pairs) // 2
    p = a * np.arange(1, space + 1) ** (a - 1)
    p /= p.sum()
    offsets = (ex.queries - 2 * pairs) // 2  # [n, pairs], sorted by position
    first = offsets[ex.sources == 0]  # the first pair's query
    counts = np.bincount(first, minlength=space)
    assert np.all(np.abs(counts - n * p) < 5 * np.sqrt(n * p * (1 - p)) + 1), (counts, n * p)
    rng = np.random.default_rng(2)
    reference = np.bincount(np.concatenate([rng.choice(space, pairs, replace=False, p=p) for _ in range(n)]),
                            minlength=space)
    counts = np.bincount(offsets.ravel(), minlength=space)
    assert np.all(np.abs(counts - reference) < 6 * np.sqrt(reference + 1)), (counts, reference)
    assert counts[0] > counts[space // 2] > counts[-1]  # most queries come early


def test_selective_copying_examples():
    vocab, length, tokens_to_copy, distance = 10, 40, 6, 15
    ex = selective_copying(np.random.default_rng(0), 300, vocab, length, tokens_to_copy, distance)
    for tokens, queries, sources, answers in zip(ex.tokens, ex.queries, ex.sources, ex.answers):
        assert list(queries) == list(range(length - tokens_to_copy, length))
        assert np.all(tokens[queries] == vocab - 1)  # the markers
        assert sorted(set(sources)) == list(sources) and np.all(tokens[sources] == answers)
        assert np.all((1 <= answers) & (answers <= vocab - 2))
        assert np.all(np.delete(tokens[:length - tokens_to_copy], sources) == 0)  # blanks around the data tokens
        assert np.all(queries - sources >= distance)


def test_induction_heads_examples():
    vocab, length, distance = 12, 30, 9
    ex = induction_heads(np.random.default_rng(0), 500, vocab, length, distance)
    assert ex.queries.shape == (500, 1) and np.all(ex.queries == length - 1)
    for tokens, (q,), (s,), (a,) in zip(ex.tokens, ex.queries, ex.sources, ex.answers):
        assert tokens[q] == tokens[s] == vocab - 1 and list(tokens).count(vocab - 1) == 2  # the trigger, twice
        assert a == tokens[s + 1] and 1 <= a <= vocab - 2 and q - s >= distance
    assert len(set(ex.sources.ravel())) > 10  # the first trigger moves


def _check_pairs(tokens: np.ndarray, vocab: int, pairs: int, start: int, fill: bool) -> dict[int, int]:
    """The rules a noncausal or cross MQAR sequence (a cross example's context) keeps, checked on its tokens alone:
    every value (upper half) follows a key (lower half, not 0), each key-value pair once, the first ``start`` pairs at
    0, 2, 4, ...; the fill is from the lower half (blank 0 without ``fill``) and never one of the keys. Returns
    {key position: value}."""
    half = vocab // 2
    value_at = np.flatnonzero(tokens >= half)
    assert len(value_at) == pairs and np.all(value_at % 2 == 1)  # every value in the second token of a slot
    keys = tokens[value_at - 1]
    assert np.all((1 <= keys) & (keys < half)) and len(set(keys)) == pairs and len(set(tokens[value_at])) == pairs
    assert list(value_at[:start] - 1) == list(range(0, 2 * start, 2))  # the start pairs
    return {int(p - 1): int(tokens[p]) for p in value_at}


@pytest.mark.parametrize("vocab, length, pairs, asked, start, distance, fill", [
    (32, 40, 4, 0, 0, 1, True), (64, 64, 8, 4, 2, 1, True), (16, 30, 3, 2, 3, 6, False), (64, 48, 6, 6, 1, 9, True)])
def test_noncausal_mqar_examples(vocab, length, pairs, asked, start, distance, fill):
    rng = np.random.default_rng(vocab + length + distance)
    ex = noncausal_mqar(rng, 300, vocab, length, pairs, asked, start, distance, fill)
    queried = asked or pairs
    assert ex.tokens.shape == (300, length) and ex.queries.shape == (300, queried) and ex.context is None
    before = after = 0
    for tokens, queries, sources, answers in zip(ex.tokens, ex.queries, ex.sources, ex.answers):
        value_of = _check_pairs(tokens, vocab, pairs, start, fill)
        assert sorted(queries) == list(queries) and len(set(sources)) == queried
        for q, s, a in zip(queries, sources, answers):
            assert s in value_of and a == value_of[s] == tokens[s + 1]  # the answer is the value after its key
            assert tokens[q] == tokens[s] and list(tokens).count(tokens[q]) == 2  # the key: its pair and its query
            assert tokens[q + 1] < vocab // 2 and abs(q - s) >= distance  # a query is followed by fill, not a value
            if s >= 2 * start:  # a pair placed at random: its query stands on either side alike
                before, after = before + (q < s), after + (q > s)
            else:
                assert q > s
        others = np.setdiff1d(np.arange(length), np.concatenate([queries, list(value_of), np.add(list(value_of), 1)]))
        assert np.all(~np.isin(tokens[others], list(tokens[list(value_of)])))  # fill: never a key
        if not fill:
            assert np.all(tokens[others] == 0)
    assert before + after == 0 if start == pairs else min(before, after) > 0.3 * (before + after)
    if start:
        assert np.all(np.isin(np.arange(0, 2 * start, 2), ex.sources.ravel()))  # the start pairs are asked too


@pytest.mark.parametrize("vocab, length, pairs, asked, start, fill", [
    (32, 16, 4, 0, 0, True), (64, 64, 8, 4, 2, True), (16, 12, 6, 1, 6, False)])
def test_cross_mqar_examples(vocab, length, pairs, asked, start, fill):
    ex = cross_mqar(np.random.default_rng(vocab + length), 300, vocab, length, pairs, asked, start, fill)
    queried = asked or pairs
    assert ex.context.shape == (300, length) and ex.tokens.shape == ex.queries.shape == (300, queried)
    for context, tokens, queries, sources, answers in zip(ex.context, ex.tokens, ex.queries, ex.sources, ex.answers):
        value_of = _check_pairs(context, vocab, pairs, start, fill)
        assert list(queries) == list(range(queried)) and len(set(tokens)) == queried  # the target: the queries
        for q, s, a in zip(queries, sources, answers):
            assert s in value_of and context[s] == tokens[q] and a == value_of[s] == context[s + 1]
        if not fill:
            assert np.count_nonzero(context) == 2 * pairs
    assert len(set(ex.sources[:, 0])) > min(5, pairs)  # the pairs move about the source


@pytest.mark.parametrize("settings, key", [
    ({"task": "noncausal_mqar", "vocab_size": 64, "seq_len": 15, "num_pairs": 4}, "data.seq_len=15"),
    ({"task": "noncausal_mqar", "vocab_size": 64, "seq_len": 16, "num_pairs": 4, "min_distance": 16},
     "data.min_distance=16"),
    ({"task": "cross_mqar", "vocab_size": 64, "seq_len": 7, "num_pairs": 4}, "data.seq_len=7"),
    ({"task": "cross_mqar", "vocab_size": 8, "seq_len": 64, "num_pairs": 4}, "data.vocab_size=8"),
    ({"task": "mqar", "vocab_size": 16, "seq_len": 64, "num_pairs": 8}, "data.vocab_size=16"),
    ({"task": "mqar", "vocab_size": 64, "seq_len": 32, "num_pairs": 8, "min_distance": 4}, "data.seq_len=32"),
    ({"task": "selective_copying", "vocab_size": 8, "seq_len": 19, "num_pairs": 8, "min_distance": 12},
     "data.seq_len=19"),
    ({"task": "induction_heads", "vocab_size": 8, "seq_len": 10, "min_distance": 10}, "data.seq_len=10"),
])
def test_settings_that_cannot_be_generated_are_refused_naming_the_key(settings, key):
    with pytest.raises(ConfigError, match=key):
        generate(DataConfig(**settings), 4, np.random.default_rng(0))


@pytest.mark.parametrize("task", TASKS)
def test_written_splits_read_back(tmp_path, task):
    data = DataConfig(task=task, vocab_size=20, seq_len=24, num_pairs=3, min_distance=5, builtin_size=50, eval_size=7,
                      builtin_seed=4, num_queries=2 if task == "cross_mqar" else 0)
    write_splits(tmp_path, data)
    examples = generate(data, 50, np.random.default_rng([4, 0]))  # the training split's stream
    settings = {"pattern": data.pattern, "target_len": data.target_len}
    train = read_examples(split_file(tmp_path, "train"), 20, 24, **settings)
    assert len(train) == 50 and len(read_examples(tmp_path / "test.jsonl", 20, 24, **settings)) == 7
    np.testing.assert_array_equal(train.tokens, examples.tokens)
    if task == "cross_mqar":
        np.testing.assert_array_equal(train.context, examples.context)
    for i in range(50):
        item = train[i]
        asked = (item["targets"] != IGNORE).nonzero().ravel().numpy()
        np.testing.assert_array_equal(asked, examples.queries[i])
        np.testing.assert_array_equal(item["targets"][asked].numpy(), examples.answers[i])
        np.testing.assert_array_equal(item["positions"][asked].numpy(), examples.sources[i])
        np.testing.assert_array_equal(item["distances"][asked].numpy(), [
            recall_distance(q, s, 24 if task == "cross_mqar" else None)
            for q, s in zip(examples.queries[i], examples.sources[i])])
        assert int(item["task"]) == TASKS.index(task) and ("context" in item) == (task == "cross_mqar")
    again = tmp_path / "again"
    again.mkdir()
    write_splits(again, data)
    assert (again / "train.jsonl").read_bytes() == (tmp_path / "train.jsonl").read_bytes()  # seeded
    assert (tmp_path / "validation.jsonl").read_text() != (tmp_path / "test.jsonl").read_text()


def _same_examples(a, b) -> None:
    assert len(a) == len(b)
    for name in ("tokens", "targets", "distances", "tasks", "positions", "context"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("task", ["mqar", "cross_mqar"])
def test_a_split_is_parsed_once_and_served_from_the_cache(tmp_path, monkeypatch, task):
    """cached_examples: the same arrays as read_examples, the file parsed on the first read only; an edited file or
    other settings are parsed again, and a file that does not check out is refused on every read."""
    data = DataConfig(task=task, vocab_size=20, seq_len=24, num_pairs=3, min_distance=5, builtin_size=30, eval_size=5,
                      builtin_seed=4, num_queries=2 if task == "cross_mqar" else 0)
    (tmp_path / "d").mkdir()
    write_splits(tmp_path / "d", data)
    path, cache = tmp_path / "d" / "train.jsonl", tmp_path / "cache"
    settings = {"pattern": data.pattern, "target_len": data.target_len}
    parsed = []
    reader = recall_data.read_examples
    monkeypatch.setattr(recall_data, "read_examples", lambda p, *a, **k: parsed.append(p) or reader(p, *a, **k))
    want = reader(path, 20, 24, **settings)
    _same_examples(cached_examples(path, cache, 20, 24, **settings), want)
    _same_examples(cached_examples(path, cache, 20, 24, **settings), want)
    _same_examples(cached_examples(tmp_path / "d" / ".." / "d" / "train.jsonl", cache, 20, 24, **settings), want)
    assert len(parsed) == 1 and len(list(cache.glob("examples/*/train-*.npz"))) == 1
    _same_examples(cached_examples(path, cache, 30, 24, **settings), reader(path, 30, 24, **settings))
    assert len(parsed) == 2  # another vocabulary: checked again
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:10]) + "\n")
    assert len(cached_examples(path, cache, 20, 24, **settings)) == 10 and len(parsed) == 3  # edited: read again
    path.write_text("\n".join(lines[:10] + ["[1, 2]"]) + "\n")
    for _ in range(2):
        with pytest.raises(DataError, match="line 11: expected a JSON object"):
            cached_examples(path, cache, 20, 24, **settings)
    assert len(parsed) == 5


GOOD = {"task": "mqar", "tokens": [3, 12, 5, 14, 0, 3, 0, 5], "queries": [5, 7], "sources": [0, 2],
        "answers": [12, 14]}


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "sources"}), "missing key(s) sources"),
    (json.dumps({**GOOD, "extra": 1}), "unknown key(s) extra"),
    (json.dumps({**GOOD, "task": "copy"}), "task 'copy' is not one of"),
    (json.dumps({**GOOD, "tokens": GOOD["tokens"][:-1]}), "7 tokens, but data.seq_len is 8"),
    (json.dumps({**GOOD, "tokens": [3, 12, 5, 14, 0, 3, 0, 16]}), "outside the vocabulary 0..15"),
    (json.dumps({**GOOD, "tokens": [3, 12.0, 5, 14, 0, 3, 0, 5]}), "'tokens' must be a non-empty list of integers"),
    (json.dumps({**GOOD, "queries": [7, 5]}), "'queries' must be ascending"),
    (json.dumps({**GOOD, "queries": [5, 8]}), "'queries' must be ascending"),
    (json.dumps({**GOOD, "sources": [0, 7]}), "source 7 of query 7 is not an earlier position"),
    (json.dumps({**GOOD, "answers": [12]}), "2 queries, 2 sources and 1 answers"),
    (json.dumps({**GOOD, "answers": [12, 13]}), "answer 13 of query 7 should be 14"),
    (json.dumps({**GOOD, "sources": [0, 1]}), "query 1 at position 7 (token 5) does not repeat"),
    (json.dumps({**GOOD, "task": "selective_copying"}), "answer 12 of query 5 should be 3"),
])
def test_the_reader_refuses_malformed_lines_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n")
    with pytest.raises(DataError) as error:
        read_examples(path, 16, 8)
    assert f"{path}, line 3" in str(error.value) and message in str(error.value)


def test_a_missing_or_empty_split_is_refused(tmp_path):
    with pytest.raises(DataError, match="validation.jsonl"):
        split_file(tmp_path, "validation")
    with pytest.raises(DataError, match="is not a folder"):
        split_file(tmp_path / "absent", "train")
    (tmp_path / "train.jsonl").write_text("\n")
    with pytest.raises(DataError, match="holds no example"):
        read_examples(Path(tmp_path / "train.jsonl"), 16, 8)


NONCAUSAL = {"task": "noncausal_mqar", "tokens": [0, 3, 0, 3, 12, 5, 14, 5], "queries": [1, 7], "sources": [3, 5],
             "answers": [12, 14]}  # key 3 asked before its pair, key 5 after it
CROSS = {"task": "cross_mqar", "context": [3, 12, 5, 14, 0, 1, 7, 9], "tokens": [5, 3], "queries": [0, 1],
         "sources": [2, 0], "answers": [14, 12]}


@pytest.mark.parametrize("good, line, message", [
    (NONCAUSAL, {**NONCAUSAL, "sources": [1, 5]}, "source 1 of query 1 is not another position"),
    (NONCAUSAL, {**NONCAUSAL, "sources": [3, 8]}, "source 8 of query 7 is not another position of 'tokens' (0..7)"),
    (NONCAUSAL, {**NONCAUSAL, "tokens": [0, 3, 0, 3, 12, 5, 14, 3]}, ("query 1 at position 7 (token 3) does not "
                                                                      "repeat the token at its source")),
    (NONCAUSAL, {**NONCAUSAL, "sources": [1, 5], "queries": [0, 7]}, "query 0 at position 0 (token 0) does not repeat"),
    (NONCAUSAL, {**NONCAUSAL, "tokens": [0, 3, 3, 0, 12, 5, 14, 5], "queries": [2, 7], "sources": [1, 5],
                 "answers": [3, 14]},  # the token after the key is the query itself
     "query 0 at position 2 (token 3) does not repeat the token at its source, with the answer after"),
    (NONCAUSAL, {**NONCAUSAL, "answers": [12, 5]}, "answer 5 of query 7 should be 14"),
    (NONCAUSAL, {**GOOD}, "a mqar example is causal recall, but data.task makes a noncausal model"),
    (NONCAUSAL, {**CROSS}, "a cross_mqar example is cross recall, but data.task makes a noncausal model"),
    (NONCAUSAL, {**NONCAUSAL, "context": [1]}, "unknown key(s) context"),
    (CROSS, {k: v for k, v in CROSS.items() if k != "context"}, "missing key(s) context"),
    (CROSS, {**CROSS, "context": CROSS["context"][:-1]}, "'context' holds 7 tokens, but data.seq_len is 8"),
    (CROSS, {**CROSS, "tokens": [5, 3, 3], "queries": [0, 1]}, ("the target ('tokens') holds 3 tokens, but the "
                                                               "model's targets hold 2 (data.num_queries")),
    (CROSS, {**CROSS, "context": [3, 12, 5, 14, 0, 1, 7, 99]}, "'context' holds 0..99, outside the vocabulary"),
    (CROSS, {**CROSS, "sources": [2, 8]}, "source 8 of query 1 is not a position of 'context' (0..7)"),
    (CROSS, {**CROSS, "sources": [2, 7], "tokens": [5, 9]}, ("query 1 at position 1 (token 9) does not repeat the "
                                                            "context's token at its source")),
    (CROSS, {**CROSS, "sources": [4, 0]}, "query 0 at position 0 (token 5) does not repeat the context's token"),
    (CROSS, {**CROSS, "answers": [14, 3]}, ("answer 3 of query 1 should be 12 by the cross_mqar rule (the token after "
                                           "its source 0 in the context)")),
    (CROSS, {**NONCAUSAL}, "a noncausal_mqar example is noncausal recall, but data.task makes a cross model"),
    # found by the sweep: `lavo-zoo eval` of a checkpoint was told to set data.task, which its model refuses
    (CROSS, {**NONCAUSAL}, ("set data.task to the file's task to train on it (a checkpoint's task is fixed with its "
                            "model: evaluate it on a split of a cross task)")),
])
def test_the_reader_refuses_malformed_noncausal_and_cross_lines(tmp_path, good, line, message):
    """Each rule of the two new tasks' lines is refused on its own (one change to a good line), naming the file and
    the line; the good lines read."""
    pattern = "cross" if good is CROSS else "noncausal"
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(DataError) as error:
        read_examples(path, 16, 8, pattern=pattern, target_len=2)
    assert f"{path}, line 2" in str(error.value) and message in str(error.value), str(error.value)
    path.write_text(json.dumps(good) + "\n")
    read = read_examples(path, 16, 8, pattern=pattern, target_len=2)
    assert read[0]["targets"][good["queries"]].tolist() == good["answers"]
