"""The table and its verdict: does the budget separate softmax from the mean control?"""
from __future__ import annotations

import json
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


def _results(path, value):
    path.write_text(json.dumps({"metrics": {"accuracy": {"value": value, "higher_is_better": True}},
                                "config": {"model": {"attention": {"name": "sdpa"}}, "train": {"seed": 1}}}))
    return path


def test_the_table_replaces_only_an_earlier_table_and_never_a_run(tmp_path, capsys):
    """`compare --out T` writes T/table.md, table.csv and chart.png: an earlier study's table is replaced (it is the
    study's own record), a file of the user's under one of those names or a training run as T is refused before any
    work, and nothing changes."""
    from lavo_zoo.cli import main

    results = _results(tmp_path / "r.json", 0.5)
    out = tmp_path / "table"
    out.mkdir()
    (out / "table.md").write_text("my notes\n")
    assert main(["compare", "--collect", str(results), "--out", str(out)]) == 2
    assert "is not a study's Markdown table" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["table.md"] and (out / "table.md").read_text() == "my notes\n"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("train: {}\n")
    assert main(["compare", "--collect", str(results), "--out", str(run)]) == 2
    assert "is a training run" in capsys.readouterr().err and sorted(p.name for p in run.iterdir()) == [
        "checkpoints", "config.yaml"]
    (out / "table.md").unlink()
    assert main(["compare", "--collect", str(results), "--out", str(out)]) == 0
    _results(results, 0.75)
    assert main(["compare", "--collect", str(results), "--out", str(out)]) == 0  # its own table: replaced
    assert "0.75" in (out / "table.md").read_text() and sorted(p.name for p in out.iterdir()) == [
        "chart.png", "table.csv", "table.md"]


def test_a_full_disk_leaves_the_earlier_table_whole(tmp_path, monkeypatch):
    """Each table file is written atomically: a full disk leaves the earlier one as it was, no partial file."""
    import errno

    import lavo_zoo.atomic
    from lavo_zoo.errors import ZooError

    write_table(records_of({"sdpa": [0.5]}), tmp_path, "before")
    before = (tmp_path / "table.md").read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lavo_zoo.atomic.os, "fsync", full)
    with pytest.raises(ZooError, match=f"could not write {tmp_path / 'table.md'}: the disk is full"):
        write_table(records_of({"sdpa": [0.25]}), tmp_path, "after")
    assert (tmp_path / "table.md").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.png", "table.csv", "table.md"]


def test_a_table_that_cannot_be_made_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    """The three files are made before any is written: a chart that cannot be drawn left a new table.md beside the
    previous table.csv and chart.png (a study's table is rewritten as its cells finish)."""
    from lavo_zoo.compare import table

    write_table(records_of({"sdpa": [0.5]}), tmp_path, "before")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken(*args, **kwargs):
        raise RuntimeError("the chart cannot be drawn")

    monkeypatch.setattr(table, "_chart", broken)
    with pytest.raises(RuntimeError, match="cannot be drawn"):
        write_table(records_of({"sdpa": [0.25]}), tmp_path, "after")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
