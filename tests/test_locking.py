"""The one exclusive lock (lavo_zoo.locking), held by real processes in fresh folders: while one process holds it,
another is refused at once (no waiting) and can read who holds it; the system drops the lock of a killed holder, so
nothing stays locked; the holder removes its lock file when it releases it, and a process that opened the file just
before that removal does not lock the removed file; a held lock is a message naming the folder and what to do."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lavo_zoo import locking
from lavo_zoo.engine.run_dir import LOCK_FILE, RunLock
from lavo_zoo.errors import UsageError
from lavo_zoo.locking import read_holder, release_lock, try_lock
from lavo_zoo.outputs import WAV, Outputs

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no file locks on Windows: try_lock always succeeds")

# A process that tries the lock once, says whether it got it ("held" / "refused"), then keeps it until its standard
# input closes, and releases it.
CONTENDER = textwrap.dedent("""
    import os, sys
    from lavo_zoo.locking import release_lock, try_lock
    path = sys.argv[1]
    fd = try_lock(path, f"pid {os.getpid()}".encode())
    print("refused" if fd is None else "held", flush=True)
    sys.stdin.read()
    release_lock(fd, path)
""")


def contender(path: Path) -> subprocess.Popen:
    """A process trying the lock on ``path``; it answers on one line of its standard output."""
    return subprocess.Popen([sys.executable, "-c", CONTENDER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def answer(process: subprocess.Popen) -> str:
    line = process.stdout.readline().strip()
    assert line in ("held", "refused"), f"the contender said {line!r}"
    return line


def finish(process: subprocess.Popen) -> None:
    """Close its standard input (it releases the lock) and wait for it."""
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    process.stdout.close()


@pytest.fixture
def holder(tmp_path: Path):
    """A process holding the lock on a fresh lock file (in a folder that does not exist yet), and that file."""
    path = tmp_path / "folder" / "x.lock"
    process = contender(path)
    assert answer(process) == "held"
    yield process, path
    if process.poll() is None:
        finish(process)


def test_a_second_process_is_refused_at_once_and_reads_who_holds_it(holder) -> None:
    process, path = holder
    assert try_lock(path, b"me") is None  # refused without waiting: the holder keeps it until told
    assert read_holder(path) == f"pid {process.pid}"  # what the holder wrote, untouched by the refused one
    other = contender(path)
    assert answer(other) == "refused"
    finish(other)
    finish(process)  # the holder releases it: its file goes, and the next one takes the lock
    assert not path.exists()
    fd = try_lock(path, b"me")
    assert fd is not None and read_holder(path) == "me"
    release_lock(fd, path)
    assert not path.exists()


def test_of_processes_contending_at_once_exactly_one_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    processes = [contender(path) for _ in range(4)]
    answers = [answer(p) for p in processes]  # each keeps what it got until its input closes
    assert sorted(answers) == ["held", "refused", "refused", "refused"]
    assert read_holder(path) == f"pid {processes[answers.index('held')].pid}"
    for p in processes:
        finish(p)
    assert not path.exists()


def test_the_lock_of_a_killed_holder_is_taken_over(holder) -> None:
    process, path = holder
    assert try_lock(path) is None
    process.kill()  # SIGKILL: no clean-up runs; its lock file stays, its lock goes with it
    assert process.wait(timeout=30) == -signal.SIGKILL
    process.stdout.close()
    process.stdin.close()
    assert path.exists()
    fd = try_lock(path, b"me")
    assert fd is not None
    assert read_holder(path) == "me"  # what the killed holder wrote is replaced, not written over in part
    other = contender(path)
    assert answer(other) == "refused"  # and the one who took it over holds it
    finish(other)
    release_lock(fd, path)


def test_a_lock_file_removed_by_its_releasing_holder_is_opened_again(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the module guards against: a process opens the lock file, the holder releases (removing the file)
    before that process's flock; locking the removed file would let a third process lock a new file at the same path
    meanwhile. try_lock must hold the lock on the file that is at the path."""
    import fcntl

    path = tmp_path / "x.lock"
    first = try_lock(path, b"first")
    real_flock, calls = fcntl.flock, []

    def release_first_then_flock(fd: int, operation: int) -> None:
        if not calls:  # the first holder releases between the second's open and its flock
            release_lock(first, path)
        calls.append(fd)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", release_first_then_flock)
    second = try_lock(path, b"second")
    monkeypatch.undo()
    assert second is not None and len(calls) == 2  # it opened the file again
    assert os.fstat(second).st_ino == path.stat().st_ino and read_holder(path) == "second"
    other = contender(path)
    assert answer(other) == "refused"
    finish(other)
    release_lock(second, path)


def test_without_fcntl_nothing_is_locked_and_release_is_a_no_op(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` raises ImportError, as on Windows
    path = tmp_path / "x.lock"
    assert try_lock(path) == locking.NOT_LOCKED and try_lock(path) == locking.NOT_LOCKED
    release_lock(locking.NOT_LOCKED, path)
    release_lock(None, path)


def test_a_held_run_folder_names_the_folder_its_holder_and_what_to_do(tmp_path: Path) -> None:
    run = tmp_path / "run"
    process = contender(run / LOCK_FILE)  # another process holds the run's lock, as a training run does
    assert answer(process) == "held"
    with pytest.raises(UsageError) as error:
        RunLock(run).acquire()
    said = str(error.value)
    assert str(run) in said and f"pid {process.pid}" in said
    assert "wait for it to finish" in said and "--resume auto" in said and "another --out" in said
    finish(process)
    lock = RunLock(run).acquire()  # released: the folder is free again
    assert (run / LOCK_FILE).exists()
    lock.release()
    assert not (run / LOCK_FILE).exists()


def test_a_held_output_names_the_output_and_what_to_do(tmp_path: Path) -> None:
    out = tmp_path / "a.wav"
    process = contender(tmp_path / ".a.wav.lock")  # the lock beside the output, held by another process
    assert answer(process) == "held"
    with pytest.raises(UsageError) as error, Outputs("synthesize") as outputs:
        outputs.file(out, WAV)
    said = str(error.value)
    assert f"--out {out} is being written by another command now" in said
    assert "wait for it to finish, or give another --out" in said
    finish(process)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
