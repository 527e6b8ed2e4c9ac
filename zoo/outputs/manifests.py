"""What a folder output records: its manifest (``<command>-manifest.json``), every file the command wrote with its
sha256, which ``--overwrite`` replaces and nothing else (:func:`check_recorded`). Torch-free."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from lavo_zoo.atomic import (
    put_file,
)
from lavo_zoo.errors import UsageError
from lavo_zoo.outputs.kinds import FolderKind

NOT_REGULAR = "(not a regular file)"  # what tree_hashes lists for a link or a special file


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 of the file ``path`` as hex digits, read ``chunk`` bytes at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tree_hashes(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder``; a link or a special file is listed as such (never
    followed: :data:`NOT_REGULAR`), so that it never matches a manifest of regular files."""
    found: dict[str, str] = {}
    for root, dirs, names in os.walk(folder, followlinks=False):
        for name in [*names, *(d for d in dirs if os.path.islink(os.path.join(root, d)))]:
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            found[rel] = sha256_file(path) if path.is_file() and not path.is_symlink() else NOT_REGULAR
    return found


def recorded_files(folder: Path, manifest: str) -> dict[str, str]:
    """{relative path: sha256} of what an earlier command recorded writing into ``folder`` in its ``manifest``
    (empty without one)."""
    try:
        data = json.loads((Path(folder) / manifest).read_text(encoding="utf-8"))
        files = data["files"]
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def present_files(folder: Path, manifest: str | None) -> tuple[dict[str, str], list[str]]:
    """({relative path: sha256} of the regular files under ``folder`` but its manifest, [the other entries: links,
    special files]), without following links."""
    found = tree_hashes(folder)
    if manifest is not None:
        found.pop(manifest, None)
    others = [rel for rel, digest in found.items() if digest == NOT_REGULAR]
    return {rel: digest for rel, digest in found.items() if digest != NOT_REGULAR}, others


def listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_recorded(folder: Path, kind: FolderKind, overwrite: bool, option: str = "--out") -> None:
    """Refuse to replace the folder ``folder`` unless it holds nothing, or only the files an earlier command of
    ``kind`` recorded in its manifest, unchanged (and then only with ``overwrite``); nothing is touched.

    Args:
        folder: the folder a command is about to write.
        kind: the kind of folder the command writes (its manifest's name and command).
        overwrite: the command was given ``--overwrite``.
        option: how the user gave ``folder``, for the message.

    Raises:
        UsageError: the folder holds other files, changed ones, or a recorded output without ``overwrite``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    present, others = present_files(folder, kind.manifest)
    if not present and not others:
        return
    recorded = recorded_files(folder, kind.manifest) if kind.manifest else {}
    foreign = sorted(others + [rel for rel, digest in present.items() if recorded.get(rel) != digest])
    if foreign:
        raise UsageError(f"{folder} holds files that no {kind.writer} recorded writing there ({listed(foreign)}); "
                         f"{'an' if kind.writer[0] in 'aeiou' else 'a'} {kind.writer} replaces only the files an "
                         f"earlier one listed in its {kind.manifest}, and touches nothing else, even with --overwrite. "
                         f"Nothing was changed: give another {option}, or move those files away")
    if not overwrite:
        raise UsageError(f"{folder} holds the {len(present)} files of an earlier {kind.writer} (listed in its "
                         f"{kind.manifest}); give another {option}, or add --overwrite to replace them")


def write_manifest(folder: Path, kind: FolderKind, files: Mapping[str, str], command: str | None = None) -> None:
    """Write ``folder``'s manifest: ``files`` ({relative path: sha256}), what the command of ``kind`` wrote.

    Args:
        folder: the folder written.
        kind: the kind of folder (its manifest's name and command).
        files: {relative path: sha256} of the files written.
        command: the command line, recorded, or None.
    """
    manifest = {"written_by": f"lavo-zoo {kind.command}", **({"command": command} if command else {}),
                "files": dict(sorted(files.items()))}
    put_file(Path(folder) / str(kind.manifest), json.dumps(manifest, indent=2) + "\n")

