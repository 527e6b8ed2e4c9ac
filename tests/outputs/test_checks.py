"""The checks before the work (lavo_zoo.outputs.checks): no output is an input, a checkpoint's or a training run's
own file; a training run never goes in another command's outputs (a study's cells, a run, a checkpoint); never the
current folder; a folder output is not named like a file; ``--overwrite`` replaces only an earlier file of the kind."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lavo_zoo.errors import UsageError
from lavo_zoo.outputs import (
    HF_FOLDER,
    RESULTS,
    STUDY_FOLDER,
    Outputs,
    check_folder_output,
    check_run_output,
    check_writable,
)
from tests.outputs.helpers import a_checkpoint, a_training_run, written


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

