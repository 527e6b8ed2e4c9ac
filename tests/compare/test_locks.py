"""The locks that keep a study's processes apart: a held lock is waited for (the waiter told who holds it), taken once
its holder ends (killed included), and left without a lock file."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from lavo_zoo.compare import locks
from lavo_zoo.compare.locks import FolderLock

HOLD = ("import sys, time; from lavo_zoo.compare.locks import FolderLock; FolderLock(sys.argv[1]).__enter__(); "
        "print('held', flush=True); time.sleep(60)")


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """A process of its own that holds the lock ``tmp_path/cell/.cell.lock`` until it is killed."""
    monkeypatch.setattr(locks, "POLL_S", 0.1)
    path = tmp_path / "cell" / ".cell.lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    yield path, proc
    proc.kill()
    proc.wait()


def test_a_held_lock_is_waited_for_and_taken_when_its_holder_ends(holder):
    path, proc = holder
    who = f"pid {proc.pid} on {socket.gethostname()}"
    assert FolderLock(path).busy() == who
    told = []
    threading.Timer(0.5, proc.kill).start()  # killed: the system drops its lock
    with FolderLock(path, told.append):
        assert proc.poll() is not None  # taken only once the holder had ended
        assert json.loads(path.read_text()) == {"pid": os.getpid(), "host": socket.gethostname()}
        assert FolderLock(path).busy() is not None  # another opener finds it held
    assert told == [who]  # the waiter was told once who held it
    assert not path.exists() and FolderLock(path).busy() is None
