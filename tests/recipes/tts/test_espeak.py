"""The espeak-ng binding (espeak.py): speech and phonemes, long data paths linked to a short one."""
import os
from pathlib import Path

import numpy as np

from lavo_zoo.recipes.tts.espeak import MAX_DATA_PATH, SAMPLE_RATE, espeak, short_data_path


def test_espeak_speaks_and_phonemizes() -> None:
    engine = espeak()
    wave = engine.speak("Hello world.")
    assert wave.dtype == np.int16 and 0.5 * SAMPLE_RATE < wave.size < 3 * SAMPLE_RATE
    assert np.abs(wave).max() > 1000
    longer = engine.speak("Hello world. This sentence is considerably longer than the first one.")
    assert longer.size > 2 * wave.size
    assert engine.phonemize("Hello world.") == "həlˈoʊ wˈɜːld"


def test_long_data_paths_are_linked_to_a_short_one(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / ("f" * 60)
    deep.mkdir(parents=True)
    assert short_data_path(tmp_path) == tmp_path
    link = short_data_path(deep)
    assert len(str(link)) <= MAX_DATA_PATH and link.resolve() == deep.resolve()
    assert short_data_path(deep) == link  # reused
    os.unlink(link)
