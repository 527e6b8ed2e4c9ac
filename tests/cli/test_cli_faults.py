"""CLI misuse and damaged files: clear messages, exit codes, nothing lost."""
import re

import pytest

import lavo_zoo.engine.configs
from lavo_zoo.cli import main

TOY = "tests/engine/data/toy.yaml"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished toy run with checkpoints at steps 1 and 2 (both with a training state)."""
    out = tmp_path_factory.mktemp("run") / "r"
    assert main(["train", TOY, "train.max_steps=2", "train.save_every=1", "train.keep_last=0", "train.eval_every=0",
                 "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("value", ["0", "-1"])
def test_eval_max_batches_below_one_is_a_usage_error(run_dir, value, capsys):
    assert main(["eval", str(run_dir / "checkpoints" / "last"), "--max-batches", value]) == 2
    assert "--max-batches" in capsys.readouterr().err


def test_eval_refuses_model_overrides_naming_them(run_dir, capsys):
    assert main(["eval", str(run_dir / "checkpoints" / "last"), "model.hidden=64"]) == 2
    err = capsys.readouterr().err
    assert "model.hidden=64" in err and "fixed by its weights" in err and len(err) < 400
    assert main(["eval", str(run_dir / "checkpoints" / "last"), "--max-batches", "1", "train.batch_size=2"]) == 0


def test_corrupt_train_state_names_the_file_and_the_earlier_checkpoint(run_dir, tmp_path, capsys):
    import shutil
    out = tmp_path / "copy"
    shutil.copytree(run_dir, out, symlinks=True)
    state = out / "checkpoints" / "step-2" / "train_state.pt"
    state.write_bytes(state.read_bytes()[:200])
    assert main(["train", TOY, "train.max_steps=3", "train.save_every=1", "train.keep_last=0", "train.eval_every=0",
                 "--out", str(out), "--resume", "auto"]) == 1
    err = capsys.readouterr().err
    assert "step-2/train_state.pt is corrupt or truncated" in err
    assert f"--resume {out / 'checkpoints' / 'step-1'}" in err
    assert "weights_only" not in err and len(err) < 500
    assert main(["train", TOY, "train.max_steps=3", "train.save_every=1", "train.keep_last=0", "train.eval_every=0",
                 "--out", str(out), "--resume", str(out / "checkpoints" / "step-1")]) == 0
    assert "resumed from" in capsys.readouterr().err


def _raise(exc):
    def fail(*args, **kwargs):
        raise exc
    return fail


def test_ctrl_c_exits_130(monkeypatch, capsys):
    monkeypatch.setattr(lavo_zoo.engine.configs, "resolve_config", _raise(KeyboardInterrupt()))
    assert main(["train", TOY]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_debug_message_does_not_suggest_debug(monkeypatch, capsys):
    monkeypatch.setattr(lavo_zoo.engine.configs, "resolve_config", _raise(RuntimeError("boom")))
    assert main(["train", TOY]) == 1
    assert "run with --debug" in capsys.readouterr().err
    assert main(["--debug", "train", TOY]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err and not re.search("run with --debug", err)


def test_a_checkpoint_config_that_is_not_text_is_called_corrupt(run_dir, tmp_path, capsys):
    import shutil
    ckpt = tmp_path / "ck"
    shutil.copytree(run_dir / "checkpoints" / "step-1", ckpt)
    (ckpt / "config.yaml").write_bytes(b"recipe: toy\n\xff\xfe\n")
    assert main(["eval", str(ckpt), "--max-batches", "1"]) == 1
    err = capsys.readouterr().err
    assert "config.yaml is corrupt: not UTF-8 text (byte 12)" in err and "UnicodeDecodeError" not in err


def test_results_are_written_whole_and_never_over_a_file_that_appeared_meanwhile(tmp_path, monkeypatch):
    """`eval --out` / `score --out` write through a temporary file linked into place: a full disk leaves no
    0-byte file under the final name (so the rerun is not refused), and a file another process wrote meanwhile
    is kept."""
    import errno
    import os

    from lavo_zoo.atomic import write_file
    from lavo_zoo.errors import UsageError, ZooError

    target = tmp_path / "results.json"

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", no_space)
        with pytest.raises(ZooError, match="could not write .*results.json: the disk is full"):
            write_file(target, "{}")
    assert list(tmp_path.iterdir()) == []
    target.write_text("written by the other eval")
    with pytest.raises(UsageError, match="created by someone else"):
        write_file(target, "{}")
    assert target.read_text() == "written by the other eval"
    write_file(target, "{}", overwrite=True)
    assert target.read_text() == "{}"


def test_eval_out_in_a_folder_that_cannot_be_written_is_refused_before_scoring(tmp_path, monkeypatch):
    """A folder of another user (EACCES): access(2) says so, also where this user is root (simulated here)."""
    import os

    import lavo_zoo.outputs.checks
    from lavo_zoo.errors import UsageError
    from lavo_zoo.outputs import check_writable

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(lavo_zoo.outputs.checks.os, "access", lambda p, mode: False if str(p) == str(locked)
                        else real_access(p, mode))
    with pytest.raises(UsageError, match=f"the folder {locked} is not writable"):
        check_writable(locked / "sub" / "r.json", overwrite=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        check_writable(tmp_path / "file" / "r.json", overwrite=False)
    with pytest.raises(UsageError, match="is a folder; give a file name"):
        check_writable(locked, overwrite=True)


# ------------------------------------------------------------------------------------ what train and --dry-run check
def _train(out, *extra):
    return main(["train", TOY, "train.save_every=1", "train.keep_last=0", "train.eval_every=0", "--out", str(out),
                 *extra])


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["train", "dry-run"])
@pytest.mark.parametrize("args, message", [
    (["train.lr=1e400"], "'train.lr' in .* must be a finite number, got inf"),
    (["train.lr=.nan"], "'train.lr' in .* must be a finite number, got nan"),
    (["train.batch_size=41", "train.grad_accum=1"],
     r"train.batch_size=41 x train.grad_accum=1 = 41 examples, but the training split has 40"),
    (["train.batch_size=16", "train.grad_accum=3"], "= 48 examples, but the training split has 40"),
    (["train.max_steps=0"], "'train.max_steps' in .* must be >= 1, got 0"),
    (["--max-steps", "0"], "--max-steps"),
], ids=["lr-inf", "lr-nan", "batch-over-data", "accumulation-over-data", "max-steps-0", "max-steps-flag-0"])
def test_a_run_that_cannot_train_is_refused_before_anything_is_written(tmp_path, capsys, args, message, dry_run):
    out = tmp_path / "run"
    assert _train(out, *args, *dry_run) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["train", "dry-run"])
def test_an_out_on_a_read_only_file_system_is_refused_before_any_work(tmp_path, capsys, monkeypatch, dry_run):
    import os

    import lavo_zoo.outputs.checks

    mount = tmp_path / "mount"
    mount.mkdir()
    real_access = os.access
    monkeypatch.setattr(lavo_zoo.outputs.checks.os, "access",
                        lambda p, mode: False if str(p).startswith(str(mount)) else real_access(p, mode))
    monkeypatch.setattr(lavo_zoo.outputs.checks, "_read_only", lambda folder: str(folder).startswith(str(mount)))
    assert _train(mount / "run", *dry_run) == 2
    err = capsys.readouterr().err
    assert f"--out {mount / 'run'}: the folder {mount} is on a read-only file system" in err
    assert "check out" not in err and list(mount.iterdir()) == []


def test_resuming_beyond_max_steps_is_refused_and_at_max_steps_says_nothing_is_left(run_dir, tmp_path, capsys):
    """run_dir ended at step 2: --max-steps 1 would train nothing (refused), 2 has nothing left (said, exit 0);
    neither changes the run folder, and --dry-run says the same first."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(run_dir, out, symlinks=True)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for dry_run in ([], ["--dry-run"]):
        assert _train(out, "--max-steps", "1", "--resume", "auto", *dry_run) == 2
        err = capsys.readouterr().err
        assert "is at step 2, beyond where this run ends (train.max_steps=1); nothing would be trained" in err
        assert "--max-steps above 2" in err
    assert _train(out, "--max-steps", "2", "--resume", "auto") == 0
    assert "nothing to train:" in capsys.readouterr().err
    assert _train(out, "--max-steps", "2", "--resume", "auto", "--dry-run") == 0
    assert "at step 2; nothing left to train" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert _train(out, "--max-steps", "3", "--resume", "auto") == 0  # and it continues when asked for more
    assert (out / "checkpoints" / "step-3").is_dir()


