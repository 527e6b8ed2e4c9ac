"""The locks that keep a study's processes apart: one on each cell folder for as long as a process works on that cell
(train, evaluate, record), and one on the study folder while a launcher submits its cells. Two ``compare`` commands
on one study (two shells, two Slurm submissions, jobs on different nodes) never train one cell at the same time: the
second waits for the first to finish the cell, then keeps its result.

They are OS file locks (``flock``), dropped by the system when the holder exits or is killed, so a killed process
never leaves a cell locked. Across nodes they need a shared filesystem whose locks are seen by every node: NFS (v4,
or v3 with its lock manager; not mounted ``local_lock=flock`` or ``local_lock=all``), Lustre mounted with
``-o flock``, GPFS, BeeGFS; on a filesystem without them (or on Windows) the locks only hold within one machine.
"""
from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from lavo_zoo.errors import ZooError, os_error_message
from lavo_zoo.locking import release_lock, try_lock

CELL_LOCK = ".cell.lock"  # in a cell folder while a process works on the cell
SUBMIT_LOCK = ".submit.lock"  # in a study folder while a launcher submits its cells
POLL_S = 2.0


def holder() -> dict[str, Any]:
    """Who holds a lock: this process's pid, host and Slurm job (when it runs in one)."""
    job = os.environ.get("SLURM_JOB_ID")
    return {"pid": os.getpid(), "host": socket.gethostname(), **({"slurm_job": job} if job else {})}


def describe_holder(info: dict[str, Any] | None) -> str:
    """``pid 12 on node3, Slurm job 4711`` (or ``another process`` when the lock file says nothing yet)."""
    if not info:
        return "another process"
    text = f"pid {info.get('pid')} on {info.get('host')}"
    return text + (f", Slurm job {info['slurm_job']}" if info.get("slurm_job") else "")


class FolderLock:
    """An exclusive lock on ``path`` (a lock file), taken with ``with FolderLock(path, what):``. While another
    process holds it, ``waiting(description of the holder)`` is called once and the lock is tried every
    :data:`POLL_S` seconds until it is free."""

    def __init__(self, path: Path, waiting: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self.waiting = waiting
        self._fd: int | None = None

    def _try(self) -> bool:
        """Take the lock if it is free (True), else False."""
        fd = try_lock(self.path, json.dumps(holder()).encode())
        if fd is None:
            return False
        self._fd = fd
        return True

    def read_holder(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def busy(self) -> str | None:
        """Who holds the lock now (:func:`describe_holder`), or None when it is free (it is not kept)."""
        try:
            import fcntl  # noqa: F401
        except ImportError:  # pragma: no cover - not on Linux / macOS: no locks
            return None
        if not self.path.exists():
            return None
        try:
            if self._try():
                self.__exit__(None, None, None)
                return None
        except OSError:
            return None
        return describe_holder(self.read_holder())

    def __enter__(self) -> Self:
        try:
            told = False
            while not self._try():
                if not told and self.waiting is not None:
                    self.waiting(describe_holder(self.read_holder()))
                    told = True
                time.sleep(POLL_S)
        except OSError as e:
            raise ZooError(os_error_message(e, "cannot lock")) from None
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Remove the lock file while still holding it (so that nobody locks a file being removed), then release."""
        release_lock(self._fd, self.path)
        self._fd = None
