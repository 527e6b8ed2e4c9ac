"""The study runner: every (attention, seed) cell trained with the same budget, an interrupted study continues
(finished cells are kept, the killed one resumes), a cell is reused only with the same config, bad selections are
refused before anything trains."""
from __future__ import annotations

import csv
import json
import statistics

import pytest
import yaml

from lavo_zoo.compare import CellRecord, run_study, write_table
from tests.compare.helpers import Killed, SeqRecipe, a_study, small_study


def test_interrupted_study_keeps_finished_cells_and_resumes_the_killed_one(study, tmp_path):
    out = tmp_path / "cmp"
    SeqRecipe.fail_at_call = 3 + 3 + 2  # two cells finish (3 steps each), the third dies in its second step
    with pytest.raises(Killed):
        small_study(study, out)
    finished = sorted(p.parent.name for p in (out / "cells").glob("*/cell.json"))
    assert finished == ["sdpa-seed1", "sdpa-seed2"]
    kept = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("sdpa-*/metrics.jsonl")}
    assert (out / "cells" / "local-seed1" / "checkpoints" / "step-1").is_dir()  # the killed cell saved step 1
    SeqRecipe.fail_at_call, SeqRecipe.calls = 0, 0
    records = small_study(study, out)
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # finished cells were not retrained
    assert SeqRecipe.calls == 2 + 3  # the killed cell resumed at step 2; the last cell trained from scratch
    assert [(r.attention, r.seed) for r in records] == [("sdpa", 1), ("sdpa", 2), ("local", 1), ("local", 2)]
    for r in records:
        assert r.parameters > 0 and r.train_time_s > 0 and r.step_time_s > 0 and r.step_memory_bytes >= 0
        saved = json.loads((out / "cells" / f"{r.attention}-seed{r.seed}" / "results.json").read_text())
        assert saved["config"]["model"]["attention"]["name"] == r.attention
        assert saved["config"]["train"]["seed"] == r.seed
    # the resumed cell ends where an uninterrupted run of the same cell ends
    fresh = small_study(study, tmp_path / "fresh")
    by_cell = {(r.attention, r.seed): r.metrics["loss"]["value"] for r in fresh}
    for r in records:
        assert r.metrics["loss"]["value"] == by_cell[(r.attention, r.seed)]

    paths = write_table(records, out, "test study")
    assert [p.name for p in paths] == ["table.md", "table.csv", "chart.png"] and all(p.stat().st_size for p in paths)
    rows = {row["attention"]: row for row in csv.DictReader((out / "table.csv").open())}
    for name in ("sdpa", "local"):
        losses = [r.metrics["loss"]["value"] for r in records if r.attention == name]
        assert float(rows[name]["loss_mean"]) == pytest.approx(statistics.fmean(losses))
        assert float(rows[name]["loss_std"]) == pytest.approx(statistics.stdev(losses))
    best = min(rows, key=lambda n: float(rows[n]["loss_mean"]))
    best_line = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith(f"| {best} "))
    assert "**" in best_line  # lower loss is better: the lower mean is marked


def test_refusals(study, tmp_path):
    from lavo_zoo.errors import ConfigError, UsageError
    with pytest.raises(UsageError, match="not sites"):
        run_study(a_study(study, tmp_path / "x", ["sdpa"], [1], site="encoder_self"))
    with pytest.raises(UsageError, match="-o names performer"):
        run_study(a_study(study, tmp_path / "x", ["sdpa"], [1], options={"performer": {"num_features": 4}}))
    with pytest.raises((UsageError, ConfigError)):  # an unknown attention is refused before anything trains
        run_study(a_study(study, tmp_path / "y", ["sdpa", "nosuch"], [1]))
    assert not (tmp_path / "y" / "cells").exists()


def test_repeated_runs_of_the_configs_own_attention(study, tmp_path):
    """Without --attentions: one row, the config's attention, over the seeds (Informer's --itr): mean and spread of
    each metric; more seeds later keep the finished ones."""
    out = tmp_path / "rep"
    records = run_study(a_study(study, out, [], [1, 2]))
    assert [(r.attention, r.seed) for r in records] == [("sdpa", 1), ("sdpa", 2)]
    kept = (out / "cells" / "sdpa-seed1" / "cell.json").read_text()
    run_study(a_study(study, out, [], [1, 2, 3]))
    assert (out / "cells" / "sdpa-seed1" / "cell.json").read_text() == kept
    write_table([CellRecord.from_json(json.loads(p.read_text())) for p in sorted(out.rglob("cell.json"))], out,
                "repeats")
    rows = list(csv.DictReader((out / "table.csv").open()))
    values = [json.loads(p.read_text())["metrics"]["loss"]["value"] for p in sorted(out.rglob("cell.json"))]
    assert len(rows) == 1 and rows[0]["seeds"] == "3"
    assert float(rows[0]["loss_mean"]) == pytest.approx(statistics.fmean(values))
    assert float(rows[0]["loss_std"]) == pytest.approx(statistics.stdev(values))