def test_dry_run_refuses_a_resume_that_train_would_refuse(run_dir, capsys):
    assert _train(run_dir, "--resume", "auto", "--dry-run", "model.hidden=8") == 2
    assert "cannot resume from" in capsys.readouterr().err


def test_a_metrics_line_cut_short_by_a_kill_does_not_stop_the_resume(run_dir, tmp_path, capsys):
    import json
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(run_dir, out, symlinks=True)
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "split": "tr')  # SIGKILL in the middle of an append
    (out / ".metrics.jsonl.12345.tmp").write_text("{}")  # ... or of a rewrite
    assert _train(out, "--max-steps", "3", "--resume", "auto") == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("split") == "train"] == [2, 3]  # logged every 2 steps and at the end
    assert not (out / ".metrics.jsonl.12345.tmp").exists()


@pytest.mark.parametrize("command", [
    ["forecast-plot", "no-such-checkpoint", "--out", "{tmp}/plot.xyz"],
    ["complete", "no-such-checkpoint", "no-such-scan.pcd", "--out", "{tmp}/c.pcd", "--png", "{tmp}/plot.xyz"],
    ["synthesize", "no-such-checkpoint", "--text", "Hello.", "--out", "{tmp}/s.wav", "--png", "{tmp}/plot.xyz"],
], ids=["forecast-plot", "complete", "synthesize"])
def test_a_figure_format_matplotlib_does_not_know_is_refused_before_any_work(tmp_path, capsys, command):
    assert main([part.format(tmp=tmp_path) for part in command]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/plot.xyz: .xyz names no image format; end it in one of" in err and ".png" in err
    assert "no-such" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["train", TOY, "--dry-run"], ["data", "time_series"],
                                     ["eval", "no-such-checkpoint"], ["score", "accuracy", "--pred", "p"]],
                         ids=["train", "data", "eval", "score"])
