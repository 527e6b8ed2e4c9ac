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

    from lavo_zoo.errors import UsageError, ZooError
    from lavo_zoo.options import write_file

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


def test_eval_out_in_a_folder_that_cannot_be_written_is_refused_before_scoring(tmp_path):
    import os

    from lavo_zoo.errors import UsageError
    from lavo_zoo.options import check_writable

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("this user can write anywhere (root): a read-only folder cannot be made here")
        with pytest.raises(UsageError, match="is not writable"):
            check_writable(locked / "sub" / "r.json", overwrite=False)
    finally:
        locked.chmod(0o700)
