"""Checkpoint archives: safe unpacking of .tar.gz/.tgz/.tar/.zip, packing a checkpoint directory (with its model
card) as .tar.gz, and reading the card back from an archive in memory.

Every member is checked before anything is written: absolute paths, ``..``, links that point outside the target,
device files and FIFOs are refused (tar through the standard library's ``data`` filter, PEP 706).
"""
from __future__ import annotations

import io
import re
import stat
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from lavo_zoo.atomic import write_atomic
from lavo_zoo.errors import CheckpointError
from lavo_zoo.outputs import CHECKPOINT_FILES

TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")
ZIP_SUFFIXES = (".zip",)
REQUIRED_FILES, TRAIN_STATE = CHECKPOINT_FILES[:3], CHECKPOINT_FILES[3]  # weights, config, meta; optimiser state
CARD = "README.md"  # the model card every exported archive carries (lavo_zoo.checkpoints.card)


def is_archive(path: Path) -> bool:
    """Whether ``path`` names a checkpoint archive (.tar.gz, .tgz, .zip)."""
    return path.name.lower().endswith(TAR_SUFFIXES + ZIP_SUFFIXES)


def safe_extract(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into the existing directory ``dest``, refusing any member that could land outside it."""
    name = archive.name.lower()
    try:
        if name.endswith(ZIP_SUFFIXES):
            _extract_zip(archive, dest)
        elif name.endswith(TAR_SUFFIXES):
            _extract_tar(archive, dest)
        else:
            raise CheckpointError(f"{archive} is not an archive lavo-zoo can unpack ({', '.join(TAR_SUFFIXES)}, .zip)")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"{archive} is not a readable archive: {e}") from e


def _extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            if _is_absolute(member.name):
                raise CheckpointError(f"refusing to unpack {archive}: unsafe member '{member.name}' (absolute path)")
            try:
                tarfile.data_filter(member, str(dest))
            except tarfile.FilterError as e:
                raise CheckpointError(f"refusing to unpack {archive}: unsafe member '{member.name}' ({e})") from e
        tar.extractall(dest, members=members, filter="data")


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            problem = _zip_member_problem(info)
            if problem:
                raise CheckpointError(f"refusing to unpack {archive}: unsafe member '{info.filename}' ({problem})")
        zf.extractall(dest)


def _zip_member_problem(info: zipfile.ZipInfo) -> str | None:
    path = PurePosixPath(info.filename.replace("\\", "/"))
    mode = info.external_attr >> 16
    if _is_absolute(info.filename):
        return "absolute path"
    if ".." in path.parts:
        return "path leaves the target directory"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # no type bits (0o600): a file
        return "special file"
    return None


def _is_absolute(name: str) -> bool:
    """True for /x, \\x and C:x style names (the data filter would silently make them relative)."""
    return name.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", name))


def find_checkpoint_dir(root: Path) -> Path:
    """``root`` or its only subdirectory, whichever holds a checkpoint (model.safetensors, config.yaml, meta.json)."""
    candidates = [root, *(d for d in root.iterdir() if d.is_dir())]
    found = [d for d in candidates if all((d / f).is_file() for f in REQUIRED_FILES)]
    if len(found) != 1:
        raise CheckpointError(f"no single checkpoint directory (with {', '.join(REQUIRED_FILES)}) found in {root}")
    return found[0]


def check_checkpoint_dir(path: Path) -> dict[str, Any]:
    """meta.json of a complete checkpoint directory whose weights match its weights_sha256 (else CheckpointError)."""
    from lavo_zoo.engine.checkpoint_io import read_meta, verify_weights  # imports torch: only when checking

    meta = read_meta(path)
    verify_weights(path, meta)
    return meta


def pack_checkpoint(checkpoint: Path, out: Path, with_train_state: bool = False,
                    extra: dict[str, str | bytes] | None = None, overwrite: bool = True) -> list[str]:
    """Write ``checkpoint``'s files as ``out`` (.tar.gz) under one top-level folder named after ``out``; ``extra``
    ({file name: content}, e.g. the model card ``README.md``) is added beside them, replacing a file of that name,
    and first, so that :func:`read_card` finds it without decompressing the weights.

    Only a checkpoint's own files are packed (model.safetensors, config.yaml, meta.json and, with
    ``with_train_state``, train_state.pt): anything else in the folder (a lock file, notes, editor backups) stays
    out of a release. The archive is written to a temporary file linked into place when complete (replacing ``out``
    only with ``overwrite``); a failure leaves neither ``out`` nor the temporary file. Returns the names left out.

    Args:
        checkpoint: the checkpoint directory.
        out: the archive to write (.tar.gz).
        with_train_state: pack train_state.pt too (the optimiser state, to resume training).
        extra: {file name: content} added beside the checkpoint's files, or None.
        overwrite: replace an existing ``out``.
    """
    top = out.name.removesuffix(".tar.gz").removesuffix(".tgz")
    extra = {name: data.encode("utf-8") if isinstance(data, str) else data for name, data in (extra or {}).items()}
    wanted = {*REQUIRED_FILES, *([TRAIN_STATE] if with_train_state else [])} - set(extra)
    present = sorted(p.name for p in checkpoint.iterdir())
    files = [checkpoint / name for name in present if name in wanted and (checkpoint / name).is_file()]

    def fill(f: BinaryIO) -> None:
        with tarfile.open(fileobj=f, mode="w:gz", dereference=True) as tar:
            for name, data in sorted(extra.items()):
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size, info.mtime = len(data), int(time.time())
                tar.addfile(_normalise(info), io.BytesIO(data))
            for path in files:
                tar.add(path, arcname=f"{top}/{path.name}", filter=_normalise)

    write_atomic(out, fill, overwrite, "OUT")
    return [name for name in present if name not in wanted and name not in extra
            and not (name == TRAIN_STATE and not with_train_state)]


def read_card(archive: Path, limit: int = 1 << 20) -> str | None:
    """The model card (``README.md`` of the checkpoint folder) inside ``archive``, read in memory, nothing unpacked;
    None when the archive has none. Only a regular file at the archive's root or in a top-level folder counts (where
    :func:`find_checkpoint_dir` looks), beside meta.json where there are several; links, absolute paths and ``..``
    are never followed. A card over ``limit`` bytes or an unreadable archive is a CheckpointError."""
    try:
        if archive.name.lower().endswith(ZIP_SUFFIXES):
            with zipfile.ZipFile(archive) as zf:
                member = _card_member((i.filename, i) for i in zf.infolist()
                                      if not i.is_dir() and _zip_member_problem(i) is None)
                if member is None:
                    return None
                _check_card_size(member.file_size, limit, archive, member.filename)
                data = zf.read(member)
        elif archive.name.lower().endswith(TAR_SUFFIXES):
            with tarfile.open(archive) as tar:  # members are read lazily: the scan stops once the card is placed
                member = _card_member((m.name, m) for m in tar if m.isfile())
                if member is None:
                    return None
                _check_card_size(member.size, limit, archive, member.name)
                data = tar.extractfile(member).read()
        else:
            raise CheckpointError(f"{archive} is not an archive lavo-zoo can read ({', '.join(TAR_SUFFIXES)}, .zip)")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise CheckpointError(f"{archive} is not a readable archive: {e}") from e
    return data.decode("utf-8", errors="replace")


def _card_member(members: Iterator[tuple[str, Any]]) -> Any:
    """Of (name, member) pairs, the card at the root or in a top-level folder: the first one found beside meta.json,
    else the first one found."""
    seen: set[PurePosixPath] = set()
    cards: dict[PurePosixPath, Any] = {}
    for name, member in members:
        if _is_absolute(name):
            continue
        path = PurePosixPath(name.replace("\\", "/"))
        if ".." in path.parts or len(path.parts) > 2:
            continue
        seen.add(path)
        if path.name == CARD:
            cards.setdefault(path.parent, member)
        beside_meta = [folder for folder in cards if folder / "meta.json" in seen]
        if beside_meta:
            return cards[beside_meta[0]]
    return next(iter(cards.values()), None)


def _check_card_size(size: int, limit: int, archive: Path, member: str) -> None:
    if size > limit:
        raise CheckpointError(f"{archive}: {member} is {size} bytes, more than a model card may be ({limit}); "
                              "it is not shown")


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Strip owner names and ids so that the archive does not leak the packer's account."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o644
    return info
