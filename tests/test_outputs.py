"""The output policy (lavo_zoo.outputs), the one rule every writing command goes through: never an input, a checkpoint
or a training run; the suffix names what is written; ``--overwrite`` replaces only what such a command wrote before
(a file of the same kind by its content, a folder by its manifest); one writer at a time; all the outputs or none, with
the message every command gives; the permissions the umask gives."""
from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from lavo_zoo.errors import UsageError, ZooError
from lavo_zoo.outputs import (
    EVAL_FILES,
    FIGURE,
    HF_FOLDER,
    RESULTS,
    STUDY_FOLDER,
    TEXT,
    WAV,
    Outputs,
    check_folder_output,
    check_recorded,
    check_run_output,
    check_writable,
)

MANIFEST = str(EVAL_FILES.manifest)
EVALUATION = {"synthesized/a.wav": b"RIFF a", "synthesized/b.wav": b"RIFF b", "plots/a.png": b"\x89PNG a"}


def written(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def an_evaluation(folder: Path, files: dict[str, bytes] = EVALUATION, overwrite: bool = False) -> None:
    """What an evaluation leaves: its files in subfolders, claimed as ``eval`` claims them, with their manifest."""
    with Outputs("eval", overwrite, command_line="lavo-zoo eval ckpt --out x.json") as outputs:
        staged = outputs.folder(folder, EVAL_FILES)
        for name, data in files.items():
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            (staged / name).write_bytes(data)


def a_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("model.safetensors", "config.yaml", "meta.json"):
        (folder / name).write_text(name)
    return folder


def a_training_run(folder: Path) -> Path:
    """A run as the trainer leaves it: config, metrics, a checkpoint and the ``last`` link to it."""
    a_checkpoint(folder / "checkpoints" / "step-4")
    (folder / "checkpoints" / "last").symlink_to("step-4")
    (folder / "config.yaml").write_text("model: {}\n")
    (folder / "metrics.jsonl").write_text('{"step": 4}\n')
    return folder


# ------------------------------------------------------------------------------------------ a folder's manifest
def test_the_manifest_lists_every_file_written_with_its_hash(tmp_path: Path) -> None:
    an_evaluation(tmp_path / "x")
    manifest = json.loads((tmp_path / "x" / MANIFEST).read_text())
    assert manifest["files"] == {name: hashlib.sha256(data).hexdigest() for name, data in EVALUATION.items()}
    assert manifest["command"] == "lavo-zoo eval ckpt --out x.json" and manifest["written_by"] == "lavo-zoo eval"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"], "no staging folder or lock left"


def test_an_earlier_output_is_refused_without_overwrite_and_replaced_whole_with_it(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    an_evaluation(folder)
    before = written(folder)
    with pytest.raises(UsageError, match="holds the 3 files of an earlier evaluation"):
        an_evaluation(folder, {"synthesized/c.wav": b"RIFF c"})
    assert written(folder) == before
    an_evaluation(folder, {"synthesized/c.wav": b"RIFF c"}, overwrite=True)
    assert sorted(written(folder)) == [MANIFEST, "synthesized/c.wav"], "the earlier files are gone, not merged"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("intruder", ["notes.txt", "synthesized/mine.wav", "new/deep/file.txt"])
def test_a_file_no_earlier_output_recorded_stops_it_and_nothing_is_touched(tmp_path: Path, intruder: str,
                                                                           overwrite: bool) -> None:
    folder = tmp_path / "x"
    an_evaluation(folder)
    (folder / intruder).parent.mkdir(parents=True, exist_ok=True)
    (folder / intruder).write_text("the user's own")
    before = written(folder)
    with pytest.raises(UsageError, match=f"no evaluation recorded writing there \\({intruder}\\)"):
        an_evaluation(folder, overwrite=overwrite)
    assert written(folder) == before


def test_a_recorded_file_the_user_replaced_is_theirs_now(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    an_evaluation(folder)
    (folder / "synthesized" / "a.wav").write_bytes(b"the user's own recording under the same name")
    with pytest.raises(UsageError, match=r"\(synthesized/a.wav\)"):
        an_evaluation(folder, overwrite=True)
    assert (folder / "synthesized" / "a.wav").read_bytes().startswith(b"the user's own")
    assert (folder / "synthesized" / "b.wav").exists()


def test_a_folder_without_a_manifest_is_the_users(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    (folder / "synthesized").mkdir(parents=True)
    (folder / "synthesized" / "a.wav").write_bytes(b"x")
    with pytest.raises(UsageError, match="no evaluation recorded"):
        check_recorded(folder, EVAL_FILES, overwrite=True)
    with pytest.raises(UsageError, match="no export recorded"):
        check_folder_output(folder, HF_FOLDER, overwrite=True)
    assert written(folder) == {"synthesized/a.wav": b"x"}


def test_links_are_never_followed_or_replaced(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.wav").write_bytes(b"x")
    folder = tmp_path / "x"
    an_evaluation(folder)
    (folder / "synthesized" / "linked").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="synthesized/linked"):
        an_evaluation(folder, overwrite=True)
    assert (elsewhere / "precious.wav").exists() and (folder / "synthesized" / "linked").is_symlink()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(UsageError, match="is a link"):
        check_folder_output(link, EVAL_FILES, overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        check_folder_output(tmp_path / "file", EVAL_FILES, overwrite=True)


def test_an_absent_or_empty_folder_is_written_without_overwrite(tmp_path: Path) -> None:
    an_evaluation(tmp_path / "absent" / "deeper")
    (tmp_path / "empty").mkdir()
    an_evaluation(tmp_path / "empty")
    assert written(tmp_path / "absent" / "deeper").keys() == written(tmp_path / "empty").keys() \
        == {*EVALUATION, MANIFEST}


# ------------------------------------------------------------------------- never an input, a checkpoint or a run
def test_no_output_is_an_input_a_checkpoints_or_a_runs_file_even_with_overwrite(tmp_path: Path) -> None:
    run = a_training_run(tmp_path / "run")
    ckpt = a_checkpoint(tmp_path / "ckpt")
    data = tmp_path / "data.jsonl"
    data.write_text('{"answers": []}\n')
    refused = {
        data: "is the --data this command reads",
        ckpt / "config.yaml": f"is a file of the checkpoint in {ckpt}",
        run / "metrics.jsonl": f"is part of the training run {run}",
        run / "config.yaml": f"is part of the training run {run}",
        run / "checkpoints" / "notes.txt": f"is in the checkpoints of the training run {run}",
        run / "checkpoints" / "last" / "meta.json": "is a file of the checkpoint",
    }
    before = written(tmp_path)
    for path, said in refused.items():
        with pytest.raises(UsageError, match=said):
            check_writable(path, True, "--out", {"--data": data})
    for folder, said in {run: "is a training run", ckpt: "is a checkpoint", run / "checkpoints" / "step-4":
                         "is in the checkpoints of the training run", tmp_path: "holds the --data this command reads"
                         }.items():
        with pytest.raises(UsageError, match=said):
            check_folder_output(folder, HF_FOLDER, True, "OUT", {"--data": data})
    assert written(tmp_path) == before and (run / "checkpoints" / "last").is_symlink()


def a_study(folder: Path) -> Path:
    """A study as compare leaves it: its table beside cells/, each cell a training run with its record."""
    for cell in ("sdpa-seed1", "lavo-seed1"):
        a_training_run(folder / "cells" / cell)
        (folder / "cells" / cell / "cell.json").write_text('{"attention": "sdpa", "metrics": {}}')
    (folder / "table.md").write_text("| attention | seeds |\n")
    return folder


def test_a_training_run_never_goes_in_another_commands_outputs(tmp_path: Path) -> None:
    """train --out a study's cell (or a link to one) trained on and pruned the checkpoint the cell's record scored;
    train --out RUN/checkpoints nested a run in a run; compare --out in a study's cells/ nested a study."""
    study, run, ckpt = a_study(tmp_path / "study"), a_training_run(tmp_path / "run"), a_checkpoint(tmp_path / "ckpt")
    (tmp_path / "link").symlink_to(study / "cells" / "sdpa-seed1")
    before = written(tmp_path)
    refused = {
        study / "cells" / "sdpa-seed1": f"is in the cells of the study {study}, which `lavo-zoo compare` trains",
        tmp_path / "link": f"is in the cells of the study {study}",
        study / "cells" / "new": f"is in the cells of the study {study}",
        study / "cells": f"is in the cells of the study {study}",
        study: "is the folder of a study",
        run / "checkpoints": f"is inside the training run {run}: training there would nest a run",
        run / "checkpoints" / "step-4" / "x": f"is inside the checkpoint {run / 'checkpoints' / 'step-4'}",
        run / "sub": f"is inside the training run {run}",
        ckpt: "is a checkpoint, not a run folder",
    }
    for folder, said in refused.items():
        with pytest.raises(UsageError, match=said):
            check_run_output(folder)
    assert check_run_output(run) == run and check_run_output(tmp_path / "fresh") == tmp_path / "fresh"  # its own
    for folder in (study / "cells" / "new", study / "cells" / "sdpa-seed1" / "sub"):  # a study nested in a study
        with pytest.raises(UsageError, match=f"is in the cells of the study {study}"):
            check_folder_output(folder, STUDY_FOLDER, False)
    with pytest.raises(UsageError, match=f"is in the cells of the study {study}"):  # a new file in a cell, too
        check_writable(study / "cells" / "sdpa-seed1" / "val.json", True, "--out", kind=RESULTS)
    assert written(tmp_path) == before and not (tmp_path / "fresh").exists()


def test_the_current_folder_is_never_a_folder_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for folder in (Path("."), tmp_path):
        with pytest.raises(UsageError, match="is the current folder"):
            check_folder_output(folder, HF_FOLDER, True, "OUT")


# ------------------------------------------------------------------------------------------------ the suffix
@pytest.mark.parametrize("name, kind, said", [
    ("x.mp3", WAV, "writes a WAV file, which .mp3 does not name; end it in .wav"),
    ("x", WAV, "a name without a suffix does not name; end it in .wav"),
    ("x.json", TEXT, ".json names another format"),
    ("x.mp3", FIGURE, ".mp3 names no image format"),
])
def test_a_file_name_whose_suffix_names_another_format_is_refused(tmp_path: Path, name: str, kind, said: str
                                                                  ) -> None:
    with pytest.raises(UsageError, match=said):
        check_writable(tmp_path / name, True, "--out", None, kind)


@pytest.mark.parametrize("name", ["x.tar.gz", "x.zip", "x.json", "model.safetensors"])
def test_a_folder_named_like_a_file_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError, match=f"names a file, but this command writes {HF_FOLDER.name}"):
        check_folder_output(tmp_path / name, HF_FOLDER, True, "OUT")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------- --overwrite: an earlier output only
def test_overwrite_replaces_only_an_earlier_file_of_the_kind(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text('{"my": "notes"}')
    for overwrite in (False, True):  # a JSON of another kind is refused either way
        with pytest.raises(UsageError, match="is not a results JSON"):
            check_writable(out, overwrite, "--out", None, RESULTS)
    out.write_text('{"metrics": {}}')  # what a results JSON holds: an earlier output
    with pytest.raises(UsageError, match="already exists; nothing replaces it without --overwrite"):
        check_writable(out, False, "--out", None, RESULTS)
    with Outputs("score", overwrite=True) as outputs:
        outputs.file(out, RESULTS).write_text('{"metrics": {"new": 1}}')
    assert json.loads(out.read_text()) == {"metrics": {"new": 1}}


# ------------------------------------------------------------------------------------- one writer at a time
def test_a_second_writer_is_refused_while_the_first_is_at_work(tmp_path: Path) -> None:
    out = tmp_path / "a.wav"
    with Outputs("synthesize") as first:
        first.file(out, WAV).write_bytes(b"RIFF\0\0\0\0WAVE first")
        for overwrite in (False, True):
            held = f"is being written by another command now \\(lavo-zoo synthesize, pid {os.getpid()}\\)"
            with pytest.raises(UsageError, match=held), Outputs("synthesize", overwrite) as second:
                second.file(out, WAV)
        assert not out.exists()
    assert out.read_bytes().endswith(b"first") and sorted(p.name for p in tmp_path.iterdir()) == ["a.wav"]
    with Outputs("synthesize", overwrite=True) as third:  # the lock went with the first
        third.file(out, WAV).write_bytes(b"RIFF\0\0\0\0WAVE third")
    assert out.read_bytes().endswith(b"third")


def test_one_output_claimed_twice_in_a_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is also --out; give each output its own name"), \
            Outputs("synthesize") as outputs:
        outputs.file(tmp_path / "a.png", FIGURE)
        outputs.file(tmp_path / "a.png", FIGURE, "--png")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- all or nothing
@pytest.mark.parametrize("failure", ["full disk", "Ctrl-C"])
def test_a_failure_leaves_none_of_the_outputs_and_the_earlier_ones_as_they_were(tmp_path: Path, failure: str
                                                                                ) -> None:
    earlier = tmp_path / "out" / "r.json"
    earlier.parent.mkdir()
    earlier.write_text('{"metrics": {"old": 1}}')
    fresh = tmp_path / "new" / "deep"
    error = OSError(errno.ENOSPC, "No space left on device") if failure == "full disk" else KeyboardInterrupt()
    raised = ZooError if failure == "full disk" else KeyboardInterrupt
    with pytest.raises(raised) as told, Outputs("eval", overwrite=True) as outputs:
        outputs.file(earlier, RESULTS).write_text('{"metrics": {"new": 1}}')
        files = outputs.folder(fresh, EVAL_FILES)
        (files / "a.wav").write_bytes(b"RIFF half")
        if isinstance(error, OSError):
            error.filename = str(files / "a.wav")
        raise error
    if failure == "full disk":
        assert f"could not write {EVAL_FILES.writing} {fresh}: the disk is full" in str(told.value)
        assert "nothing was written" in str(told.value) and ".tmp-" not in str(told.value)
    assert earlier.read_text() == '{"metrics": {"old": 1}}'
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["out", "out/r.json"], \
        "no output, staging folder, lock file or folder made for the outputs is left"


# ------------------------------------------------------------------------------------------------- the umask
def test_what_is_put_in_place_has_the_permissions_the_umask_gives(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        with Outputs("eval") as outputs:
            file = outputs.file(tmp_path / "r.json", RESULTS)
            os.close(os.open(file, os.O_WRONLY | os.O_CREAT, 0o600))  # as mkstemp leaves a file
            file.write_text('{"metrics": {}}')
            folder = outputs.folder(tmp_path / "r", EVAL_FILES)
            (folder / "plots").mkdir(mode=0o700)  # as mkdtemp leaves a folder
            (folder / "plots" / "a.png").write_bytes(b"\x89PNG")
            os.chmod(folder / "plots" / "a.png", 0o600)
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes == {"r.json": 0o640, "r": 0o750, "r/plots": 0o750, "r/plots/a.png": 0o640, f"r/{MANIFEST}": 0o640}
