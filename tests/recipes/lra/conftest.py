"""LRA tests write built-in data under one session temp dir (never the user cache)."""
import pytest


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path_factory.getbasetemp() / "lavo-zoo-cache"))
