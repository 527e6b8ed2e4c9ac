"""Fetch a file into the cache: resumable HTTP(S) or huggingface_hub, full sha256 check, atomic move, file lock.

A transfer goes to ``<file>.part``; an interrupted one resumes with an HTTP Range request (from scratch when the
server ignores Range). The whole file is hashed before it is moved into place; a file that does not match the
expected sha256 is deleted. One process at a time writes a cache folder (``filelock``); others wait, then reuse.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

import click
import filelock
import requests
import urllib3
from tqdm import tqdm

from lavo_zoo.atomic import move_into_place
from lavo_zoo.checkpoints.cache import (
    PART_SUFFIX,
    RECORD,
    UNPACKED,
    UNPACKED_MANIFEST,
    entry_dir,
    lock_path,
    offline,
    offline_variable,
    read_record,
    sha256_file,
    write_json_atomic,
)
from lavo_zoo.errors import CheckpointError, UsageError, os_error_message, os_error_reason

CHUNK = 1 << 20
TIMEOUT = (10.0, 60.0)  # seconds: connect, and between bytes
ATTEMPTS = 3            # transfers per download: the first and resumptions after a cut-off connection
LOG_EVERY_S = 10.0      # progress lines when stderr is not a terminal (CI, files)
HF_RE = re.compile(r"^hf://(?P<repo>[^/@]+/[^/@]+)(?:@(?P<revision>[^/]+))?/(?P<path>.+)$")


class _Interrupted(Exception):
    """The connection ended before the whole body arrived; what was received stays in the .part file."""

    def __init__(self, received: int, total: int | None, reason: str) -> None:
        super().__init__(reason)
        self.received, self.total, self.reason = received, total, reason


def fetch(source: str, sha256: str | None = None, *, name: str | None = None, cache_dir: Path | str | None = None,
          timeout: tuple[float, float] = TIMEOUT) -> Path:
    """The cached, verified copy of ``source`` (http(s):// URL or hf://org/repo@revision/path), downloading it
    when needed.

    Args:
        source: an http(s):// URL or hf://org/repo@revision/path.
        sha256: the expected hex digest, or None (not checked).
        name: the index name, kept in the cache record (None: ``source``).
        cache_dir: the download cache (None: the default one).
        timeout: seconds (to connect, between bytes).
    """
    label = name or source
    if not source.startswith(("https://", "http://", "hf://")):
        raise UsageError(f"cannot download '{source}': give an http(s):// URL or hf://org/repo@revision/path")
    if source.startswith("http"):
        check_url(source)
    folder = entry_dir(source, cache_dir)
    if offline():
        cached = cached_file(folder, sha256)
        if cached is None:
            raise CheckpointError(f"offline mode ({offline_variable()}=1): {label} is not in the cache "
                                  f"{folder.parent.parent}. Download it while online (`lavo-zoo download {label}`) "
                                  f"or unset {offline_variable()}.")
        return cached
    with folder_lock(folder, label):
        cached = cached_file(folder, sha256)
        if cached is not None:
            return cached
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / RECORD, {**read_record(folder), "source": source, "name": name})
        try:
            return _download_into(folder, source, sha256, name, timeout)
        finally:
            if all(p.name == RECORD for p in folder.iterdir()):
                shutil.rmtree(folder)  # nothing worth keeping: no verified file, no .part to resume


def _download_into(folder: Path, source: str, sha256: str | None, name: str | None,
                   timeout: tuple[float, float]) -> Path:
    """Transfer ``source`` to ``<file>.part``, verify it, record it and move it into place."""
    label = name or source
    target = folder / _file_name(source)
    part = target.with_name(target.name + PART_SUFFIX)
    if source.startswith("hf://"):
        _hf_download(source, part)
    else:
        _http_download(source, part, timeout, label)
    actual = sha256_file(part)
    if sha256 is not None and actual != sha256:
        part.unlink()
        raise CheckpointError(f"sha256 mismatch for {label}: expected {sha256}, got {actual}. The download was "
                              "deleted; if this repeats, the file at the source is not the one that was published.")
    if sha256 is None:
        click.echo(f"warning: no sha256 given for {label}, so its integrity is not checked; it hashed to "
                   f"{actual} (pass --sha256 or append #sha256=HEX to the URL)", err=True)
    write_json_atomic(folder / RECORD, {
        "source": source, "name": name, "file": target.name, "sha256": actual, "pinned": sha256 is not None,
        "size": part.stat().st_size, "downloaded_at": datetime.now(UTC).isoformat(timespec="seconds")})
    shutil.rmtree(folder / UNPACKED, ignore_errors=True)  # unpacked from the file being replaced
    (folder / UNPACKED_MANIFEST).unlink(missing_ok=True)
    move_into_place(part, target)
    return target


def check_url(url: str) -> None:
    """Refuse, before anything is written, an http(s) URL that cannot be requested (no host, a malformed address)."""
    try:
        host = urlsplit(url).hostname
        requests.Request("GET", url).prepare()
    except (requests.RequestException, ValueError) as e:
        raise UsageError(f"'{url}' is not a valid URL ({e}); check it") from None
    if not host:
        raise UsageError(f"'{url}' names no host; give a URL such as https://host/path/file.tar.gz")


@contextmanager
def folder_lock(folder: Path, label: str) -> Iterator[None]:
    """Hold the cache folder's file lock (downloads, unpacking, removal), saying so when another process has it."""
    path = lock_path(folder)
    lock = filelock.FileLock(str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            click.echo(f"waiting for another process to finish with {label} ...", err=True)
            lock.acquire()
    except OSError as e:
        raise CheckpointError(f"cannot use the download cache {path.parent.parent}: {os_error_message(e)}. Point "
                              "LAVO_ZOO_CACHE (or --cache-dir) at a folder you can write to") from None
    try:
        yield
    finally:
        lock.release()


def cached_file(folder: Path, sha256: str | None) -> Path | None:
    """The folder's finished file when it re-hashes to its record (and to ``sha256`` when given), else None.
    A file that no longer matches its record is deleted."""
    record = read_record(folder)
    path = folder / record["file"] if record.get("file") else None
    if path is None or not path.is_file() or (sha256 is not None and record.get("sha256") != sha256):
        return None
    actual = sha256_file(path)
    if actual != record.get("sha256"):
        click.echo(f"warning: cached {path} is corrupt (sha256 {actual}, recorded {record.get('sha256')}); "
                   "deleted", err=True)
        path.unlink()
        return None
    return path


def _file_name(source: str) -> str:
    name = unquote(urlsplit(source).path.rstrip("/").rsplit("/", 1)[-1]) if "://" in source else ""
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "_", name) or "download"


# ------------------------------------------------------------------------------------------------------------ http
def _http_download(url: str, part: Path, timeout: tuple[float, float], label: str) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _transfer(url, part, timeout, label)
            return
        except _Interrupted as e:
            if attempt == ATTEMPTS:
                of = f" of {e.total}" if e.total is not None else ""
                raise CheckpointError(f"the download of {label} was cut off after {e.received}{of} bytes "
                                      f"({ATTEMPTS} attempts; last: {e.reason}). Run the same command again to "
                                      f"resume from {part}.") from e
            click.echo(f"transfer of {label} interrupted after {e.received} bytes ({e.reason}); resuming", err=True)


def _transfer(url: str, part: Path, timeout: tuple[float, float], label: str) -> None:
    """One HTTP request that appends to ``part`` (Range) or rewrites it; raises _Interrupted on a short body."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={offset}-"} if offset else {})}
    try:
        response = requests.get(url, headers=headers, stream=True, timeout=timeout)
    except requests.Timeout as e:
        raise CheckpointError(f"timed out waiting for {_host(url)} to send {label} (limits: {timeout[0]:g} s to "
                              f"connect, {timeout[1]:g} s per read). Check your network and retry.") from e
    except requests.ConnectionError as e:
        raise CheckpointError(f"cannot connect to {_host(url)} to download {label}: {_reason(e)}. Check the URL and "
                              "your network, or use a cached copy with LAVO_ZOO_OFFLINE=1.") from e
    except requests.TooManyRedirects:
        raise UsageError(f"{url} redirects in a loop (more than {requests.models.DEFAULT_REDIRECT_LIMIT} redirects) "
                         f"instead of serving {label}; check the URL (the file may have moved)") from None
    except (requests.exceptions.InvalidSchema, requests.exceptions.InvalidURL, requests.exceptions.MissingSchema) as e:
        raise UsageError(f"{url} redirects to an address lavo-zoo does not download from ({e}); downloads go over "
                         f"http(s) only: check the URL of {label}") from None
    with response:
        if response.status_code == 416 and offset:
            if _range_total(response) == offset:
                return  # the .part already holds the whole file
            part.unlink()
            raise _Interrupted(0, None, "server refused to resume; starting over")
        if response.status_code == 206 and _range_start(response) == offset:
            mode = "ab"
        elif response.status_code == 206:
            part.unlink()
            raise _Interrupted(0, None, "server resumed at the wrong offset; starting over")
        elif response.status_code == 200:
            mode, offset = "wb", 0  # the server ignored Range: start over
        else:
            raise CheckpointError(_http_error(response, url, label))
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else None
        received = offset
        with _writing(part, label), open(part, mode) as f, tqdm(
                total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
                file=sys.stderr, disable=None, leave=False) as bar:
            logged = time.monotonic()
            try:  # raw bytes (no content decoding), keeping whatever arrived before a connection broke
                for chunk in response.raw.stream(CHUNK, decode_content=False):
                    f.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
                    if bar.disable and time.monotonic() - logged > LOG_EVERY_S:  # no terminal: plain log lines
                        logged = time.monotonic()
                        click.echo(f"{label}: {received}{f' of {total}' if total else ''} bytes", err=True)
            except (urllib3.exceptions.HTTPError, requests.RequestException, ConnectionError, TimeoutError) as e:
                raise _Interrupted(received, total, _reason(e)) from e
    if total is not None and received < total:
        raise _Interrupted(received, total, "connection closed early")


@contextmanager
def _writing(part: Path, label: str) -> Iterator[None]:
    """Turn a failed write of the download (a full disk, a cache made read-only) into a message that says where,
    why, and that what arrived is kept for the next run to resume from."""
    try:
        yield
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO):
            raise
        raise CheckpointError(f"could not write the download of {label} to {part}: {os_error_reason(e)}. What "
                              "arrived is kept there; free space (or point LAVO_ZOO_CACHE / --cache-dir at another "
                              "folder) and run the same command again to resume") from None


def _range_start(response: requests.Response) -> int | None:
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return int(match.group(1)) if match else None


def _range_total(response: requests.Response) -> int | None:
    match = re.match(r"bytes [\d*-]+/(\d+)", response.headers.get("Content-Range", ""))
    return int(match.group(1)) if match else None


def _http_error(response: requests.Response, url: str, label: str) -> str:
    status = f"HTTP {response.status_code} {response.reason or ''}".strip()
    if response.status_code == 404:
        return f"not found ({status}): {url}. The file may have moved; check the URL or the index entry for {label}."
    if response.status_code in (401, 403):
        return f"access denied ({status}) for {url}; the file is not public or needs credentials."
    return f"the server answered {status} for {url}; try again later."


def _host(url: str) -> str:
    return urlsplit(url).netloc or url


def _reason(error: Exception) -> str:
    """The innermost useful text of a requests/urllib3 error (e.g. 'Connection refused')."""
    text = str(error)
    if "IncompleteRead" in text:
        return "connection closed early"
    for pattern in (r"\[Errno -?\d+\] ([^'\")\]]+)", r"(Read timed out)"):
        match = re.search(pattern, text)
        if match:
            return match.group(1).strip()
    return text


# -------------------------------------------------------------------------------------------------------------- hf
def parse_hf(ref: str) -> tuple[str, str, str]:
    """(repo_id, revision, path) of ``hf://org/repo@revision/path`` (revision defaults to main)."""
    match = HF_RE.match(ref)
    if match is None:
        raise UsageError(f"'{ref}' is not a Hugging Face reference; expected hf://org/repo@revision/path/to/file")
    return match["repo"], match["revision"] or "main", match["path"]


def _hf_download(ref: str, part: Path) -> None:
    """Download through huggingface_hub into a scratch folder, then move the file to ``part`` for verification."""
    repo_id, revision, path = parse_hf(ref)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as e:
        raise CheckpointError(f"{ref} needs huggingface_hub, which is not installed: pip install 'lavo-zoo[hf]'") from e
    scratch = part.parent / "hf"
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/")  # read now (huggingface_hub reads it once, on import)
    try:
        downloaded = hf_hub_download(repo_id=repo_id, filename=path, revision=revision, local_dir=scratch,
                                     **({"endpoint": endpoint} if endpoint else {}))
    except Exception as e:
        raise CheckpointError(f"cannot download {ref} from the Hugging Face Hub: {e}") from e
    move_into_place(Path(downloaded), part)
    shutil.rmtree(scratch, ignore_errors=True)