def test_a_cell_trained_with_another_config_is_refused_or_rerun(study, tmp_path):
    from lavo_zoo.errors import UsageError

    out = tmp_path / "cmp"
    run_study(a_study(study, out, ["sdpa"], [1], overrides=["train.max_steps=2"]))
    first = (out / "cells" / "sdpa-seed1" / "cell.json").read_text()
    with pytest.raises(UsageError, match=r"train\.max_steps: 2 there, 3 now.*--rerun"):
        run_study(a_study(study, out, ["sdpa"], [1], overrides=["train.max_steps=3"]))
    assert (out / "cells" / "sdpa-seed1" / "cell.json").read_text() == first  # nothing lost
    (record,) = run_study(a_study(study, out, ["sdpa"], [1], overrides=["train.max_steps=3"], rerun=True))
    steps = [json.loads(line)["step"] for line in (out / "cells" / "sdpa-seed1" / "metrics.jsonl").read_text()
             .splitlines() if json.loads(line).get("split") == "train"]
    assert max(steps) == 3 and record.overrides[-1] == "train.seed=1"


def test_a_seed_or_an_attention_given_twice_is_refused(study, tmp_path, capsys):
    """A run counts once: --seeds 1,1,1 would be one run counted three times (a spread of 0, a verdict from one run)."""
    from lavo_zoo.cli import main
    from lavo_zoo.errors import UsageError

    with pytest.raises(UsageError, match="--seeds lists the seed 1 more than once.*a run counts once"):
        run_study(a_study(study, tmp_path / "x", ["sdpa"], [1, 1, 1]))
    with pytest.raises(UsageError, match="--attentions lists the attention sdpa more than once"):
        run_study(a_study(study, tmp_path / "x", ["sdpa", "local", "sdpa"], [1]))
    assert main(["compare", str(study), "--seeds", "2,1,2", "--out", str(tmp_path / "y"), "--device", "cpu"]) == 2
    assert "--seeds lists the seed 2 more than once" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()  # refused before anything trained


def test_a_cell_another_process_works_on_is_not_removed_by_rerun(study, tmp_path):
    import subprocess
    import sys

    from lavo_zoo.errors import UsageError

    out = tmp_path / "cmp"
    run_study(a_study(study, out, ["sdpa"], [1], overrides=["train.max_steps=2"]))
    cell = out / "cells" / "sdpa-seed1"
    hold = ("import sys, time; from lavo_zoo.compare.locks import FolderLock; FolderLock(sys.argv[1]).__enter__(); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(cell / ".cell.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UsageError, match=rf"--rerun: .*sdpa-seed1 is being worked on by pid {holder.pid} on"):
            run_study(a_study(study, out, ["sdpa"], [1], overrides=["train.max_steps=3"], rerun=True))
        assert (cell / "cell.json").is_file()  # nothing removed
    finally:
        holder.kill()
        holder.wait()


def test_attention_options_are_read_as_the_config_overrides():
    """compare's -o reads its values as a config override does (1e-5 a number, not the string YAML 1.1 makes of
    it), refuses a value that is not YAML with the item named (a raw YAML error before) and an option given twice
    (the last one won silently)."""
    from lavo_zoo.compare.study import parse_options
    from lavo_zoo.errors import UsageError

    assert parse_options(("mamba2.norm_eps=1e-5", "lavo.num_bases=8", "lavo.window_size=4")) == {
        "mamba2": {"norm_eps": 1e-5}, "lavo": {"num_bases": 8, "window_size": 4}}
    with pytest.raises(UsageError, match=r"-o gla.conv_size=\[: .*not valid YAML"):
        parse_options(("gla.conv_size=[",))
    with pytest.raises(UsageError, match="based.feature_dim is given twice"):
        parse_options(("based.feature_dim=4", "based.feature_dim=8"))


@pytest.mark.parametrize("damage", ["{broken", "[1, 2]", '{"attention": "sdpa"}', b"\xff\xfe"])
def test_a_damaged_cell_record_is_named_not_a_raw_error(study, tmp_path, damage):
    """A finished cell's cell.json edited or damaged since (not JSON, not a mapping, not a record, not UTF-8) is a
    usage error naming the file and how to train the cell again; it was a raw JSONDecodeError."""
    from lavo_zoo.errors import UsageError

    out = tmp_path / "cmp"
    small_study(study, out, attentions=("sdpa",), seeds=(1,))
    record = out / "cells" / "sdpa-seed1" / "cell.json"
    record.write_bytes(damage if isinstance(damage, bytes) else damage.encode())
    with pytest.raises(UsageError, match=r"cell.json(, line \d+, column \d+)?: the record of a finished cell cannot "
                                         r"be read .* remove it"):
        small_study(study, out, attentions=("sdpa",), seeds=(1,))
    record.unlink()
    assert [r.attention for r in small_study(study, out, attentions=("sdpa",), seeds=(1,))] == ["sdpa"]


