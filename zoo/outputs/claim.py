"""The claim of a command's outputs (:class:`Outputs`): checked and locked before the work, written under staging
names, put in place together once the command has succeeded, or removed; scratch space (:class:`scratch_folder`) and
figures (:func:`save_figure`). Torch-free."""
from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from lavo_zoo.atomic import (
    NameTaken,
    follow_umask,
    move_into_place,
    scratch_space,
    swap_folder,
    temporary_folder,
    write_file,
)
from lavo_zoo.errors import UsageError, ZooError, os_error_message
from lavo_zoo.locking import read_holder, release_lock, try_lock
from lavo_zoo.outputs.checks import check_folder_output, check_writable, folder_resolved, head_of
from lavo_zoo.outputs.kinds import FIGURE, FileKind, FolderKind, check_suffix
from lavo_zoo.outputs.manifests import (
    check_recorded,
    listed,
    present_files,
    recorded_files,
    sha256_file,
    write_manifest,
)

_staging_counter = itertools.count()


@dataclass
class _File:
    final: Path
    staged: Path
    kind: FileKind | None
    option: str
    replace: bool


@dataclass
class _Folder:
    final: Path
    staged: Path
    kind: FolderKind
    option: str
    written: dict[str, str] = field(default_factory=dict)


class Outputs:
    """The outputs of one command, claimed before its work and put in place together after it (the module's
    policy). Use it as ``with Outputs("synthesize", overwrite) as outputs:``, claim each output with
    :meth:`file` or :meth:`folder` before the work, write to the path each returns; after the block
    :attr:`written` lists what was put in place.

    Args:
        command: the command, for messages and manifests (``eval``).
        overwrite: ``--overwrite``: earlier outputs of the same kind may be replaced.
        inputs: {option: path} of what the command reads (never written, nor a folder holding one).
        command_line: the command line, recorded in a folder's manifest.
    """

    def __init__(self, command: str, overwrite: bool = False, inputs: Mapping[str, Path | str | None] | None = None,
                 command_line: str | None = None) -> None:
        self.command = command
        self.overwrite = overwrite
        self.inputs = {name: given for name, given in (inputs or {}).items() if given is not None}
        self.command_line = command_line
        self.written: list[Path] = []
        self._files: list[_File] = []
        self._folders: list[_Folder] = []
        self._claimed: dict[Path, str] = {}
        self._locks: list[tuple[int, Path]] = []
        self._staging: dict[Path, Path] = {}  # folder of outputs -> its staging folder
        self._created: list[Path] = []  # folders made for the outputs (removed if left empty)

    # -------------------------------------------------------------------------------------------- claiming
    def file(self, path: Path, kind: FileKind | None, option: str = "--out", replace: bool | None = None) -> Path:
        """Claim the file output ``path`` (checked, locked) and return where to write it (its staging name, with
        the same file name), put in place when the block ends.

        Args:
            path: the file.
            kind: what is written (its suffix and the kind of file it may replace), or None for any.
            option: how the user gave it, for messages.
            replace: an earlier file of ``kind`` may be replaced (default: ``overwrite``); True for a record the
                command keeps of its own (a benchmark's JSON).
        """
        path = Path(path)
        replace = self.overwrite if replace is None else replace
        check_writable(path, replace, option, self.inputs, kind)
        self._claim(path, option)
        self._lock(path, option)
        check_writable(path, replace, option, self.inputs, kind)  # again, holding the lock
        staged = self._staging_for(path.parent) / path.name
        self._files.append(_File(path, staged, kind, option, replace))
        return staged

    def folder(self, path: Path, kind: FolderKind, option: str = "--out") -> Path:
        """Claim the folder output ``path`` (checked, locked) and return the empty staging folder to fill, put in
        place when the block ends (for an in-place kind: ``path`` itself, only checked)."""
        path = Path(path)
        check_folder_output(path, kind, self.overwrite, option, self.inputs)
        self._claim(path, option)
        if kind.in_place:
            return path
        self._lock(path, option)
        check_folder_output(path, kind, self.overwrite, option, self.inputs)
        self._make(path.parent)
        staged = temporary_folder(path)
        self._folders.append(_Folder(path, staged, kind, option))
        return staged

    def staged(self, final: Path) -> Path | None:
        """Where the claimed output ``final`` is written until it is put in place (None: not claimed here)."""
        final = Path(final)
        return next((c.staged for c in [*self._files, *self._folders] if c.final == final), None)

    def final(self, staged: Path) -> Path:
        """The output a staged path (one :meth:`file` or :meth:`folder` returned, or a path in a staged folder)
        becomes."""
        staged = Path(staged)
        for f in self._folders:
            if staged == f.staged or f.staged in staged.parents:
                return f.final / staged.relative_to(f.staged)
        for parent, staging in self._staging.items():
            if staged.parent == staging:
                return parent / staged.name
        return staged

    def _claim(self, path: Path, option: str) -> None:
        key = folder_resolved(path)
        if key in self._claimed:
            raise UsageError(f"{option} {path} is also {self._claimed[key]}; give each output its own name")
        self._claimed[key] = option

    def _make(self, folder: Path) -> None:
        """Create ``folder`` and its missing parents, remembered to be removed if nothing lands in them."""
        missing = [p for p in (folder, *folder.parents) if not p.exists() and not p.is_symlink()]
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ZooError(os_error_message(e, "could not create")) from None
        self._created.extend(missing)  # deepest first

    def _lock(self, path: Path, option: str) -> None:
        lock = path.with_name(f".{path.name}.lock")
        self._make(path.parent)
        who = json.dumps({"pid": os.getpid(), "command": f"lavo-zoo {self.command}"})
        try:
            fd = try_lock(lock, who.encode())
        except OSError as e:
            raise ZooError(os_error_message(e, "cannot lock")) from None
        if fd is None:
            try:
                holder = json.loads(read_holder(lock))
                described = f"{holder['command']}, pid {holder['pid']}"
            except (ValueError, KeyError, TypeError):
                described = "another process"
            raise UsageError(f"{option} {path} is being written by another command now ({described}); wait for it "
                             f"to finish, or give another {option}")
        self._locks.append((fd, lock))

    def _staging_for(self, parent: Path) -> Path:
        if parent not in self._staging:
            self._make(parent)
            self._staging[parent] = temporary_folder(parent / f"outputs-{next(_staging_counter)}")
        return self._staging[parent]

    # --------------------------------------------------------------------------------------------- the end
    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            if error is None:
                try:
                    self._commit()
                except BaseException as failure:
                    self._rollback()
                    told = self._for_user(failure)
                    if told is failure:
                        raise
                    raise told from None
                return
            self._rollback()
            told = self._for_user(error)
            if told is not error:
                raise told from None
        finally:
            self._release()

    def _commit(self) -> None:
        for f in self._folders:
            self._commit_folder(f)
        for f in self._files:
            if not f.staged.exists():  # an output the command had nothing for (an evaluator without outputs)
                continue
            follow_umask(f.staged)
            present = f.final.exists() or f.final.is_symlink()
            if present:  # what is there now must still be what the claim allowed
                dangling = f.final.is_symlink() and not f.final.exists()
                if not f.replace or not (dangling or f.kind is None
                                         or f.kind.recognise(head_of(f.final), f.final)):
                    raise _taken_meanwhile(f.final, f.option)
            try:
                move_into_place(f.staged, f.final, replace=present)
            except NameTaken:
                raise _taken_meanwhile(f.final, f.option) from None
            self.written.append(f.final)
        for staging in self._staging.values():
            shutil.rmtree(staging, ignore_errors=True)

    def _commit_folder(self, f: _Folder) -> None:
        present, others = present_files(f.staged, None)
        if others:
            raise ZooError(f"{f.final}: the command wrote links or special files ({listed(others)}), which "
                           f"{f.kind.name} does not hold")
        if not present:  # nothing to put there: the folder is not made
            shutil.rmtree(f.staged, ignore_errors=True)
            return
        follow_umask(f.staged)
        if f.kind.merge:
            self._merge(f, present)
        else:
            if f.final.is_dir():
                check_recorded(f.final, f.kind, self.overwrite, f.option)  # nothing of another appeared meanwhile
            elif f.final.exists() or f.final.is_symlink():
                raise _taken_meanwhile(f.final, f.option)
            if f.kind.manifest:
                write_manifest(f.staged, f.kind, present, self.command_line)
            swap_folder(f.staged, f.final)
        f.written = present
        self.written.append(f.final)

    def _merge(self, f: _Folder, present: dict[str, str]) -> None:
        """Move the staged files into the folder beside what it holds: a name taken by a file the manifest does not
        list (or, without ``overwrite``, by any file) is refused before anything moves."""
        recorded = recorded_files(f.final, str(f.kind.manifest)) if f.final.is_dir() else {}
        taken, foreign = [], []
        for rel in sorted(present):
            there = f.final / rel
            if there.exists() or there.is_symlink():
                taken.append(rel)
                mine = there.is_file() and not there.is_symlink() and recorded.get(rel) == sha256_file(there)
                if not mine:
                    foreign.append(rel)
        if foreign and self.overwrite:
            raise UsageError(f"{len(foreign)} file(s) {f.kind.writing.removesuffix(' into')} would write are there "
                             f"already, and not as an earlier {f.kind.writer} wrote them (its "
                             f"{f.final / str(f.kind.manifest)} does not list them): "
                             f"{listed([str(f.final / rel) for rel in foreign])}. Nothing was written; --overwrite "
                             f"replaces only what {f.kind.writer} wrote: give another {f.option}, or move those "
                             "files away")
        if taken and not self.overwrite:
            raise UsageError(f"{len(taken)} file(s) {f.kind.writing.removesuffix(' into')} would write already exist: "
                             f"{listed([str(f.final / rel) for rel in taken])}. Nothing was written; give another "
                             f"{f.option}, or add --overwrite to replace them.")
        self._make(f.final)
        for rel in sorted(present):
            (f.final / rel).parent.mkdir(parents=True, exist_ok=True)
            try:
                move_into_place(f.staged / rel, f.final / rel, replace=rel in taken)
            except NameTaken:
                raise _taken_meanwhile(f.final / rel, f.option) from None
        write_manifest(f.final, f.kind, {**recorded, **present}, self.command_line)
        shutil.rmtree(f.staged, ignore_errors=True)

    def _rollback(self) -> None:
        for staging in [*self._staging.values(), *(f.staged for f in self._folders)]:
            shutil.rmtree(staging, ignore_errors=True)

    def _release(self) -> None:
        for fd, lock in reversed(self._locks):
            release_lock(fd, lock)
        self._locks.clear()
        for folder in self._created:  # deepest first; only the ones left empty
            try:
                folder.rmdir()
            except OSError:
                pass
        self._created.clear()

    def _for_user(self, error: BaseException) -> BaseException:
        """``error`` as the user is told it: staging names replaced by the outputs' names, an ``OSError`` while
        writing an output (or a library's error for a full disk) as the message every command gives."""
        if isinstance(error, ZooError):
            text = self._named(str(error))
            return error if text == str(error) else type(error)(text)
        failure = _as_os_error(error)
        if failure is None:
            return error
        where = str(failure.filename or "")
        mine = [*self._staging.values(), *(f.staged for f in self._folders), *(f.final for f in self._files),
                *(f.final for f in self._folders)]
        if where and not any(where == str(p) or where.startswith(str(p) + os.sep) for p in mine):
            return error  # not writing an output: reading an input, say
        folder = next((f for f in self._folders if not where or where.startswith(str(f.staged))), None)
        if folder is not None:
            return ZooError(f"could not write {folder.kind.writing} {folder.final}: "
                            f"{os_error_message(_renamed(failure, None))}; nothing was written")
        named = self._named(where) if where else str(self._files[0].final if self._files else "")
        return ZooError(os_error_message(_renamed(failure, named), "could not write") + "; nothing was written")

    def _named(self, text: str) -> str:
        for f in self._folders:
            text = text.replace(str(f.staged), str(f.final))
        for parent, staging in self._staging.items():
            text = text.replace(str(staging), str(parent))
        return text


