"""``compare --collect``: the table rebuilt from results that already exist."""
from __future__ import annotations

import json
import shutil
import statistics

import pytest

from lavo_zoo.compare import collect, summarise, write_table
from tests.compare.helpers import small_study


def test_collect_rebuilds_the_table_from_results(study, tmp_path):
    out = tmp_path / "cmp"
    records = small_study(study, out)
    collected = collect([out / "cells" / "sdpa-seed1" / "results.json", out / "cells" / "local-seed2"])
    assert sorted(r.label for r in collected) == ["local", "sdpa"]
    again = collect([out])  # a compare folder: its cell records
    assert len(again) == len(records)
    run = out / "cells" / "local-seed2"  # a run folder without its cell record: its results JSON, not checkpoint meta
    (run / "cell.json").unlink()
    assert any("metrics" in json.loads(p.read_text()) for p in run.glob("checkpoints/*/meta.json"))
    assert [r.source for r in collect([run])] == [str(run / "results.json")]


def test_collect_mixes_compare_folders_and_results_files(study, tmp_path):
    """A compare folder and a single results JSON together (metrics one of them lacks are left blank)."""
    out = tmp_path / "cmp"
    small_study(study, out)
    extra = tmp_path / "x.json"
    extra.write_text(json.dumps({"metrics": {"other": {"value": 1.0, "higher_is_better": True}},
                                 "config": {"model": {"attention": {"name": "performer"}}, "train": {"seed": 1}}}))
    paths = write_table(collect([out, extra]), tmp_path / "table", "mixed")
    table = paths[0].read_text()
    assert "| performer |" in table and "| sdpa |" in table


def test_a_run_collected_twice_counts_once(study, tmp_path, capsys):
    """The same file reached twice (a folder given twice, a file inside it, a link) and a copy of a run (its results
    JSON beside its cell record, a copied cell folder, a cell of an earlier version without the weights' sha256) are
    one run each: the table's spread never comes from copies."""
    out = tmp_path / "cmp"
    records = small_study(study, out)
    cell = out / "cells" / "sdpa-seed1"
    (tmp_path / "link").symlink_to(out)
    shutil.copytree(cell, tmp_path / "copy")
    older = json.loads((out / "cells" / "local-seed1" / "cell.json").read_text())
    older.pop("checkpoint_sha256")
    (out / "cells" / "local-seed1" / "cell.json").write_text(json.dumps(older))
    capsys.readouterr()
    collected = collect([out, out, cell / "cell.json", cell / "results.json", tmp_path / "link", tmp_path / "copy",
                         out / "cells" / "local-seed1" / "results.json"])
    assert sorted((r.attention, r.seed) for r in collected) == sorted((r.attention, r.seed) for r in records)
    notes = capsys.readouterr().err
    assert notes.count("counted once") == 4 * 2 + 1 + 1 + 1 + 1  # out again, the link; the file; copies
    assert f"{cell / 'results.json'} holds the same run as {cell / 'cell.json'} (the same weights" in notes
    rows, _ = summarise(collected)
    for row in rows:
        values = [r.metrics["loss"]["value"] for r in records if r.attention == row.label]
        assert row.seeds == 2 and row.metrics["loss"].std == pytest.approx(statistics.stdev(values))


def test_the_command_prints_its_own_table_not_a_concurrent_writers(study, tmp_path, capsys, monkeypatch):
    """Two commands on one study write its table at once: each prints the table it built (one printed the other's
    partial "(1 of 2 cells finished)" table, read back from disk), and the files are written whole."""
    from lavo_zoo.cli import main
    from lavo_zoo.compare import command

    out = tmp_path / "cmp"
    small_study(study, out)
    real = command.write_table

    def then_another_command_writes(records, folder, title):
        paths = real(records, folder, title)
        (folder / "table.md").write_text("# another command's table (1 of 4 cells finished)\n")
        return paths

    monkeypatch.setattr(command, "write_table", then_another_command_writes)
    capsys.readouterr()
    assert main(["compare", "--collect", str(out), "--out", str(tmp_path / "t"), "--no-efficiency"]) == 0
    printed = capsys.readouterr().out
    assert "# collected results" in printed and "another command's table" not in printed
    assert "| sdpa | 2 |" in printed and "| local | 2 |" in printed
    assert not [p.name for p in (tmp_path / "t").iterdir() if p.name.startswith(".")]  # no temporary left


def test_what_collect_leaves_out_or_mixes_is_noted(study, tmp_path, capsys):
    """A damaged cell.json was dropped without a note (the study itself names it), and runs of several recipes made
    one table without a word."""
    out = tmp_path / "cmp"
    small_study(study, out)
    (out / "cells" / "local-seed2" / "cell.json").write_text("{broken")
    other = tmp_path / "ts.json"
    other.write_text(json.dumps({"recipe": "time_series", "metrics": {"mse": {"value": 1.0, "higher_is_better": False}},
                                 "config": {"model": {"attention": {"name": "sdpa"}}, "train": {"seed": 1}}}))
    capsys.readouterr()
    assert len(collect([out])) == 3
    said = capsys.readouterr().err
    assert (f"{out / 'cells' / 'local-seed2' / 'cell.json'}, line 1, column 2: the record of a finished cell cannot be "
            "read (not JSON") in said and "so it is left out" in said
    assert "recipes" not in said
    assert len(collect([out, other])) == 4
    assert ("the collected runs come from 2 recipes (compare_toy: 3 run(s); time_series: 1 run(s)); they share one "
            "table, but their metrics compare only within a recipe") in capsys.readouterr().err
