"""Uploading a release to the Hugging Face Hub (``lavo-zoo push``): the archive and its model card in one commit
through ``huggingface_hub`` (the ``hf`` extra), then the archive downloaded back through the verified ``hf://`` path.

The endpoint is ``HF_ENDPOINT`` (default the public Hub), the token the usual one of huggingface_hub (``HF_TOKEN``,
else the one ``hf auth login`` saved). Files are committed through the Hub's commit API, never by pushing git refs.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from lavo_zoo.checkpoints.cache import offline, offline_variable
from lavo_zoo.checkpoints.download import fetch
from lavo_zoo.errors import CheckpointError, UsageError

REPO_RE = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w.-]+))?/?$", re.ASCII)
ARCHIVE_RE = re.compile(r"^[A-Za-z0-9][\w.-]*\.(tar\.gz|tgz)$", re.ASCII)
DEFAULT_BRANCH = "main"


def parse_repo(ref: str) -> tuple[str, str]:
    """(repo_id, branch) of ``hf://org/repo[@branch]`` (the branch defaults to main)."""
    match = REPO_RE.match(ref)
    if match is None:
        raise UsageError(f"'{ref}' is not a Hugging Face repository reference; expected hf://ORG/REPO or "
                         "hf://ORG/REPO@BRANCH (no path: the archive's name comes from --filename)")
    return match["repo"], match["revision"] or DEFAULT_BRANCH


def hub_api() -> Any:
    """A ``huggingface_hub.HfApi`` for ``HF_ENDPOINT`` (read now, so that a changed environment counts)."""
    try:
        from huggingface_hub import HfApi
    except ImportError as e:
        raise UsageError("pushing to the Hugging Face Hub needs huggingface_hub, which is not installed: "
                         "pip install 'lavo-zoo[hf]'") from e
    if offline():
        raise UsageError(f"offline mode ({offline_variable()}=1): pushing needs the network; unset "
                         f"{offline_variable()}")
    return HfApi(endpoint=os.environ.get("HF_ENDPOINT", "").rstrip("/") or None)


def upload(api: Any, repo_id: str, branch: str, files: dict[str, Path], message: str,
           private: bool = False) -> str:
    """Commit ``files`` ({path in the repository: local file}) to ``repo_id`` at ``branch`` in one commit, creating
    the repository (``private`` when asked; an existing one keeps its visibility) and the branch where missing;
    returns the commit's id.

    Args:
        api: a ``huggingface_hub.HfApi``.
        repo_id: the repository, ``org/name``.
        branch: the branch to commit to.
        files: {path in the repository: local file}.
        message: the commit message.
        private: create a missing repository private.
    """
    from huggingface_hub import CommitOperationAdd

    where = f"hf://{repo_id}@{branch}"
    try:
        api.create_repo(repo_id, private=True if private else None, exist_ok=True)
        if branch != DEFAULT_BRANCH:
            api.create_branch(repo_id, branch=branch, exist_ok=True)
        operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(file)) for path, file in files.items()]
        info = api.create_commit(repo_id, operations=operations, commit_message=message, revision=branch)
    except Exception as e:  # huggingface_hub's HTTP, network and validation errors alike
        raise CheckpointError(f"uploading to {where} failed: {_reason(e)}") from e
    oid = getattr(info, "oid", None)
    if not (isinstance(oid, str) and re.fullmatch(r"[0-9a-f]{40}", oid)):
        raise CheckpointError(f"uploading to {where}: the Hub answered without a commit id ({oid!r}); check the "
                              f"repository before adding it to an index")
    return oid


def verify(repo_id: str, commit: str, filename: str, sha256: str, name: str,
           cache_dir: Path | str | None = None) -> tuple[str, Path]:
    """(source, cached file): the uploaded archive downloaded back at ``commit`` through the hf:// path of the
    download cache, which checks its sha256.

    Args:
        repo_id: the repository, ``org/name``.
        commit: the commit the upload made.
        filename: the archive's path in the repository.
        sha256: the archive's hex digest.
        name: the index name, for the cache record.
        cache_dir: the download cache (None: the default one).

    Raises:
        CheckpointError: the download or its check failed.
    """
    source = f"hf://{repo_id}@{commit}/{filename}"
    try:
        return source, fetch(source, sha256, name=name, cache_dir=cache_dir)
    except CheckpointError as e:
        raise CheckpointError(f"uploaded {filename} to {repo_id} as commit {commit}, but downloading it back failed "
                              f"verification: {e}. Do not add it to an index; push again.") from e


def _reason(error: Exception) -> str:
    """What went wrong, with the fix for the usual HTTP answers (the token is never part of the message)."""
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    text = " ".join(str(error).split())
    if status == 401:
        return (f"the Hub refused the credentials (HTTP 401): log in with `hf auth login` or set HF_TOKEN to a token "
                f"with write access ({text})")
    if status == 403:
        return f"no write access to this repository (HTTP 403): use a token with write access to it ({text})"
    return text if status is not None else f"{type(error).__name__}: {text}"
