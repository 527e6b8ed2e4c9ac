"""Shared TTS fixtures: a small spoken built-in corpus in the session cache (tests/conftest.py)."""
from pathlib import Path

import pytest

from tests.recipes.tts.helpers import BUILTIN_SIZE


@pytest.fixture(scope="session")
def builtin_root(tmp_path_factory) -> Path:
    """The built-in corpus of BUILTIN_SIZE sentences, spoken once into the session cache."""
    from lavo_zoo.engine.recipe import get_recipe
    from lavo_zoo.recipes.tts.data import DataConfig

    return get_recipe("tts").data_path(DataConfig(builtin_size=BUILTIN_SIZE))
