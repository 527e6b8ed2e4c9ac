"""The built-in spoken corpus (builtin.py): the real LJSpeech layout, spoken sentences; what `lavo-zoo data tts`
writes."""
from pathlib import Path

import numpy as np
import soundfile as sf

from lavo_zoo.engine.recipe import get_recipe
from lavo_zoo.recipes.tts import data as tts_data
from lavo_zoo.recipes.tts.audio import read_wav
from lavo_zoo.recipes.tts.data import DataConfig, read_metadata
from lavo_zoo.recipes.tts.espeak import SAMPLE_RATE
from lavo_zoo.recipes.tts.recipe import TTSRecipe
from tests.recipes.tts.helpers import BUILTIN_SIZE


def split_features(cfg: DataConfig, split: str):
    """The split's cached features, from data.path or the built-in corpus, as the recipe reads them."""
    recipe = get_recipe("tts")
    return tts_data.split_features(cfg, split, recipe.data_root(cfg), recipe.cache_dir(cfg))


def test_builtin_corpus_is_real_ljspeech_layout(builtin_root: Path) -> None:
    rows = read_metadata(builtin_root)
    assert len(rows) == BUILTIN_SIZE
    lines = (builtin_root / "metadata.csv").read_text().splitlines()
    assert all(len(line.split("|")) == 3 for line in lines)
    info = sf.info(str(rows[0].wav))
    assert info.samplerate == SAMPLE_RATE and info.channels == 1 and info.subtype == "PCM_16"
    assert 0.8 < info.duration < 12.0  # a spoken sentence
    wave = read_wav(rows[0].wav, SAMPLE_RATE)
    assert np.abs(wave).max() > 0.05  # not silence
    feats = split_features(DataConfig(builtin_size=BUILTIN_SIZE), "train")
    assert len(feats) + len(split_features(DataConfig(builtin_size=BUILTIN_SIZE), "test")) <= BUILTIN_SIZE


def test_write_data_hook_writes_the_ljspeech_layout(tmp_path: Path) -> None:
    TTSRecipe().write_data(tmp_path / "corpus", size=3)
    rows = read_metadata(tmp_path / "corpus")
    assert len(rows) == 3 and all(sf.info(str(r.wav)).samplerate == 22_050 for r in rows)
