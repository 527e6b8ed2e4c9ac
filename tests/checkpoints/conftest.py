"""Fixtures for the checkpoint tests: a loopback HTTP file server, an isolated cache and a fake checkpoint."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.checkpoints.helpers import FileServer, Handler, make_checkpoint


@pytest.fixture
def server() -> Iterator[FileServer]:
    """A threaded HTTP server on 127.0.0.1 (random port), shut down after the test."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state = FileServer(base=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        if state.gate is not None:
            state.gate.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty cache and online mode."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(cache))
    for var in ("LAVO_ZOO_OFFLINE", "HF_HUB_OFFLINE", "LAVO_ZOO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    return cache


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    return make_checkpoint(tmp_path / "run" / "checkpoints" / "step-200")
