"""Shared test set-up: the test-only toy recipe is registered, caches stay out of the user's cache directory, and
the folder of real datasets some tests read (``LAVO_ZOO_TEST_DATA``; those tests skip where it is absent)."""
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import toy_recipe  # noqa: F401  (registers the "toy" recipe)

# Under pytest-xdist (the README's `-n auto`) the workers share the cores: each gets its share of torch threads, and
# so do the commands tests run in subprocesses (OMP_NUM_THREADS), instead of every worker using every core at once.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    THREADS = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

REAL_DATA = Path(os.environ.get("LAVO_ZOO_TEST_DATA", TESTS.parent.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """The folder of real datasets (ETT-small, pcn-demo, pg19-mini, ljspeech-mini) that tests of the real-format
    loaders read; they skip cleanly where it is absent."""
    if not REAL_DATA.is_dir():
        pytest.skip(f"real data folder {REAL_DATA} is absent (set LAVO_ZOO_TEST_DATA to use one)")
    return REAL_DATA


@pytest.fixture(autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$LAVO_ZOO_CACHE for every test (token caches, generated built-in datasets): one directory per session, built
    once and reused, never the user cache. Tests that need an empty cache set their own (tests/checkpoints)."""
    cache = tmp_path_factory.getbasetemp() / "lavo-zoo-cache"
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session", autouse=True)
def session_cache_for_wider_fixtures(tmp_path_factory: pytest.TempPathFactory):
    """The same $LAVO_ZOO_CACHE, set before any module- or session-scoped fixture runs (pytest sets up wider scopes
    first, so ``session_cache`` alone comes too late for them: the recipe contract's ``tiny`` fixture would build
    its data in the user cache, and the tests then build it a second time in the session cache)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAVO_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "lavo-zoo-cache"))
        yield
