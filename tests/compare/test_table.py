"""The table and its verdict: does the budget separate softmax from the mean control?"""
from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from lavo_zoo.compare import separation, summarise, write_table
from tests.compare.helpers import records_of


@pytest.mark.parametrize("higher", [False, True])
def test_the_table_says_whether_softmax_beats_the_mean_control_by_two_std(tmp_path, higher):
    sign = -1 if higher else 1  # the same study with the metric's direction flipped
    control = [sign * v for v in (0.50, 0.52, 0.54)]  # std 0.02
    cases = {"wide": ([sign * v for v in (0.40, 0.41, 0.42)], True),  # better by 0.11 = 5.5 std
             "close": ([sign * v for v in (0.48, 0.49, 0.50)], False),  # better by 0.03 = 1.5 std
             "worse": ([sign * v for v in (0.60, 0.61, 0.62)], False),
             "two seeds": ([sign * v for v in (0.40, 0.41)], False)}  # far apart, but fewer than three seeds
    for case, (softmax, separates) in cases.items():
        rows, directions = summarise(records_of({"sdpa": softmax, "mean": control, "lavo": control}, higher))
        verdict = separation(rows, directions)["mse"]
        assert verdict["separates"] is separates, case
        assert verdict["gap"] == pytest.approx(statistics.fmean(control) * sign - statistics.fmean(softmax) * sign)
        out = tmp_path / case
        write_table(records_of({"sdpa": softmax, "mean": control}, higher), out, case)
        note = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith("- mse:"))
        assert ("does NOT separate" not in note) is separates, note
    breakdown = [replace(r, metrics={**r.metrics, "mse@chair": r.metrics["mse"]})
                 for r in records_of({"sdpa": [0.4, 0.41, 0.42], "mean": [0.5, 0.51, 0.5]})]
    assert list(separation(*summarise(breakdown))) == ["mse"]  # per-category breakdowns get no verdict
    at_lengths = [replace(r, metrics={"ppl@128": r.metrics["mse"], "ppl@1024": r.metrics["mse"]})
                  for r in records_of({"sdpa": [0.4, 0.41, 0.42], "mean": [0.5, 0.51, 0.5]})]
    verdicts = separation(*summarise(at_lengths))          # metrics named for a length, with no bare `ppl`: headlines
    assert list(verdicts) == ["ppl@128", "ppl@1024"] and all(v["separates"] for v in verdicts.values())
    rows, directions = summarise(records_of({"sdpa": [0.4, 0.41, 0.42], "lavo": [0.5, 0.51, 0.5]}))
    assert separation(rows, directions) == {}  # no control in the study: no verdict
    write_table(records_of({"sdpa": [0.4, 0.41, 0.42], "lavo": [0.5, 0.51, 0.5]}), tmp_path / "none", "none")
    assert "separate" not in (tmp_path / "none" / "table.md").read_text()
