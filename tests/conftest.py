"""Shared test set-up: the test-only toy recipe is registered, and paths to the repository's shared data."""
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import toy_recipe  # noqa: F401  (registers the "toy" recipe)

SHARED_DATA = TESTS.parent.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` next to the repository; tests that need it skip cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it exists only on the project's machines)")
    return SHARED_DATA
