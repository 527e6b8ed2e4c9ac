"""A run directory is never clobbered, a resumed run uses (and records) what it runs with, and a NaN stop names only
a checkpoint that can be trusted."""
import json
import re
import signal

import pytest
import torch
import yaml
from safetensors.torch import load_file

from lavo_zoo.cli import main
from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.engine.optim import apply_schedule, build_optimizer, build_scheduler, lr_factor
from lavo_zoo.engine.run_dir import resume_changes
from tests.helpers import TOY, run_cli

QUIET = ["train.eval_every=0", "train.log_every=1"]


def _records(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_rerun_without_resume_never_touches_a_run_killed_after_its_best_checkpoint(tmp_path, capsys):
    out = tmp_path / "r"
    # validation (and checkpoints/best) at steps 2 and 4, no step-N checkpoint before 100; killed in step 6
    killed = run_cli("train", TOY, "--out", str(out), "train.max_steps=100", "train.save_every=100",
                     "train.eval_every=2", env={"TOY_KILL_AFTER_BATCHES": "11"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    best = (out / "checkpoints" / "best" / "model.safetensors").read_bytes()
    metrics = (out / "metrics.jsonl").read_text()
    for resume in ([], ["--resume", "auto"]):
        assert main(["train", TOY, "--out", str(out), "--max-steps", "2", *resume]) == 2
        err = capsys.readouterr().err
        assert "checkpoints/best" in err and "another --out" in err and "Traceback" not in err
        if not resume:
            assert "config.yaml, metrics.jsonl" in err and "--resume auto" in err
        else:  # says what the weights-only checkpoint is good for
            assert "cannot be continued" in err and f"lavo-zoo eval {out / 'checkpoints' / 'best'}" in err
        assert (out / "checkpoints" / "best" / "model.safetensors").read_bytes() == best
        assert (out / "metrics.jsonl").read_text() == metrics


def test_leftover_run_files_without_checkpoints_are_refused_but_resume_auto_starts_afresh(tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "config.yaml").write_text("recipe: toy\n")
    (out / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 1.0}\n')
    assert main(["train", TOY, "--out", str(out), "--max-steps", "2", *QUIET]) == 2
    err = capsys.readouterr().err
    assert re.search(r"already holds a run \(config.yaml, metrics.jsonl\)", err)
    assert "--resume auto" in err and "another --out" in err
    assert main(["train", TOY, "--out", str(out), "--max-steps", "2", *QUIET, "--resume", "auto"]) == 0
    assert [r["step"] for r in _records(out)] == [1, 2]  # the stale record was dropped, not kept beside new ones
    (tmp_path / "empty").mkdir()
    assert main(["train", TOY, "--out", str(tmp_path / "empty"), "--max-steps", "1", *QUIET]) == 0


@pytest.fixture
def four_steps(tmp_path):
    out = tmp_path / "r"
    assert main(["train", TOY, "--out", str(out), "--max-steps", "4", "train.save_every=4", *QUIET]) == 0
    return out


def test_resume_applies_a_changed_lr_and_logs_the_change(four_steps):
    out = four_steps
    assert main(["train", TOY, "--out", str(out), "--max-steps", "8", "train.lr=1e-5", *QUIET,
                 "--resume", "auto"]) == 0
    _, cfg = resolve_config(TOY, ["train.max_steps=8", "train.lr=1e-5", *QUIET])
    factor = lr_factor(cfg.train, steps_per_epoch=40 // 4 // 2)
    records = _records(out)
    lrs = {r["step"]: r["lr"] for r in records if r["split"] == "train"}
    for step in (5, 6, 7, 8):  # the logged lr is the one set after the step's update: lr * factor(step)
        assert lrs[step] == pytest.approx(1e-5 * factor(step), rel=1e-12)
    change = [r for r in records if r["split"] == "resume"]
    assert len(change) == 1 and change[0]["step"] == 4
    assert change[0]["changed"]["train.lr"] == {"from": 0.01, "to": 1e-5}
    assert change[0]["changed"]["train.max_steps"] == {"from": 4, "to": 8}
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["lr"] == 1e-5
    state = torch.load(out / "checkpoints" / "step-8" / "train_state.pt", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-5 * factor(8), rel=1e-12)


def test_resume_refuses_other_changes_with_the_diff_and_keeps_the_record(four_steps, capsys):
    out = four_steps
    before = (out / "config.yaml").read_text()
    assert main(["train", TOY, "--out", str(out), "--max-steps", "8", "train.batch_size=8", "train.seed=3",
                 *QUIET, "--resume", "auto"]) == 2
    err = capsys.readouterr().err
    assert "train.batch_size: 4 -> 8" in err and "train.seed: 1 -> 3" in err and "Traceback" not in err
    assert (out / "config.yaml").read_text() == before


def test_resume_changes_policy_table():
    _, saved = resolve_config(TOY)
    _, same = resolve_config(TOY)
    assert resume_changes(saved, same, "ck") == {}
    _, now = resolve_config(TOY, ["train.eval_every=3", "train.clip_grad_norm=0.5"])
    assert resume_changes(saved, now, "ck") == {"train.clip_grad_norm": {"from": 1.0, "to": 0.5},
                                                "train.eval_every": {"from": 6, "to": 3}}
    for fixed in ("model.hidden=8", "data.num_samples=50", "train.optimizer=adam", "train.grad_accum=1"):
        _, now = resolve_config(TOY, [fixed])
        with pytest.raises(Exception, match=re.escape(fixed.split("=")[0])):
            resume_changes(saved, now, "ck")


def test_apply_schedule_is_exact_for_unchanged_settings():
    _, cfg = resolve_config(TOY)
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(model, cfg.train)
    sched = build_scheduler(opt, cfg.train, 5)
    for _ in range(5):
        opt.step()
        sched.step()
    opt2 = build_optimizer(model, cfg.train)
    sched2 = build_scheduler(opt2, cfg.train, 5)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    apply_schedule(opt2, sched2, cfg.train)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]


def test_nan_stop_does_not_call_the_checkpoint_that_produced_it_good(tmp_path, capsys):
    out = tmp_path / "r"
    args = ["train", TOY, "--out", str(out), "--max-steps", "6", "train.save_every=1", "train.lr=1e30",
            "train.clip_grad_norm=0", "train.keep_last=0", *QUIET]
    assert main(args) == 1
    err = capsys.readouterr().err
    failed = int(re.search(r"training loss is \S+ at step (\d+)", err).group(1))
    assert failed >= 2 and (out / "checkpoints" / f"step-{failed - 1}").is_dir()
    assert "Last good checkpoint: none" in err


def test_nan_stop_names_the_newest_checkpoint_before_the_one_that_produced_it(tmp_path, capsys):
    out = tmp_path / "r"
    # the last sample is NaN: the first batch holding it comes a few steps in
    args = ["train", TOY, "--out", str(out), "--max-steps", "10", "train.save_every=1", "train.keep_last=0",
            "data.nan_after=39", *QUIET]
    assert main(args) == 1
    err = capsys.readouterr().err
    failed = int(re.search(r"training loss is \S+ at step (\d+)", err).group(1))
    assert failed >= 3, err  # a precondition of this set-up
    good = out / "checkpoints" / f"step-{failed - 2}"
    assert f"Last good checkpoint: {good}" in err
    assert all(torch.isfinite(t).all() for t in load_file(str(good / "model.safetensors")).values())


def test_a_run_directory_is_held_by_one_process_and_a_killed_holder_frees_it(tmp_path):
    """A second `train` into the same --out is refused naming the holder's pid; the OS lock of a killed process goes
    with it, so the next --resume auto takes the directory over."""
    import signal
    import subprocess
    import sys
    import time

    from lavo_zoo.engine.run_dir import RunLock
    from lavo_zoo.errors import UsageError

    out = tmp_path / "run"
    code = ("import time; from lavo_zoo.engine.run_dir import RunLock; "
            f"RunLock({str(out)!r}).acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=rf"in use: another process \(pid {holder.pid}\) is training into it"):
            RunLock(out).acquire()
        result = run_cli("train", TOY, "--out", str(out), "--max-steps", "1")
        assert result.returncode == 2 and f"pid {holder.pid}" in result.stderr
        assert not (out / "metrics.jsonl").exists()  # the refused run wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    time.sleep(0.1)
    lock = RunLock(out).acquire()  # the killed holder's lock went with it
    lock.release()
    assert run_cli("train", TOY, "--out", str(out), "--max-steps", "1", "--resume", "auto").returncode == 0


def test_recovery_puts_back_a_step_swapped_out_and_removes_temporary_files(tmp_path):
    from lavo_zoo.engine.run_dir import recover_run_dir

    checkpoints = tmp_path / "checkpoints"
    (checkpoints / ".old-step-4-123").mkdir(parents=True)  # killed between the two renames of a re-save of step-4
    (checkpoints / ".old-step-4-123" / "meta.json").write_text("{}")
    (checkpoints / ".tmp-step-4-123").mkdir()  # ... whose new copy was never moved in
    (checkpoints / ".last.123.tmp").symlink_to("step-4")
    (tmp_path / ".metrics.jsonl.123.tmp").write_text("{}")
    (tmp_path / "config.yaml").write_text("recipe: toy\n")
    recover_run_dir(tmp_path)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-4"]
    assert (checkpoints / "step-4" / "meta.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "config.yaml"]


def test_a_resume_refusal_shows_an_option_left_out_at_its_default():
    """The refusal showed 'None -> 16' for an attention option left out (LAVO's num_bases, whose default the layer
    works out: min(64, head dim)); an option given at its default is the same run as one left out."""
    _, saved = resolve_config("lm/tiny-lavo", ["model.attention.window_size=4"])
    saved.model.attention.options.pop("num_bases")
    saved.model.attention.options.pop("window_size")  # left out: 16, its default
    _, now = resolve_config("lm/tiny-lavo", ["model.attention.num_bases=16", "model.attention.window_size=8"])
    with pytest.raises(Exception, match=r"model.attention.num_bases: its default -> 16; "
                                        r"model.attention.window_size: 16 \(its default\) -> 8\."):
        resume_changes(saved, now, "ck")
    _, explicit = resolve_config("lm/tiny-lavo", ["model.attention.num_bases=null", "model.attention.window_size=16"])
    assert resume_changes(saved, explicit, "ck") == {}
