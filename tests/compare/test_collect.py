"""``compare --collect``: the table rebuilt from results that already exist."""
from __future__ import annotations

import json

from lavo_zoo.compare import collect, write_table
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
