"""The write protocol: how every file, folder and link the project writes reaches its name.

Content is written beside its final name under a temporary name, flushed to disk, and only then renamed (or, for a
file that must not replace one, linked) into place. A crash, a kill, a full or read-only disk leaves the previous
content or nothing under the final name, never a partial one, and a reader never sees a half-written file.

- a file: :func:`put_file` (the protocol; an ``OSError`` goes to the caller as it is), :func:`write_atomic` /
  :func:`write_file` (a command's output: the error is a message naming the path and why), :func:`move_into_place`
  (a complete file already written beside its final name);
- a folder: :func:`temporary_folder` to fill, then :func:`swap_folder` (the previous folder aside, the new one in,
  the previous one removed);
- a link: :func:`replace_link`;
- permissions: :func:`follow_umask` (what third-party writers left 0600 / 0700 made what the umask gives).

The temporary names, which :func:`remove_leftovers` clears after a crash (a writer removes its own otherwise):

    .NAME.PID.tmp        a file or a link being written
    .tmp-NAME-PID/       a folder being filled
    .old-NAME-PID/       the previous folder, moved aside while the new one moves in

Which files a command may write at all (never an input, a checkpoint or a run; ``--overwrite`` only over its own
earlier output; one writer at a time) is decided before the work, by :mod:`lavo_zoo.outputs`. Torch-free.
"""
from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from lavo_zoo.errors import UsageError, ZooError, os_error_message

Content = bytes | str | Callable[[BinaryIO], Any]  # the bytes, text (UTF-8) or a fill(f) that writes them


class NameTaken(FileExistsError):
    """A file that must not replace another found its name taken (by another process, while it was written)."""


# ------------------------------------------------------------------------------------------------------- names
def temporary_file(path: Path) -> Path:
    """The name ``path`` is written under until it is complete: ``.NAME.PID.tmp`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _temporary_folder_name(path: Path) -> Path:
    return path.with_name(f".tmp-{path.name}-{os.getpid()}")


def _aside(path: Path) -> Path:
    return path.with_name(f".old-{path.name}-{os.getpid()}")


# ------------------------------------------------------------------------------------------------------- files
def put_file(path: Path, content: Content, replace: bool = True) -> Path:
    """Write ``content`` to ``path`` atomically: into :func:`temporary_file`, flushed to disk, then moved into
    place (:func:`move_into_place`: replacing a file of that name with ``replace``, else :class:`NameTaken` if
    the name is taken). Any failure leaves ``path`` as it was and no temporary file; the ``OSError`` (or what
    ``fill`` raised) goes to the caller unchanged.

    Args:
        path: the file to write; its folder is created if missing.
        content: bytes, text (written as UTF-8) or ``fill(f)``, a function writing into the binary file ``f``.
        replace: replace an existing ``path`` (else refuse it: :class:`NameTaken`).

    Returns:
        ``path``.
    """
    path = Path(path)
    tmp = temporary_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        move_into_place(tmp, path, replace)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # the folder cannot be read or written: nothing was created in it
            pass
    return path


def move_into_place(tmp: Path, path: Path, replace: bool = True) -> None:
    """Give the complete file ``tmp`` (beside ``path``, on the same file system) the name ``path``: replacing a file
    of that name with ``replace``, else only if no file has it (:class:`NameTaken` otherwise, ``tmp`` kept), so that
    of two writers of one name one wins and the other is told."""
    if replace:
        os.replace(tmp, path)
        return
    try:
        link_new(tmp, path)
    except FileExistsError:
        raise NameTaken(errno.EEXIST, "the name was taken while the file was written", str(path)) from None


def link_new(tmp: Path, path: Path) -> None:
    """Give the complete file ``tmp`` the name ``path`` only if no file has it (FileExistsError otherwise). A hard
    link where the file system has them; on one without (FAT, some network shares) the name is claimed with
    O_EXCL, then replaced by ``tmp``."""
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK, errno.EXDEV):
            raise
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    os.replace(tmp, path)


def write_atomic(path: Path, fill: Callable[[BinaryIO], Any], overwrite: bool = False, option: str = "--out"
                 ) -> Path:
    """Write a command's output file atomically (:func:`put_file`), with failures as messages for the user.

    Args:
        path: the file to write.
        fill: ``fill(f)`` writes the content into the binary file ``f``.
        overwrite: replace an existing ``path``; without it a file that appeared while the command ran is kept
            and the command told so (:class:`~lavo_zoo.errors.UsageError`).
        option: how the user gave ``path`` (``--out``, ``OUT``), for the message.

    Returns:
        ``path``.

    Raises:
        UsageError: ``path`` was created by someone else meanwhile (without ``overwrite``).
        ZooError: the disk is full or read-only, or another ``OSError``: the message names ``path`` and the reason;
            nothing was written there.
    """
    path = Path(path)
    try:
        put_file(path, fill, replace=overwrite)
    except NameTaken:
        raise UsageError(f"{option} {path} was created by someone else while this command ran; it was not "
                         f"replaced. Give another {option}, or add --overwrite.") from None
    except OSError as e:
        e.filename, e.filename2 = str(path), None
        raise ZooError(os_error_message(e, "could not write") + "; nothing was written there") from None
    return path


def write_file(path: Path, data: bytes | str, overwrite: bool = False, option: str = "--out") -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically, as :func:`write_atomic`.

    Its arguments are stated on `write_atomic` (``data`` in place of its ``fill``).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return write_atomic(path, lambda f: f.write(payload), overwrite, option)


# ----------------------------------------------------------------------------------------------------- folders
def temporary_folder(path: Path) -> Path:
    """A new, empty folder ``.tmp-NAME-PID`` beside ``path`` (its parent created if missing; a stale one of that
    name removed) to fill, then :func:`swap_folder` into place; the caller removes it if filling fails."""
    tmp = _temporary_folder_name(Path(path))
    _remove(tmp)
    tmp.mkdir(parents=True)
    return tmp


def scratch_space(prefix: str = "lavo-zoo-") -> Path:
    """A new private folder (0700) in the system's temporary folder, for intermediate files that are never put in
    place (what ``push`` uploads); the caller removes it."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix))


