"""Checkpoint archives (checkpoints/archive.py): safe unpacking, members that would land outside the target refused
before anything is written; the model card read from an archive without unpacking it."""
from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from lavo_zoo.checkpoints.archive import find_checkpoint_dir, pack_checkpoint, read_card, safe_extract
from lavo_zoo.errors import CheckpointError
from tests.checkpoints.helpers import make_checkpoint, tar_with


def _tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            data = b"x" * info.size
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    info.size = 3 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("member, reason", [
    (_member("../evil.txt"), "outside the destination"),
    (_member("ckpt/../../evil.txt"), "outside the destination"),
    (_member("/tmp/evil.txt"), "absolute"),
    (_member("ckpt/link", tarfile.SYMTYPE, "../../outside"), "outside the destination"),
    (_member("ckpt/link", tarfile.SYMTYPE, "/etc/passwd"), "absolute"),
    (_member("ckpt/hard", tarfile.LNKTYPE, "../outside"), "outside the destination"),
    (_member("ckpt/dev", tarfile.CHRTYPE), "special file"),
    (_member("ckpt/fifo", tarfile.FIFOTYPE), "special file"),
])
def test_unsafe_tar_members_are_refused_and_nothing_is_written(tmp_path: Path, member: tarfile.TarInfo,
                                                               reason: str) -> None:
    archive = _tar(tmp_path / "bad.tar.gz", _member("ckpt/ok.txt"), member)
    dest = tmp_path / "out" / "dest"
    dest.mkdir(parents=True)
    with pytest.raises(CheckpointError, match=rf"refusing to unpack .*unsafe member '{member.name}'") as err:
        safe_extract(archive, dest)
    assert reason in str(err.value)
    assert list((tmp_path / "out").rglob("*")) == [dest]


@pytest.mark.parametrize("name, mode, reason", [
    ("../evil.txt", 0o100644, "leaves the target"),
    ("/abs/evil.txt", 0o100644, "absolute path"),
    ("C:/evil.txt", 0o100644, "absolute path"),
    ("ckpt/link", stat.S_IFLNK | 0o777, "symbolic link"),
])
def test_unsafe_zip_members_are_refused(tmp_path: Path, name: str, mode: int, reason: str) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo(name)
        info.external_attr = mode << 16
        zf.writestr(info, "../../outside")
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(CheckpointError, match=reason):
        safe_extract(archive, dest)
    assert list(dest.iterdir()) == []


def test_corrupt_archive_is_a_clear_error(tmp_path: Path) -> None:
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(b"not a tarball")
    with pytest.raises(CheckpointError, match="not a readable archive"):
        safe_extract(archive, tmp_path)


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_packed_checkpoint_unpacks_to_a_checkpoint_dir(tmp_path: Path, suffix: str) -> None:
    source = make_checkpoint(tmp_path / "step-200")
    archive = tmp_path / f"lm-tiny{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w") as zf:
            for f in source.iterdir():
                zf.write(f, f"lm-tiny/{f.name}")
    else:
        pack_checkpoint(source, archive)
    dest = tmp_path / "dest"
    dest.mkdir()
    safe_extract(archive, dest)
    found = find_checkpoint_dir(dest)
    assert found == dest / "lm-tiny"
    assert (found / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    assert (found / "train_state.pt").exists() == (suffix == ".zip")  # pack leaves train_state.pt out by default


def test_zip_members_without_file_type_bits_are_plain_files(tmp_path: Path) -> None:
    archive = tmp_path / "written-by-python.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ckpt/a.txt", "x")  # ZipFile.writestr records mode 0o600, with no file-type bits
    dest = tmp_path / "dest"
    dest.mkdir()
    safe_extract(archive, dest)
    assert (dest / "ckpt" / "a.txt").read_text() == "x"


# ---------------------------------------------------------------------------------------------- reading cards
def test_read_card_takes_the_checkpoint_folders_card_and_nothing_outside(tmp_path: Path) -> None:
    ok = [("ckpt/meta.json", None, b"{}"), ("ckpt/README.md", None, b"the card")]
    assert read_card(tar_with(tmp_path / "a.tar.gz", ok)) == "the card"
    assert read_card(tar_with(tmp_path / "root.tar.gz", [("README.md", None, b"at the root")])) == "at the root"
    two = [("README.md", None, b"the archive's notes"), ("ckpt/README.md", None, b"the card"),
           ("ckpt/meta.json", None, b"{}")]
    assert read_card(tar_with(tmp_path / "two.tar.gz", two)) == "the card", "the one beside meta.json"
    for name, members in (("deep", [("a/b/README.md", None, b"x")]),
                          ("escape", [("../README.md", None, b"x"), ("ckpt/../../README.md", None, b"x")]),
                          ("absolute", [("/README.md", None, b"x")]),
                          ("link", [("ckpt/README.md", b"/etc/passwd", b"")]),
                          ("none", [("ckpt/meta.json", None, b"{}")])):
        assert read_card(tar_with(tmp_path / f"{name}.tar.gz", members)) is None, name
    with zipfile.ZipFile(tmp_path / "c.zip", "w") as zf:
        zf.writestr("ckpt/README.md", "zip card")
        zf.writestr("../README.md", "outside")
    assert read_card(tmp_path / "c.zip") == "zip card"
    huge = tar_with(tmp_path / "huge.tar.gz", [("ckpt/README.md", None, b"x" * 2000)])
    with pytest.raises(CheckpointError, match="more than a model card may be"):
        read_card(huge, limit=1000)
    (tmp_path / "bad.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(CheckpointError, match="not a readable archive"):
        read_card(tmp_path / "bad.tar.gz")
