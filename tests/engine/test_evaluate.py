"""An evaluation's file folder (``eval --out X.json`` -> ``X/``): it records what it wrote, and replaces only that."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lavo_zoo.engine.evaluate import MANIFEST, clear_files_folder, files_folder, record_files_folder
from lavo_zoo.errors import UsageError


def written(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def an_evaluation(folder: Path) -> None:
    """What an evaluation leaves: files in subfolders, then the manifest of them."""
    for name in ("synthesized/a.wav", "synthesized/b.wav", "plots/a.png"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(name.encode())
    record_files_folder(folder, "lavo-zoo eval ckpt --out x.json")


def test_the_manifest_lists_every_file_written_with_its_hash(tmp_path: Path) -> None:
    an_evaluation(tmp_path / "x")
    manifest = json.loads((tmp_path / "x" / MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["plots/a.png", "synthesized/a.wav", "synthesized/b.wav"]
    assert manifest["command"] == "lavo-zoo eval ckpt --out x.json"


def test_an_earlier_evaluation_is_refused_without_overwrite_and_removed_exactly_with_it(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    an_evaluation(folder)
    before = written(folder)
    with pytest.raises(UsageError, match="holds the 3 files of an earlier evaluation"):
        clear_files_folder(folder, overwrite=False)
    assert written(folder) == before
    clear_files_folder(folder, overwrite=True)
    assert folder.is_dir() and list(folder.iterdir()) == []


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("intruder", ["notes.txt", "synthesized/mine.wav", "new/deep/file.txt"])
def test_a_file_no_evaluation_recorded_stops_it_and_nothing_is_touched(tmp_path: Path, intruder: str,
                                                                       overwrite: bool) -> None:
    folder = tmp_path / "x"
    an_evaluation(folder)
    (folder / intruder).parent.mkdir(parents=True, exist_ok=True)
    (folder / intruder).write_text("the user's own")
    before = written(folder)
    with pytest.raises(UsageError, match=f"no evaluation recorded writing there \\({intruder}\\)"):
        clear_files_folder(folder, overwrite)
    assert written(folder) == before


def test_a_recorded_file_the_user_replaced_is_theirs_now(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    an_evaluation(folder)
    (folder / "synthesized" / "a.wav").write_bytes(b"the user's own recording under the same name")
    with pytest.raises(UsageError, match=r"\(synthesized/a.wav\)"):
        clear_files_folder(folder, overwrite=True)
    assert (folder / "synthesized" / "a.wav").read_bytes().startswith(b"the user's own")
    assert (folder / "synthesized" / "b.wav").exists()


def test_a_folder_without_a_manifest_is_the_users(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    (folder / "synthesized").mkdir(parents=True)
    (folder / "synthesized" / "a.wav").write_bytes(b"x")
    with pytest.raises(UsageError, match="no evaluation recorded"):
        clear_files_folder(folder, overwrite=True)
    assert (folder / "synthesized" / "a.wav").exists()


def test_links_are_never_followed_or_removed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.wav").write_bytes(b"x")
    folder = tmp_path / "x"
    an_evaluation(folder)
    (folder / "synthesized" / "linked").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="synthesized/linked"):
        clear_files_folder(folder, overwrite=True)
    assert (elsewhere / "precious.wav").exists()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(UsageError, match="is a link"):
        clear_files_folder(link, overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        clear_files_folder(tmp_path / "file", overwrite=True)


def test_an_absent_or_empty_folder_is_ready(tmp_path: Path) -> None:
    clear_files_folder(tmp_path / "absent", overwrite=False)
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    clear_files_folder(tmp_path / "empty", overwrite=False)
    assert (tmp_path / "empty" / "sub").is_dir()


def test_files_folder_beside_the_results() -> None:
    assert files_folder(Path("runs/results.json")) == Path("runs/results")
    assert files_folder(Path("runs/results")) == Path("runs/results.files")


def test_a_manifest_that_cannot_be_written_after_a_failure_does_not_hide_the_failure(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from lavo_zoo.engine import evaluate

    folder = tmp_path / "x"
    (folder / "synthesized").mkdir(parents=True)
    (folder / "synthesized" / "a.wav").write_bytes(b"half")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # the manifest's write_file fsyncs
    evaluate._record_after_failure(folder, None)
    assert "could not be recorded" in capsys.readouterr().err and not (folder / MANIFEST).exists()