def _taken_meanwhile(path: Path, option: str) -> UsageError:
    return UsageError(f"{option} {path} was created by someone else while this command ran; it was not replaced. "
                      f"Give another {option}, or add --overwrite.")


def _as_os_error(error: BaseException) -> OSError | None:
    """``error`` as an OSError: itself, or for a library that reports a full disk in another exception (safetensors,
    torch.save) one for that reason."""
    if isinstance(error, OSError):
        return error
    text = str(error)
    for code, words in ((errno.ENOSPC, "No space left on device"), (errno.EDQUOT, "Disk quota exceeded")):
        if words in text:
            return OSError(code, words)
    return None


def _renamed(error: OSError, filename: str | None) -> OSError:
    renamed = OSError(error.errno, error.strerror)
    renamed.filename = filename
    return renamed


# ------------------------------------------------------------------------------------------------ scratch space
class scratch_folder:
    """A temporary folder for a command's intermediate files (``push``'s staging), removed when the block ends;
    a failure to write there (a full temporary disk) is the message every command gives.

    Args:
        purpose: what the files are for, for the message (``the upload``).
    """

    def __init__(self, purpose: str) -> None:
        self.purpose = purpose
        self.path: Path | None = None

    def __enter__(self) -> Path:
        try:
            self.path = scratch_space()
        except OSError as e:
            raise ZooError(os_error_message(e, f"could not stage {self.purpose} in")) from None
        return self.path

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        failure = _as_os_error(error) if error is not None else None
        if failure is not None and (not failure.filename or str(failure.filename).startswith(str(self.path))):
            raise ZooError(os_error_message(_renamed(failure, None), f"could not stage {self.purpose} in "
                                            f"{self.path.parent if self.path else 'the temporary folder'}")
                           + "; nothing was uploaded") from None


# ------------------------------------------------------------------------------------------------------ figures
def check_figure_path(path: Path, option: str = "--out") -> Path:
    """Refuse, before any work, a figure file whose suffix names no format matplotlib writes (the format is read
    from the suffix)."""
    return check_suffix(path, FIGURE, option)


def save_figure(fig: Any, path: Path, overwrite: bool = True, option: str = "--out", **savefig: Any) -> Path:
    """Write a matplotlib figure to ``path`` in the format its suffix names (refused before drawing if none),
    atomically (:func:`lavo_zoo.atomic.write_file`).

    Args:
        fig: the matplotlib figure.
        path: the file to write; its suffix names the format.
        overwrite: replace an existing file.
        option: how the user gave ``path`` (``--out``, ``--png``), for messages.
        **savefig: passed on to ``fig.savefig``.
    """
    import io

    path = check_figure_path(path, option)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lower().lstrip("."), **savefig)
    return write_file(path, buffer.getvalue(), overwrite, option)

