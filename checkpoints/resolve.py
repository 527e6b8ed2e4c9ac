"""From what a user types (index name, URL, hf:// reference) to a verified file and an unpacked checkpoint."""
from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from lavo_zoo.atomic import swap_folder, temporary_folder
from lavo_zoo.checkpoints.archive import check_checkpoint_dir, find_checkpoint_dir, is_archive, safe_extract
from lavo_zoo.checkpoints.cache import (
    UNPACKED,
    UNPACKED_MANIFEST,
    read_record,
    unpacked_problem,
    write_json_atomic,
)
from lavo_zoo.checkpoints.download import fetch, folder_lock
from lavo_zoo.checkpoints.hf_format import hf_recipe, import_hf_folder
from lavo_zoo.checkpoints.index import load_index
from lavo_zoo.errors import CheckpointError, UsageError, os_error_message
from lavo_zoo.outputs import tree_hashes

SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass(frozen=True)
class Reference:
    """Where a checkpoint file comes from and what it must hash to."""

    source: str
    sha256: str | None
    name: str | None = None
    recipe: str | None = None  # what the index entry says the checkpoint is a checkpoint of


def parse_reference(ref: str, sha256: str | None = None) -> Reference:
    """An index name (``lm/tiny-lavo@v1``), an http(s) URL (optionally ``#sha256=HEX``) or ``hf://org/repo@rev/path``;
    ``sha256`` (e.g. from ``--sha256``) must agree with any hash the reference already pins."""
    given = _checked_sha256(sha256, "--sha256") if sha256 else None
    if "://" in ref:
        source, _, fragment = ref.partition("#")
        if fragment and not fragment.startswith("sha256="):
            raise UsageError(f"unknown URL fragment '#{fragment}' in {ref}; the only one understood is #sha256=HEX")
        pinned = _checked_sha256(fragment.removeprefix("sha256="), ref) if fragment else None
        return Reference(source, _agree(given, pinned, ref))
    if "@" in ref:
        entry = load_index().get(ref)
        return Reference(entry.source, _agree(given, entry.sha256, ref), entry.name, entry.recipe)
    raise UsageError(f"'{ref}' is neither an index name (<domain>/<config>@<tag>, see `lavo-zoo list checkpoints`) "
                     "nor a URL (https://... or hf://org/repo@revision/path)")


def fetch_reference(ref: str, sha256: str | None = None, cache_dir: Path | str | None = None) -> Path:
    """The verified cached file for ``ref``, downloaded when needed."""
    reference = parse_reference(ref, sha256)
    return fetch(reference.source, reference.sha256, name=reference.name, cache_dir=cache_dir)


def resolve_checkpoint(ref: str, cache_dir: Path | str | None = None) -> Path:
    """A local checkpoint directory for ``ref``: downloaded, verified and unpacked into the cache as needed; an
    index entry's recipe is checked against the checkpoint's."""
    reference = parse_reference(ref)
    path = fetch(reference.source, reference.sha256, name=reference.name, cache_dir=cache_dir)
    return unpack_checkpoint(path, ref, reference.recipe)


@contextlib.contextmanager
def open_checkpoint(ref: str) -> Iterator[Path]:
    """A checkpoint directory for anything a user may type, valid inside the ``with`` block: a directory as is; a
    transformers folder of a lavo-zoo model (``export --format hf``, ``Trainer``) written as a checkpoint into a
    temporary directory; a local .tar.gz/.zip unpacked safely into a temporary directory (both removed afterwards);
    an index name, URL or hf:// reference through the verified download cache."""
    path = Path(ref)
    if path.is_dir() and hf_recipe(path) is not None:
        with tempfile.TemporaryDirectory(prefix="lavo-zoo-ckpt-") as tmp:
            yield import_hf_folder(path, Path(tmp))
    elif path.is_dir():
        yield path
    elif path.is_file() and is_archive(path):
        with tempfile.TemporaryDirectory(prefix="lavo-zoo-ckpt-") as tmp:
            safe_extract(path, Path(tmp))
            yield find_checkpoint_dir(Path(tmp))
    elif "://" in ref or "@" in ref:
        yield resolve_checkpoint(ref)
    else:
        raise UsageError(f"checkpoint '{ref}' is neither a directory nor a .tar.gz/.zip archive; give a checkpoint "
                         "directory (e.g. runs/x/checkpoints/last), an archive, an index name "
                         "(lavo-zoo list checkpoints), a URL or hf://...")


def unpack_checkpoint(archive: Path, label: str, recipe: str | None = None) -> Path:
    """The checkpoint directory unpacked (safely, with its weights checked) next to a cached archive. What was
    unpacked is recorded (``unpacked.json``) and checked on every use: a copy changed since (an edited config, a
    swapped weights file and meta.json, a file added) is unpacked again from the verified archive. ``recipe``: what
    the index entry says the checkpoint is, refused when the checkpoint's meta.json says otherwise."""
    from lavo_zoo.engine.checkpoint_io import read_meta

    folder, dest = archive.parent, archive.parent / UNPACKED
    archive_sha256 = read_record(folder).get("sha256")
    if not dest.is_dir() or unpacked_problem(folder, archive_sha256) is not None:
        if not is_archive(archive):
            raise CheckpointError(f"{label} is {archive}, which is not a checkpoint archive (.tar.gz, .tgz, .zip)")
        with folder_lock(folder, label):
            problem = unpacked_problem(folder, archive_sha256) if dest.is_dir() else None
            if problem is not None and (folder / UNPACKED_MANIFEST).exists():
                click.echo(f"warning: the cached copy of {label} is not what was unpacked ({problem}); unpacking "
                           "it again from the verified download", err=True)
            if not dest.is_dir() or problem is not None:
                _unpack(archive, folder, archive_sha256)
    found = find_checkpoint_dir(dest)
    if recipe is not None and read_meta(found).get("recipe") != recipe:
        raise CheckpointError(f"{label}: the index entry says it is a '{recipe}' checkpoint, but its meta.json says "
                              f"'{read_meta(found).get('recipe')}'; the index entry is wrong (report it), nothing "
                              "was loaded")
    return found


def _unpack(archive: Path, folder: Path, archive_sha256: str | None) -> None:
    """Unpack ``archive`` into ``folder/checkpoint`` through a temporary folder, recording what it holds."""
    tmp: Path | None = None
    try:
        tmp = temporary_folder(folder / UNPACKED)
        safe_extract(archive, tmp)
        check_checkpoint_dir(find_checkpoint_dir(tmp))
        (folder / UNPACKED_MANIFEST).unlink(missing_ok=True)
        swap_folder(tmp, folder / UNPACKED)
        write_json_atomic(folder / UNPACKED_MANIFEST, {"archive_sha256": archive_sha256,
                                                        "files": tree_hashes(folder / UNPACKED)})
    except OSError as e:
        raise CheckpointError(f"could not unpack {archive} in the cache: {os_error_message(e)}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _checked_sha256(value: str, where: str) -> str:
    if not SHA256_RE.match(value):
        raise UsageError(f"sha256 from {where} must be 64 hex digits, got '{value}'")
    return value.lower()


def _agree(given: str | None, pinned: str | None, ref: str) -> str | None:
    if given and pinned and given != pinned:
        raise UsageError(f"--sha256 {given} contradicts the sha256 {pinned} that {ref} pins")
    return given or pinned