def test_a_copied_cell_record_counts_once_as_collect_counts_it(study, tmp_path, capsys):
    """One identity rule for every table: a cell.json copied into another cell's folder was counted by the study's
    own table as that cell (one run shown as two seeds) while --collect counted it once."""
    from lavo_zoo.compare import collect
    from lavo_zoo.errors import UsageError

    out = tmp_path / "cmp"
    small_study(study, out, attentions=("sdpa",), seeds=(1, 2))
    first, second = (out / "cells" / f"sdpa-seed{s}" / "cell.json" for s in (1, 2))
    second.write_text(first.read_text())
    with pytest.raises(UsageError, match=r"sdpa-seed2/cell.json is the record of sdpa seed 1, not of this cell "
                                         r"\(sdpa seed 2\).*Remove it"):
        small_study(study, out, attentions=("sdpa",), seeds=(1, 2))
    copy = json.loads(first.read_text())
    second.write_text(json.dumps({**copy, "seed": 2}))  # the copy edited to look like the cell: the same weights
    capsys.readouterr()
    records = small_study(study, out, attentions=("sdpa",), seeds=(1, 2))
    assert [(r.attention, r.seed) for r in records] == [("sdpa", 1)]
    said = capsys.readouterr().err
    assert "sdpa-seed2/cell.json holds the same run as" in said and "remove it, or the cell's folder" in said
    assert len(collect([out])) == len(records)  # the same count --collect gives


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_option_a_later_cells_model_refuses_stops_the_study_before_any_trains(study, tmp_path, dry_run, capsys):
    """Every cell's config is checked before the first trains, its option ranges too: the earlier cells trained
    first and the dry run passed the cells before the refused one, whose error named no config key or file."""
    from lavo_zoo.errors import OptionError

    out = tmp_path / "cmp"
    with pytest.raises(OptionError, match=rf"config key 'model.attention' in {study}.* attention 'lavo': num_bases "
                                          r"\(64\) must be between 1 and the head dim 4"):
        run_study(a_study(study, out, ["sdpa", "lavo"], [1, 2], options={"lavo": {"num_bases": 64}}, dry_run=dry_run))
    assert not out.exists() and "check out" not in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_cells_place_that_is_not_a_folder_is_refused_before_any_cell_trains(study, tmp_path, kind):
    """Found by the sweep: a file where a later cell's folder goes let the earlier cells train, then stopped with
    'cannot lock ...: it already exists' (and the dry run said the cell would train)."""
    from lavo_zoo.errors import UsageError

    out = tmp_path / "cmp"
    place = out / "cells" / "sdpa-seed2"
    place.parent.mkdir(parents=True)
    place.write_text("x") if kind == "file" else place.symlink_to(tmp_path / "nothing")
    for dry_run in (True, False):
        with pytest.raises(UsageError, match=f"sdpa-seed2 is a {'file' if kind == 'file' else 'link to nothing'}, "
                                             "where the study keeps the folder of its cell sdpa-seed2"):
            small_study(study, out, attentions=("sdpa",), seeds=(1, 2), dry_run=dry_run)
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["sdpa-seed2"]  # sdpa-seed1 did not train


def test_a_study_reads_its_config_once(study, tmp_path, monkeypatch):
    """The config is read once, when the study is built: every cell trains that reading, validated with its
    overrides (the file was read again per cell and once more in each cell's process, so a config edited while a
    study ran trained its later cells otherwise); its launcher: section is compare's, in no cell's config."""
    from lavo_zoo.engine import configs

    study.write_text(study.read_text() + "launcher: {name: serial}\n")
    reads = []
    real = configs.read_layers
    monkeypatch.setattr(configs, "read_layers", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    built = a_study(study, tmp_path / "cmp", ["sdpa"], [1, 2])
    assert built.config.sections == {"launcher": {"name": "serial"}} and "launcher" not in built.config.data
    study.write_text(study.read_text().replace("max_steps: 3", "max_steps: 1"))  # edited once the study read it
    records = run_study(built)
    assert reads == [study]  # once
    for r in records:
        cell = tmp_path / "cmp" / "cells" / f"sdpa-seed{r.seed}"
        steps = [json.loads(line)["step"] for line in (cell / "metrics.jsonl").read_text().splitlines()
                 if json.loads(line).get("split") == "train"]
        saved = yaml.safe_load((cell / "config.yaml").read_text())
        assert max(steps) == 3 and saved["train"]["max_steps"] == 3 and "launcher" not in saved
