"""Full and read-only disks, file systems without hard links: every command that writes says which path and why
(exit 1, or 2 where the user's --out is at fault, checked before the work), and leaves nothing half-written under a
final name, no temporary file, no lock file and no empty folder it created. Disks are simulated by making the
operating-system calls fail (a read-only folder cannot be made with chmod where the tests run as root)."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

import lavo_zoo.atomic
import lavo_zoo.engine.configs
import lavo_zoo.outputs.checks
from lavo_zoo.cli import main
from tests.checkpoints.helpers import make_checkpoint
from tests.helpers import TOY

NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


def _fail(error: OSError):
    def fail(*args, **kwargs):
        raise error
    return fail


def leftovers(folder: Path) -> list[str]:
    """Temporary and lock files anywhere under ``folder``."""
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith((".tmp", ".lock"))
                  or p.name == ".lock")


@pytest.mark.parametrize("error, reason", [
    (OSError(errno.ENOSPC, "No space left on device", "/data/x.bin"),
     "/data/x.bin: the disk is full; free some space, or write elsewhere"),
    (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/x"),
     "/mnt/ro/x: the file system is read-only; write to a folder you can write to"),
])
def test_an_os_error_that_reaches_the_command_line_names_the_file_and_why(monkeypatch, capsys, error, reason):
    monkeypatch.setattr(lavo_zoo.engine.configs, "resolve_config", _fail(error))
    assert main(["train", TOY]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {reason}\n"
    assert main(["--debug", "train", TOY]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_train_on_a_full_disk_leaves_no_config_no_lock_and_no_folder(tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs" / "r"
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", _fail(NO_SPACE))
        assert main(["train", TOY, "--out", str(out), "--max-steps", "1"]) == 1
    err = capsys.readouterr().err
    assert f"could not write {out / 'config.yaml'}: the disk is full" in err and "OSError" not in err
    assert not out.exists() and leftovers(tmp_path) == []
    assert main(["train", TOY, "--out", str(out), "--max-steps", "1"]) == 0  # the rerun is not refused
    assert leftovers(out) == []  # the lock file goes with the run


def test_train_into_a_folder_it_cannot_lock_says_why(tmp_path, monkeypatch, capsys):
    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    out = tmp_path / "r"
    assert main(["train", TOY, "--out", str(out), "--max-steps", "1"]) == 1
    err = capsys.readouterr().err
    assert f"cannot start a run in {out / '.lock'}: the file system is read-only" in err
    assert not out.exists()


def test_a_checkpoint_that_cannot_be_saved_leaves_no_temporary_folder_and_no_lock(tmp_path, monkeypatch, capsys):
    from lavo_zoo.engine import checkpoint_io

    monkeypatch.setattr(checkpoint_io, "save_safetensors_model", _fail(OSError(errno.EDQUOT, "Disk quota exceeded")))
    out = tmp_path / "r"
    assert main(["train", TOY, "--out", str(out), "--max-steps", "1"]) == 1
    err = capsys.readouterr().err
    assert f"could not save checkpoint {out / 'checkpoints'}/" in err and "the disk quota is used up" in err
    assert leftovers(out) == [] and list((out / "checkpoints").iterdir()) == []


@pytest.fixture
def failing_generator(monkeypatch):
    """The built-in time_series generator writes half a file, then the disk is full."""
    from lavo_zoo.engine.recipe import get_recipe

    builtin = type(get_recipe("time_series").builtin)

    def half_then_full(self, out, data):
        (out / "ETTh1.csv").write_text("date,HUFL\n2016-07-01 00:00:00,")
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "ETTh1.csv"))

    monkeypatch.setattr(builtin, "write", half_then_full)


def test_data_on_a_full_disk_names_the_folder_and_leaves_nothing(tmp_path, failing_generator, capsys):
    out = tmp_path / "new" / "data"
    assert main(["data", "time_series", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"could not write the built-in data into {out}: the disk is full" in err and "nothing was written" in err
    assert ".tmp" not in err and not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept")
    assert main(["data", "time_series", "--out", str(mine)]) == 1
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "kept"


def test_data_into_a_read_only_folder_is_refused_before_generating(tmp_path, monkeypatch, capsys):
    real_access = os.access
    monkeypatch.setattr(lavo_zoo.outputs.checks.os, "access", lambda p, mode: False if str(p) == str(tmp_path)
                        else real_access(p, mode))
    monkeypatch.setattr(lavo_zoo.outputs.checks, "_read_only", lambda folder: True)
    assert main(["data", "time_series", "--out", str(tmp_path / "d")]) == 2
    assert f"the folder {tmp_path} is on a read-only file system" in capsys.readouterr().err


def test_writes_work_on_a_file_system_without_hard_links(tmp_path, monkeypatch, capsys):
    """FAT drives and some network shares refuse link(2): a file is then claimed with O_EXCL, still never
    replacing one that exists."""
    monkeypatch.setattr(os, "link", _fail(OSError(errno.EPERM, "Operation not permitted")))
    assert main(["data", "time_series", "--out", str(tmp_path / "d"), "--size", "50"]) == 0
    assert (tmp_path / "d" / "ETTh1.csv").read_text().startswith("date,")
    assert main(["data", "time_series", "--out", str(tmp_path / "d"), "--size", "50"]) == 2
    lavo_zoo.atomic.write_file(tmp_path / "r.json", "{}")
    assert (tmp_path / "r.json").read_text() == "{}" and leftovers(tmp_path) == []


def test_export_on_a_full_disk_leaves_no_archive_and_no_temporary_file(tmp_path, monkeypatch, capsys):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    monkeypatch.setattr(os, "fsync", _fail(NO_SPACE))
    out = tmp_path / "dist" / "x.tar.gz"
    assert main(["export", str(checkpoint), str(out)]) == 1
    err = capsys.readouterr().err
    assert f"could not write {out}: the disk is full" in err and "OSError" not in err
    assert not (tmp_path / "dist").exists()  # nor the folder it created for the archive


def test_export_packs_only_the_checkpoints_own_files(tmp_path, capsys):
    import tarfile

    checkpoint = make_checkpoint(tmp_path / "ckpt")
    (checkpoint / ".lock").write_text("123\n")  # a lock file, the user's notes: not a release's
    (checkpoint / "notes.txt").write_text("private")
    out = tmp_path / "x.tar.gz"
    assert main(["export", str(checkpoint), str(out)]) == 0
    assert "left out of the archive, as not a checkpoint's files: .lock, notes.txt" in capsys.readouterr().err
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["x/README.md", "x/config.yaml", "x/meta.json", "x/model.safetensors"]


def test_a_cache_record_that_cannot_be_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    from lavo_zoo.checkpoints import cache

    (tmp_path / "record.json").write_text('{"kept": true}')
    monkeypatch.setattr(json, "dump", _fail(NO_SPACE))
    with pytest.raises(OSError):
        cache.write_json_atomic(tmp_path / "record.json", {"new": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
    assert json.loads((tmp_path / "record.json").read_text()) == {"kept": True}


@pytest.mark.parametrize("args, said", [
    ("synthesize CKPT --text hi --out x.mp3", "--out x.mp3: this command writes a WAV file, which .mp3 does not name"),
    ("synthesize CKPT --text hi --out x.wav --png x.mp3", "--png x.mp3: .mp3 names no image format"),
    ("export CKPT x.tar.gz --format hf", "OUT x.tar.gz: .tar.gz names a file, but this command writes a transformers"),
    ("export CKPT x.zip", "OUT x.zip: this command writes a checkpoint archive, which .zip does not name"),
    ("answer CKPT --data d.jsonl --out x.csv", "this command writes JSON lines of answers, which .csv does not name"),
    ("recall-plot study --out x.png --table x.json", "--table x.json: this command writes a Markdown table"),
    ("forecast CKPT --csv d.csv --out x.json", "this command writes a forecast CSV, which .json does not name"),
    ("complete CKPT s.pcd --out x.ply", "this command writes a point cloud (.pcd), which .ply does not name"),
    ("summarize CKPT --input d.txt --out x.csv", "--out x.csv: .csv names another format, but this command writes"),
    ("eval CKPT --out x.csv", "this command writes a results JSON, which .csv does not name"),
    ("data time_series --out x.tar.gz", "--out x.tar.gz: .tar.gz names a file, but this command writes a dataset"),
])
def test_an_output_named_for_another_format_is_refused_before_any_work(tmp_path, monkeypatch, capsys, args, said):
    """The suffix names what is written: a command never writes WAV data as x.mp3 or a folder as x.tar.gz."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main([str(checkpoint) if a == "CKPT" else a for a in args.split()]) == 2
    assert said in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before, "nothing is written"
