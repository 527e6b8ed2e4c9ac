"""``lavo-zoo compare`` from the command line, on the test recipe and on real recipes."""
from __future__ import annotations

import csv
import json

import pytest


def test_compare_command_measures_and_switches_off_the_efficiency_lengths(study, tmp_path, in_process):
    from lavo_zoo.cli import main

    out = tmp_path / "cmp"
    args = ["compare", str(study), "--attentions", "local,sdpa", "-o", "local.window_size=3", "--out", str(out),
            "--device", "cpu"]
    assert main([*args, "--efficiency-lengths", "0"]) == 2 and not (out / "cells").exists()
    assert main([*args, "--efficiency-lengths", "8,32"]) == 0
    rows = {row["attention"]: row for row in csv.DictReader((out / "table.csv").open())}
    assert rows["sdpa"]["faster than softmax from"] == "-" and rows["local"]["faster than softmax from"]
    assert json.loads((out / "efficiency" / "local.json").read_text())["key"]["isolate"] is True  # CPU: isolated
    assert main([*args, "--no-efficiency"]) == 0
    assert "softmax" not in (out / "table.md").read_text()
    assert main(["compare", "--collect", str(out), "--out", str(tmp_path / "table")]) == 0
    assert "faster than softmax from" in (tmp_path / "table" / "table.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("config, overrides", [
    ("lm/tiny-lavo", ["model.num_layers=1", "model.embed_dim=64", "model.num_heads=2", "data.block_size=32",
                      "train.batch_size=2", "eval.length_factors=[1]", "eval.max_tokens=256"]),
    ("time_series/tiny-lavo", ["--site", "cross", "data.builtin_size=600", "data.seq_len=24", "data.label_len=12",
                               "data.pred_len=6"]),
])
def test_compare_runs_recipes_whose_sizes_come_from_the_data(tmp_path, config, overrides, in_process):
    """The model's data-derived sizes (vocabulary, channels) are resolved before the parameters are counted (and
    before the attention layer of the efficiency lengths is read from the built model)."""
    from lavo_zoo.cli import main

    assert main(["compare", config, "--attentions", "lavo,sdpa", "--out", str(tmp_path / "cmp"), "--max-steps", "2",
                 "--max-batches", "1", "--device", "cpu", "--efficiency-lengths", "8,16", "train.eval_every=0",
                 "train.save_every=2", *overrides]) == 0
    rows = list(csv.DictReader((tmp_path / "cmp" / "table.csv").open()))
    assert [r["attention"] for r in rows] == ["lavo", "sdpa"] and all(int(float(r["parameters"])) > 0 for r in rows)
    assert rows[1]["faster than softmax from"] == "-" and rows[0]["faster than softmax from"]
    key = json.loads((tmp_path / "cmp" / "efficiency" / "lavo.json").read_text())["key"]
    assert key["pattern"] == ("cross" if "--site" in overrides else "causal") and key["embed_dim"] > 0


@pytest.mark.parametrize("args", [["--collect", "."], ["lm/tiny-lavo"], ["lm/tiny-lavo", "--dry-run"]])
def test_a_study_without_out_is_a_usage_error(args, capsys):
    """Found by the sweep: compare --collect (and a study, and its dry run) without --out died in an AttributeError."""
    from lavo_zoo.cli import main

    assert main(["compare", *args]) == 2
    assert "give --out DIR, the study folder" in capsys.readouterr().err


@pytest.mark.parametrize("args, match", [
    (["--launcher", "local", "--cells-per-gpu", "2", "--device", "cpu"], "--cells-per-gpu 2: the cells run on the CPU"),
    (["--launcher", "slurm"], "--launcher slurm "),  # needs --time (or submitit, or sbatch where they lack)
])
def test_a_dry_run_makes_the_launchers_checks(args, match, tmp_path, capsys):
    """A dry run refuses what the study itself would refuse before its first cell (a dry run of --cells-per-gpu
    on the CPU, or of --launcher slurm without --time, said everything checked out), and says how the cells would
    run."""
    from lavo_zoo.cli import main

    common = ["compare", "recall/tiny-sdpa", "--attentions", "sdpa", "--out", str(tmp_path / "s"), "--dry-run"]
    assert main([*common, *args]) == 2
    assert match in capsys.readouterr().err
    assert main([*common, "--launcher", "local", "--jobs", "1000", "--device", "cpu"]) == 0
    assert "launcher     local: 1 cell(s) at once" in capsys.readouterr().out
    assert not (tmp_path / "s").exists()


def test_no_command_trains_or_writes_into_a_studys_cells(study, tmp_path, capsys):
    """train --out a study's cell (directly or through a link) with --resume auto trained on, its keep_last pruned the
    checkpoint the cell's record scored, and cell.json kept metrics and a sha256 of weights that no longer existed;
    train --out RUN/checkpoints nested a run in a run; compare --out in a study's cells/ nested a study."""
    from lavo_zoo.cli import main
    from tests.compare.helpers import small_study

    out = tmp_path / "cmp"
    small_study(study, out, attentions=("sdpa",), seeds=(1,))
    cell = out / "cells" / "sdpa-seed1"
    (tmp_path / "link").symlink_to(cell)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    for target in (cell, tmp_path / "link", cell / "checkpoints", out / "cells" / "sdpa-seed2"):
        assert main(["train", str(study), "train.max_steps=5", "train.keep_last=1", "--out", str(target),
                     "--resume", "auto", "--device", "cpu"]) == 2
        assert f"is in the cells of the study {out}" in capsys.readouterr().err
    assert main(["train", str(study), "--out", str(cell / "checkpoints"), "--dry-run"]) == 2
    assert main(["compare", str(study), "--attentions", "sdpa", "--out", str(out / "cells" / "nested"),
                 "--device", "cpu", "--no-efficiency"]) == 2
    assert f"is in the cells of the study {out}" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
