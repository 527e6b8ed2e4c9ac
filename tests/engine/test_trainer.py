"""The trainer (engine/trainer.py): a run killed with SIGKILL (mid-step, mid-save) and resumed with --resume auto ends
bit-identical to an uninterrupted run of the same seed; the files a run leaves follow docs/architecture.md."""
import json
import signal

import pytest
import torch
import yaml

from tests.helpers import TOY, run_cli, same_weights

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    result = run_cli("train", TOY, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_run_directory_layout(reference_run):
    out = reference_run
    ck = out / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["best", "last", "step-12", "step-8"]  # keep_last=2
    assert (ck / "last").is_symlink() and (ck / "last").resolve().name == "step-12"
    for name in ("model.safetensors", "config.yaml", "meta.json", "train_state.pt"):
        assert (ck / "step-12" / name).is_file()
    meta = json.loads((ck / "step-12" / "meta.json").read_text())
    assert meta["recipe"] == "toy" and meta["step"] == 12 and len(meta["weights_sha256"]) == 64
    assert {"torch", "lavo_zoo", "python"} <= meta["versions"].keys() and "loss" in meta["metrics"]
    state = torch.load(ck / "step-12" / "train_state.pt", weights_only=True)
    assert state["step"] == 12 and {"optimizer", "scheduler", "rng", "epoch", "offset"} <= state.keys()
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["lr"] == 0.01
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6, 8, 10, 12]
    assert [r["step"] for r in records if r["split"] == "validation"] == [6, 12]
    assert all({"loss", "lr", "time", "epoch"} <= r.keys() for r in records if r["split"] == "train")
    best_val = min((r for r in records if r["split"] == "validation"), key=lambda r: r["loss"])
    best_meta = json.loads((ck / "best" / "meta.json").read_text())
    assert best_meta["step"] == best_val["step"] and best_meta["metrics"]["loss"] == best_val["loss"]


def _kill_then_resume(tmp_path, env):
    out = tmp_path / "run"
    killed = run_cli("train", TOY, "--out", str(out), env=env)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    resumed = run_cli("train", TOY, "--out", str(out), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    return out


def test_sigkill_during_a_step_resumes_to_identical_weights(reference_run, tmp_path):
    # 2 micro-batches per step: batch 19 is the first half of step 10 (checkpoint at step 8).
    out = _kill_then_resume(tmp_path, {"TOY_KILL_AFTER_BATCHES": "19"})
    assert same_weights(out / "checkpoints" / "last", reference_run / "checkpoints" / "last")
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "train"]
    assert steps == [2, 4, 6, 8, 10, 12]  # records after the checkpoint were replayed, not duplicated


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_sigint_or_sigterm_saves_the_step_and_resumes_to_identical_weights(reference_run, tmp_path, name):
    # the 19th loss call (validation's calls count too) falls in step 9; save_every is 4, so only the save on the
    # signal keeps step 9
    out = tmp_path / "run"
    stopped = run_cli("train", TOY, "--out", str(out), env={"TOY_SIGNAL_AFTER_BATCHES": f"19:{name}"})
    assert stopped.returncode == 128 + getattr(signal, name), (stopped.returncode, stopped.stderr)
    assert f"{name}: training stopped at step 9 of 12" in stopped.stderr and "--resume auto" in stopped.stderr
    ck = out / "checkpoints"
    assert (ck / "last").resolve().name == "step-9" and (ck / "step-9" / "train_state.pt").is_file()
    resumed = run_cli("train", TOY, "--out", str(out), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr and "step 9" in resumed.stderr
    assert same_weights(ck / "last", reference_run / "checkpoints" / "last")


def test_sigkill_during_checkpoint_save_keeps_previous_and_resumes(reference_run, tmp_path):
    out = tmp_path / "run"
    killed = run_cli("train", TOY, "--out", str(out), env={"TOY_KILL_IN_SAVE_AT_STEP": "8"})
    assert killed.returncode == -signal.SIGKILL
    ck = out / "checkpoints"
    assert (ck / "last").resolve().name == "step-4" and not (ck / "step-8").exists()
    assert any(p.name.startswith(".tmp-step-8") for p in ck.iterdir())  # the half-written save
    resumed = run_cli("train", TOY, "--out", str(out), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert "step 4" in resumed.stderr
    assert not any(p.name.startswith(".tmp") for p in ck.iterdir())
    assert same_weights(ck / "last", reference_run / "checkpoints" / "last")


def test_resume_refuses_a_different_model_config(reference_run, tmp_path):
    import shutil
    out = tmp_path / "copy"
    shutil.copytree(reference_run, out, symlinks=True)
    result = run_cli("train", TOY, "model.hidden=8", "train.max_steps=14", "--out", str(out), "--resume", "auto")
    assert result.returncode == 2
    assert "model.hidden: 16 -> 8" in result.stderr and "Traceback" not in result.stderr


def test_a_step_that_runs_out_of_memory_says_which_setting_to_lower(tmp_path, monkeypatch, capsys):
    """A first step too large for the machine (its activations, which no check before the run estimates) ended in
    the allocator's raw error; it names the step, the batch and what to lower."""
    import toy_recipe

    from lavo_zoo.cli import main
    from tests.helpers import TOY

    def too_large(self, model, batch):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 79456894976 bytes")

    monkeypatch.setattr(toy_recipe.ToyRecipe, "training_loss", too_large)
    assert main(["train", TOY, "--out", str(tmp_path / "r"), "--max-steps", "2", "train.batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert ("step 1 ran out of memory on cpu ([enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 79456894976 bytes): its batch of 4 examples does not fit") in err
    assert "Lower train.batch_size (train.batch_size=2 train.grad_accum=4 keeps the effective batch of 8)" in err
