"""The one exclusive lock every writer takes (a training run's folder, a study's cells, a command's outputs): an OS
file lock (``flock``) on a lock file, which the system drops when its holder exits or is killed, so a killed writer
never leaves anything locked, and which its holder removes, still holding it, when it is done.

Where ``fcntl`` is missing (Windows) nothing is locked: :func:`try_lock` always succeeds. Torch-free.
"""
from __future__ import annotations

import os
from pathlib import Path

NOT_LOCKED = -1  # the descriptor :func:`try_lock` returns where the platform has no locks


def try_lock(path: Path, content: bytes = b"") -> int | None:
    """Take the exclusive lock on the lock file ``path`` (created if missing, its folder too) without waiting.

    Args:
        path: the lock file.
        content: what the holder writes into it once it holds it (its pid, who it is), for whoever finds it held.

    Returns:
        The descriptor holding the lock (give it to :func:`release_lock`), or None while another process holds it.
        A lock file its holder removed while this process opened it is opened again.

    Raises:
        OSError: the lock file cannot be created (a read-only or full disk, a folder of another user).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux / macOS: no locks
        return NOT_LOCKED
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):  # not a lock file its holder removed while this process waited
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        if content:
            os.pwrite(fd, content, 0)
    except BaseException:
        release_lock(fd, path)
        raise
    return fd


def release_lock(fd: int | None, path: Path) -> None:
    """Release the lock :func:`try_lock` gave as ``fd``: the lock file is removed while still held (so that nobody
    locks a file being removed), then the descriptor closed."""
    if fd is None or fd == NOT_LOCKED:
        return
    try:
        Path(path).unlink(missing_ok=True)
    except OSError:
        pass
    os.close(fd)  # closing the descriptor releases the flock


def read_holder(path: Path, size: int = 4096) -> str:
    """What the holder of the lock file ``path`` wrote into it (empty if nothing, or if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(size).decode(errors="replace").strip()
    except OSError:
        return ""


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
