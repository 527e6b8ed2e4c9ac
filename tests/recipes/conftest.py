"""Every recipe test writes its caches (token caches, built-in corpora) under one session temp dir, not the user
cache."""
import pytest


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """$LAVO_ZOO_CACHE for this test: a directory shared by the session's tests (built once, then reused)."""
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "lavo-zoo-cache"))
