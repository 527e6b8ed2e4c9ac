"""A folder output's manifest (lavo_zoo.outputs.manifests): it lists every file written with its hash;
``--overwrite`` replaces only a folder whose manifest lists everything in it, unchanged, and whole; a folder holding
anything else is the user's; links are never followed or replaced."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lavo_zoo.errors import UsageError
from lavo_zoo.outputs import EVAL_FILES, HF_FOLDER, check_folder_output, check_recorded
from tests.outputs.helpers import EVALUATION, MANIFEST, an_evaluation, written


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
