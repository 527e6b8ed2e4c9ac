"""The accuracy evaluator's groups (the recall recipe's tasks, distance and position buckets) against a plain
per-group count, the buckets against loops over powers of two, and `score accuracy` on recall's JSON lines: the same
figures from the files (noncausal and cross recall's too), and the mismatched or malformed lines refused naming the
file and line."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lavo_zoo.cli import main
from lavo_zoo.errors import DataError
from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.evaluators.classification import Accuracy, distance_bucket, position_bucket, signed_distance_bucket


def _reference_bucket(distance: int) -> str:
    low = 1
    while True:
        high = low if low < 2 else 2 * (low - 1)
        if low <= distance <= high:
            return f"dist:{high}" if low == high else f"dist:{low}-{high}"
        low = high + 1


def test_distance_buckets_double():
    assert [distance_bucket(d) for d in (1, 2, 3, 4, 5, 8, 9, 16, 17, 1000)] == [
        "dist:1", "dist:2", "dist:3-4", "dist:3-4", "dist:5-8", "dist:5-8", "dist:9-16", "dist:9-16", "dist:17-32",
        "dist:513-1024"]
    assert all(distance_bucket(d) == _reference_bucket(d) for d in range(1, 3000))
    with pytest.raises(ValueError, match=">= 1"):
        distance_bucket(0)


def _reference_position(position: int) -> str:
    """pos:0, pos:1, then [2^k, 2^(k+1) - 1] by walking the powers of two."""
    if position < 2:
        return f"pos:{position}"
    low = 2
    while not low <= position < 2 * low:
        low *= 2
    return f"pos:{low}-{2 * low - 1}"


def test_position_and_signed_distance_buckets_double():
    assert [position_bucket(p) for p in (0, 1, 2, 3, 4, 7, 8, 63, 64)] == [
        "pos:0", "pos:1", "pos:2-3", "pos:2-3", "pos:4-7", "pos:4-7", "pos:8-15", "pos:32-63", "pos:64-127"]
    assert all(position_bucket(p) == _reference_position(p) for p in range(3000))
    assert all(signed_distance_bucket(d) == _reference_bucket(d) for d in range(1, 300))
    assert all(signed_distance_bucket(-d) == _reference_bucket(d).replace("dist:", "ahead:") for d in range(1, 300))
    with pytest.raises(ValueError, match=">= 0"):
        position_bucket(-1)
    with pytest.raises(ValueError, match="not 0"):
        signed_distance_bucket(0)


def test_grouped_accuracy_matches_a_per_group_count():
    rng = np.random.default_rng(3)
    tasks, buckets = ["mqar", "induction_heads"], ["dist:5-8", "dist:17-32", "dist:3-4"]
    evaluator = build_evaluator("accuracy", confusion=False)
    seen = []
    for _ in range(4):  # several batches
        n = int(rng.integers(5, 40))
        true, pred = rng.integers(0, 50, n), rng.integers(0, 50, n)
        pred = np.where(rng.random(n) < 0.6, true, pred)
        groups = [(tasks[rng.integers(2)], buckets[rng.integers(3)]) for _ in range(n)]
        evaluator.update(torch.from_numpy(pred), {"ids": torch.from_numpy(true), "groups": groups})
        seen += [(p == t, g) for p, t, g in zip(pred, true, groups)]
    metrics = evaluator.compute()
    assert metrics["accuracy"] == pytest.approx(np.mean([hit for hit, _ in seen]))
    for name in tasks + buckets:
        hits = [hit for hit, g in seen if name in g]
        assert metrics[f"accuracy@{name}"] == pytest.approx(np.mean(hits))
        assert evaluator.details()["groups"][name] == {"correct": int(sum(hits)), "examples": len(hits)}
    assert list(metrics) == ["accuracy", "accuracy@induction_heads", "accuracy@mqar", "accuracy@dist:3-4",
                             "accuracy@dist:5-8", "accuracy@dist:17-32"]  # names, then buckets by distance
    assert evaluator.num_samples == len(seen) and "confusion_matrix" not in evaluator.details()
    assert all(m["higher_is_better"] is True for m in evaluator.results().values())
    with pytest.raises(ValueError, match="group labels"):
        evaluator.update(torch.tensor([1, 2]), {"ids": torch.tensor([1, 2]), "groups": [("mqar",)]})


def test_logits_are_scored_by_their_argmax_and_the_confusion_matrix_stays_by_default():
    evaluator = Accuracy()
    evaluator.update(torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), torch.tensor([1, 1, 1]))
    assert evaluator.compute() == {"accuracy": pytest.approx(2 / 3)}
    assert evaluator.details()["confusion_matrix"] == [[0, 0], [1, 2]]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def _recall_split(rng: np.random.Generator, n: int) -> list[dict]:
    """Reference lines of a recall split (only the keys scoring reads are checked here; the recipe's reader checks
    the rest)."""
    rows = []
    for _ in range(n):
        queries = sorted(rng.choice(np.arange(10, 60), int(rng.integers(1, 5)), replace=False).tolist())
        sources = [int(q - rng.integers(1, 10)) for q in queries]
        rows.append({"task": str(rng.choice(["mqar", "selective_copying"])), "tokens": [0] * 64,
                     "queries": queries, "sources": sources, "answers": rng.integers(0, 9, len(queries)).tolist()})
    return rows


def test_score_accuracy_reads_recall_predictions(tmp_path, capsys):
    rng = np.random.default_rng(0)
    refs = _recall_split(rng, 30)
    preds = [{"queries": r["queries"], "answers": [a if rng.random() < 0.7 else (a + 1) % 9 for a in r["answers"]]}
             for r in refs]
    ref, pred = _write_jsonl(tmp_path / "test.jsonl", refs), _write_jsonl(tmp_path / "answers.jsonl", preds)
    out = tmp_path / "score.json"
    assert main(["score", "accuracy", "--pred", str(pred), "--ref", str(ref), "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    answers = [(p == t, r["task"], distance_bucket(q - s)) for r, pr in zip(refs, preds)
               for p, t, q, s in zip(pr["answers"], r["answers"], r["queries"], r["sources"])]
    values = {k: v["value"] for k, v in results["metrics"].items()}
    assert results["num_samples"] == len(answers)
    assert values["accuracy"] == pytest.approx(np.mean([hit for hit, *_ in answers]))
    for task in ("mqar", "selective_copying"):
        assert values[f"accuracy@{task}"] == pytest.approx(np.mean([h for h, t, _ in answers if t == task]))
    for bucket in {b for *_, b in answers}:
        assert values[f"accuracy@{bucket}"] == pytest.approx(np.mean([h for h, _, b in answers if b == bucket]))
    assert "confusion_matrix" not in results["details"]


def test_score_accuracy_groups_noncausal_and_cross_answers_by_distance_and_position(tmp_path):
    """Noncausal rows (queries before and after their keys) and cross rows (the key in a context of S tokens): each
    answer counted by brute force in its distance bucket (signed; cross: S - source + query) and in the position
    bucket of its key, against what `score accuracy` reports for every group."""
    rng = np.random.default_rng(5)
    refs, preds = [], []
    for i in range(60):
        length = int(rng.integers(20, 90))
        sources = rng.choice(length - 1, 3, replace=False)
        queries = sorted(rng.choice(np.setdiff1d(np.arange(length), sources), 3, replace=False).tolist())
        row = {"task": "noncausal_mqar", "tokens": [0] * length, "queries": queries, "sources": sources.tolist(),
               "answers": rng.integers(0, 9, 3).tolist()}
        if i % 2:  # a cross row: a target of 3 queries over a context
            row = {"task": "cross_mqar", "context": [0] * length, "tokens": [0, 0, 0], "queries": [0, 1, 2],
                   "sources": sources.tolist(), "answers": row["answers"]}
        refs.append(row)
        preds.append({"answers": [a if rng.random() < 0.6 else a + 1 for a in row["answers"]]})
    ref, pred = _write_jsonl(tmp_path / "test.jsonl", refs), _write_jsonl(tmp_path / "answers.jsonl", preds)
    out = tmp_path / "score.json"
    assert main(["score", "accuracy", "--pred", str(pred), "--ref", str(ref), "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    counts: dict[str, list[int]] = {}
    for r, p in zip(refs, preds):
        for q, s, a, guess in zip(r["queries"], r["sources"], r["answers"], p["answers"]):
            distance = len(r["context"]) - s + q if "context" in r else q - s
            bucket = _reference_bucket(abs(distance))
            for group in (r["task"], bucket if distance > 0 else bucket.replace("dist:", "ahead:"),
                          _reference_position(s)):
                counts.setdefault(group, [0, 0])
                counts[group][0] += guess == a
                counts[group][1] += 1
    assert results["details"]["groups"] == {g: {"correct": c, "examples": n} for g, (c, n) in counts.items()}
    for group, (correct, examples) in counts.items():
        assert results["metrics"][f"accuracy@{group}"]["value"] == pytest.approx(correct / examples)
    names = list(results["metrics"])
    kinds = [next((k for k in ("dist:", "ahead:", "pos:") if n.startswith(f"accuracy@{k}")), "") for n in names]
    assert kinds == sorted(kinds, key=["", "dist:", "ahead:", "pos:"].index)  # tasks, then the kinds of bucket


@pytest.mark.parametrize("edit, where", [
    (lambda preds: preds[:-1], "holds 3 examples and --ref"),  # one line short
    (lambda preds: [preds[0], {"answers": preds[1]["answers"][:-1]}, preds[2], preds[3]], "answers.jsonl, line 2"),
    (lambda preds: [preds[0], preds[1], {"answers": ["x"]}, preds[3]], "answers.jsonl, line 3"),
    (lambda preds: [preds[0], preds[1], preds[2], "not json"], "answers.jsonl, line 4"),
    (lambda preds: [{**preds[0], "queries": [0]}, *preds[1:]], "answers.jsonl, line 1"),  # another split's queries
])
def test_recall_predictions_that_do_not_follow_the_reference_are_refused(tmp_path, edit, where):
    refs = [{"task": "mqar", "tokens": [], "queries": [5, 7], "sources": [1, 3], "answers": [4, 5]}] * 4
    preds = [{"queries": [5, 7], "answers": [4, 5]}] * 4
    ref = _write_jsonl(tmp_path / "test.jsonl", refs)
    pred = _write_jsonl(tmp_path / "answers.jsonl", edit(preds))
    with pytest.raises(DataError, match=where):
        Accuracy.from_files(pred, ref)


def test_a_malformed_reference_line_is_refused_naming_it(tmp_path):
    refs = [{"task": "mqar", "tokens": [], "queries": [5], "sources": [1], "answers": [4]},
            {"task": "mqar", "tokens": [], "queries": [5], "sources": [6], "answers": [4]}]  # source after its query
    _write_jsonl(tmp_path / "test.jsonl", refs)
    _write_jsonl(tmp_path / "answers.jsonl", [{"answers": [4]}] * 2)
    with pytest.raises(DataError, match="test.jsonl, line 2"):
        Accuracy.from_files(tmp_path / "answers.jsonl", tmp_path / "test.jsonl")