def test_an_empty_out_is_refused_not_taken_for_the_current_folder(command, capsys):
    assert main([*command, "--out", ""]) == 2
    assert "Invalid value for '--out': is empty" in capsys.readouterr().err


def test_an_out_that_is_a_link_to_nowhere_is_refused_naming_it(tmp_path, capsys):
    from lavo_zoo.errors import UsageError
    from lavo_zoo.outputs import check_writable

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert _train(link, "--dry-run") == 2
    assert f"{link} is a link to {tmp_path / 'nowhere'}, which does not exist" in capsys.readouterr().err
    with pytest.raises(UsageError, match="is a link to .*nowhere, which does not exist"):
        check_writable(link, overwrite=False)
    check_writable(link, overwrite=True)  # replacing the link itself is what --overwrite asks for
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("target, size, message", [
    ("time_series", "100000000000",
     "'builtin_size' in lavo-zoo data time_series/etth1 --size 100000000000 must be >= 1 and <= 2000000"),
    ("lra/image", "300000", "must be >= 1 and <= 200000"),
    ("point_cloud", "20000", "must be >= 1 and <= 10000"),
], ids=["time_series", "lra", "point_cloud"])
def test_a_data_size_beyond_its_range_is_refused_before_generating(tmp_path, capsys, target, size, message):
    assert main(["data", target, "--out", str(tmp_path / "d"), "--size", size]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "d").exists()


@pytest.mark.parametrize("args", [["data", "recall", "--size", "1000000000"],
                                  ["train", "recall/tiny-lavo", "data.seq_len=100000000", "--dry-run"],
                                  ["train", "recall/tiny-lavo", "data.eval_size=1000000000", "--dry-run"]])
def test_generated_data_that_cannot_fit_is_refused_before_generating(tmp_path, capsys, args):
    """--size and data.seq_len multiply the generator's memory: refused with the sizes to lower, not a MemoryError
    (the dry run generates the built-in data too)."""
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "generating the built-in data of recall/mqar needs about" in err and "MemoryError" not in err
    assert "lower --size (data.builtin_size), data.eval_size, data.seq_len or data.num_pairs" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (["train", "point_cloud/tiny-lavo", "data.gt_points=1000000000"], ("generating the built-in data of "
     "point_cloud/shapes needs about 100 GB of memory")),
    (["train", "lra/tiny-listops-lavo", "data.max_length=1000000000"], "training this model (64,000,"),
    (["train", "lm/tiny-lavo", "model.embed_dim=65536", "model.ffn_dim=262144"], "training this model (")])
