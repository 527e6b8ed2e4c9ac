"""The claim (lavo_zoo.outputs.claim): one writer at a time (a lock beside each output), one output claimed once per
command, all the outputs put in place or none (with the message every command gives), the permissions the umask
gives."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lavo_zoo.errors import UsageError, ZooError
from lavo_zoo.outputs import EVAL_FILES, FIGURE, RESULTS, WAV, Outputs
from tests.outputs.helpers import MANIFEST


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
