"""Every LM test writes its token cache and built-in corpus under one session temp dir, never the user cache."""
import pytest


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """$LAVO_ZOO_CACHE for this test: a directory shared by the session's tests (built once, then reused)."""
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "lavo-zoo-cache"))