def swap_folder(tmp: Path, path: Path) -> None:
    """Put the complete folder ``tmp`` (from :func:`temporary_folder`) at ``path``: its files flushed to disk, a
    previous ``path`` moved aside (``.old-NAME-PID``), ``tmp`` renamed in, the previous one removed. There is no
    moment without a folder at ``path`` once there was one; a crash between the two renames leaves the previous
    folder aside, which :func:`remove_leftovers` puts back."""
    tmp, path = Path(tmp), Path(path)
    fsync_tree(tmp)
    if path.exists() or path.is_symlink():
        old = _aside(path)
        _remove(old)
        os.replace(path, old)
        os.replace(tmp, path)
        _remove(old)
    else:
        os.replace(tmp, path)
    fsync_folder(path.parent)


def fsync_folder(path: Path) -> None:
    """Flush ``path``'s entries (the names just renamed in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush the files of the folder ``path`` (not its sub-folders' files) and its entries to disk."""
    for f in Path(path).iterdir():
        if f.is_file() and not f.is_symlink():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_folder(path)


def current_umask() -> int:
    """The process's file-mode creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: Path) -> None:
    """Give ``path`` (a file, or a folder and everything in it) the permissions a file or folder created now gets:
    0666 (0777 for a folder or an executable file) less the umask, whatever the code that wrote it chose (a
    ``mkstemp`` file is 0600, a ``mkdtemp`` folder 0700). Links are left as they are."""
    path = Path(path)
    mask = current_umask()
    paths = [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]
    for p in paths:
        if p.is_symlink():
            continue
        executable = p.is_dir() or p.stat().st_mode & 0o111
        os.chmod(p, (0o777 if executable else 0o666) & ~mask)


# ------------------------------------------------------------------------------------------------------- links
def replace_link(link: Path, target: Path | str) -> None:
    """Point the symbolic link ``link`` at ``target`` (relative to ``link``'s folder, or absolute) atomically: a new
    link is made under :func:`temporary_file` and renamed over ``link``, so ``link`` always names the old target
    or the new one."""
    link = Path(link)
    tmp = temporary_file(link)
    try:
        _remove(tmp)
        os.symlink(target, tmp, target_is_directory=(link.parent / target).is_dir())
        os.replace(tmp, link)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    fsync_folder(link.parent)


# -------------------------------------------------------------------------------------------------- after a crash
def remove_leftovers(folder: Path) -> None:
    """Undo what a writer killed mid-write left in ``folder``: temporary files and links (``.*.tmp``) and
    temporary folders (``.tmp-*``) are removed; a folder moved aside (``.old-NAME-PID``) is put back when ``NAME``
    is missing (the kill came between the two renames of :func:`swap_folder`), removed otherwise. Call it only
    where no other writer is at work (a locked run folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for p in sorted(folder.iterdir()):
        name = p.name
        if name.startswith(".old-") and "-" in name[len(".old-"):]:
            final = folder / name[len(".old-"):].rsplit("-", 1)[0]
            if final.exists() or final.is_symlink():
                _remove(p)
            else:
                p.rename(final)
        elif is_temporary(name):
            _remove(p)


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one a writer gives what it has not finished (a file or link ``.NAME.PID.tmp``, a folder
    ``.tmp-NAME-PID``); a folder it moved aside is ``.old-NAME-PID`` (:func:`swap_folder`)."""
    return name.startswith(".tmp-") or (name.startswith(".") and name.endswith(".tmp"))


def _remove(path: Path) -> None:
    """Remove a file, a link or a folder tree, if there; what of a tree cannot be removed is left as it is."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