def test_a_model_or_data_that_cannot_fit_is_refused_before_it_is_built(tmp_path, capsys, args, message):
    """Sizes that multiply memory (points per cloud, a position table, the width) are estimated before the work:
    the model is counted on the meta device, the data by its generator's footprint; never an allocator error."""
    assert main([*args, "--out", str(tmp_path / "run"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "RuntimeError" not in err and "MemoryError" not in err, err


def test_a_built_in_table_running_past_the_last_date_pandas_holds_is_refused(capsys):
    assert main(["train", "time_series/tiny-lavo", "data.freq=D", "data.builtin_size=1000000", "--dry-run"]) == 2
    assert "run past the year 2262" in capsys.readouterr().err


def test_no_output_replaces_a_checkpoints_own_files_even_with_overwrite(run_dir, tmp_path, capsys):
    import shutil

    ckpt = tmp_path / "ck"
    shutil.copytree(run_dir / "checkpoints" / "step-2", ckpt)
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    for name in ("config.yaml", "meta.json", "model.safetensors"):
        assert main(["eval", str(ckpt), "--out", str(ckpt / name), "--overwrite"]) == 2
        assert "is a file of the checkpoint in" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before
    assert main(["eval", str(ckpt), "--out", str(ckpt / "results.json")]) == 0  # a file of its own is fine


def test_a_run_directory_given_as_a_checkpoint_names_its_checkpoints(run_dir, tmp_path, capsys):
    for command in (["eval", str(run_dir)], ["export", str(run_dir), str(tmp_path / "x.tar.gz")]):
        assert main(command) == 2
        assert f"{run_dir} is a run directory, not a checkpoint; give one of its checkpoints, e.g. " \
               f"{run_dir / 'checkpoints' / 'step-2'}" in capsys.readouterr().err


def test_resuming_a_checkpoint_of_another_recipe_says_so_first(run_dir, tmp_path, capsys):
    assert main(["train", "time_series/tiny-lavo", "--out", str(tmp_path / "r"), "--dry-run",
                 "--resume", str(run_dir / "checkpoints" / "step-2")]) == 2
    assert "it is a checkpoint of recipe 'toy', and this run trains 'time_series'" in capsys.readouterr().err


def test_an_output_never_replaces_an_input_of_the_same_command(run_dir, tmp_path, capsys):
    import shutil

    pred, ref = tmp_path / "pred.txt", tmp_path / "ref.txt"
    pred.write_text("1\n0\n")
    ref.write_text("1\n1\n")
    for out, name in ((pred, "--pred"), (ref, "--ref")):
        assert main(["score", "accuracy", "--pred", str(pred), "--ref", str(ref), "--out", str(out),
                     "--overwrite"]) == 2
        assert f"--out {out} is the {name} this command reads" in capsys.readouterr().err
    assert (pred.read_text(), ref.read_text()) == ("1\n0\n", "1\n1\n")
    archive = tmp_path / "ck.tar.gz"
    shutil.make_archive(str(archive).removesuffix(".tar.gz"), "gztar", run_dir / "checkpoints", "step-2")
    packed = archive.read_bytes()
    assert main(["eval", str(archive), "--out", str(archive), "--overwrite"]) == 2
    assert "is the CHECKPOINT this command reads" in capsys.readouterr().err and archive.read_bytes() == packed


@pytest.mark.parametrize("command, name", [
    (["forecast", "no-such-checkpoint", "--csv", "{input}", "--out", "{input}", "--overwrite"], "--csv"),
    (["complete", "no-such-checkpoint", "{input}", "--out", "{input}", "--overwrite"], "INPUT_PCD"),
], ids=["forecast", "complete"])
def test_a_recipe_command_never_writes_over_its_input(tmp_path, capsys, command, name):
    given = tmp_path / "input"
    given.write_text("the user's data")
    assert main([part.format(input=given) for part in command]) == 2
    assert f"is the {name} this command reads" in capsys.readouterr().err and given.read_text() == "the user's data"


def test_the_index_entry_cites_the_command_that_reproduces_its_metrics(run_dir, tmp_path, capsys):
    """export's entry repeats the overrides and --max-batches the results were measured with; running its command
    (on the same weights) gives the same metrics. A metric edited by hand afterwards is refused (the results' pin)."""
    import json
    import shlex

    import yaml

    last = str(run_dir / "checkpoints" / "last")
    results = tmp_path / "r.json"
    assert main(["eval", last, "train.batch_size=3", "--max-batches", "2", "--out", str(results)]) == 0
    assert main(["export", last, str(tmp_path / "x.tar.gz"), "--results", str(results)]) == 0
    entry = yaml.safe_load(capsys.readouterr().out.split("published):")[1])[0]
    assert entry["command"] == "lavo-zoo eval toy/x@v1 train.batch_size=3 --split test --max-batches 2"
    words = shlex.split(entry["command"])
    again = tmp_path / "again.json"
    assert main([words[1], last, *words[3:], "--out", str(again)]) == 0
    plain = tmp_path / "plain.json"  # what the entry cited before: the default settings measure something else
    assert main(["eval", last, "--split", "test", "--out", str(plain)]) == 0
    measured, default = ({k: v["value"] for k, v in json.loads(f.read_text())["metrics"].items()}
                         for f in (again, plain))
    assert measured == entry["metrics"] != default
    data = json.loads(results.read_text())
    name = next(iter(data["metrics"]))
    data["metrics"][name]["value"] *= 0.5
    results.write_text(json.dumps(data, indent=2))
    capsys.readouterr()
    assert main(["export", last, str(tmp_path / "y.tar.gz"), "--results", str(results)]) == 2
    assert "has changed since lavo-zoo eval wrote it" in capsys.readouterr().err
    assert not (tmp_path / "y.tar.gz").exists()


def test_eval_of_weights_that_are_not_finite_fails_before_scoring(run_dir, tmp_path, capsys):
    """A model whose weights hold NaN is refused (exit 1, naming the tensors), not scored to `nan` with exit 0."""
    import torch

    from lavo_zoo.engine.checkpoint_io import read_config, save_checkpoint

    recipe, cfg = read_config(run_dir / "checkpoints" / "last")
    model = recipe.build_model(cfg)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    bad = save_checkpoint(tmp_path / "checkpoints", 1, model, cfg, recipe.name)
    assert main(["eval", str(bad), "--out", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert "hold NaN or infinite values" in err and "Traceback" not in err and not (tmp_path / "r.json").exists()


def test_a_malformed_validation_split_is_an_error_and_only_a_missing_one_turns_validation_off(tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["data", "recall", "--out", str(data), "--size", "64"]) == 0  # Zoology's settings: the defaults
    train = ["train", "recall/tiny-lavo", f"data.path={data}", "data.vocab_size=8192", "data.seq_len=64",
             "data.min_distance=1", "--out", str(tmp_path / "run"), "--dry-run"]
    lines = (data / "validation.jsonl").read_text().splitlines()
    (data / "validation.jsonl").write_text("\n".join([lines[0], lines[1][:40], *lines[2:]]) + "\n")
    capsys.readouterr()
    assert main(train) == 1
    assert f"{data / 'validation.jsonl'}, line 2" in capsys.readouterr().err
    (data / "validation.jsonl").unlink()
    assert main(train) == 0
    assert "no validation split (recall split 'validation' is missing" in capsys.readouterr().out


def test_messages_name_what_is_there_not_a_missing_file(run_dir, tmp_path, capsys):
    """A folder where a file belongs is 'a folder', not 'missing'; a folder of nothing is 'not a checkpoint'; a run's
    checkpoints/ names its checkpoints; another library's config.json is called that, not 'config.yaml is missing'."""
    import shutil

    ckpt = tmp_path / "ck"
    shutil.copytree(run_dir / "checkpoints" / "step-2", ckpt)
    (ckpt / "model.safetensors").unlink()
    (ckpt / "model.safetensors").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "config.json").write_text('{"model_type": "gpt2"}')
    empty, checkpoints = tmp_path / "empty", run_dir / "checkpoints"
    for target, message in [
            (ckpt, f"checkpoint {ckpt} is incomplete: model.safetensors is a folder, not a file"),
            (empty, f"{empty} is not a checkpoint: it holds none of model.safetensors, config.yaml and meta.json"),
            (checkpoints, f"{checkpoints} is a folder of checkpoints (last, step-1, step-2), not one; give one"),
            (tmp_path / "foreign", "holds a config.json that names no lavo-zoo model (no lavo_zoo.recipe)")]:
        assert main(["eval", str(target)]) in (1, 2)
        err = capsys.readouterr().err
        assert message in err and "is missing" not in err, err


def test_a_run_with_only_its_best_checkpoint_is_loaded_and_named(run_dir, tmp_path, capsys):
    """README: lavo_zoo.load(RUN) takes the run's newest complete checkpoint, else its best; eval RUN names it."""
    import shutil

    from lavo_zoo.checkpoints.load import checkpoint_dir

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(run_dir / "checkpoints" / "step-2", run / "checkpoints" / "best")
    assert checkpoint_dir(run) == run / "checkpoints" / "best"  # what lavo_zoo.load(run) loads
    assert main(["eval", str(run)]) == 2
    assert f"give one of its checkpoints, e.g. {run / 'checkpoints' / 'best'}" in capsys.readouterr().err


@pytest.mark.parametrize("config", ["lm/tiny-lavo", "time_series/tiny-lavo", "point_cloud/tiny-lavo"])
def test_a_data_path_that_does_not_exist_is_a_usage_error_in_every_recipe(config, tmp_path, capsys):
    """An input that is not there exits 2, as a missing --pred or --csv does (one exit-code table)."""
    missing = tmp_path / "no-such-data"
    assert main(["train", config, f"data.path={missing}", "--out", str(tmp_path / "run"), "--dry-run"]) == 2
    assert f"data.path {missing} does not exist" in capsys.readouterr().err
