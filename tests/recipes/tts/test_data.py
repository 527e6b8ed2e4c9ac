"""The LJSpeech loader: layout, splits, every refusal, resampling and down-mixing."""
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from lavo_zoo.engine.recipe import get_recipe
from lavo_zoo.errors import DataError
from lavo_zoo.recipes.tts import data as tts_data
from lavo_zoo.recipes.tts.audio import read_wav
from lavo_zoo.recipes.tts.data import (
    DataConfig,
    collate,
    read_metadata,
    split_utterances,
)
from tests.recipes.tts.helpers import tone, write_ljspeech


def split_features(cfg: DataConfig, split: str):
    """The split's cached features, from data.path or the built-in corpus, as the recipe reads them."""
    recipe = get_recipe("tts")
    return tts_data.split_features(cfg, split, recipe.data_root(cfg), recipe.cache_dir(cfg))


def build_dataset(cfg: DataConfig, split: str):
    recipe = get_recipe("tts")
    return tts_data.build_dataset(cfg, split, recipe.data_root(cfg), recipe.cache_dir(cfg))

LJ_ROWS = [f"LJ00{book}-000{i}|Text {book} {i}, \"quoted\".|Text {book} {i}, \"quoted\"." for book in (1, 2, 3, 4)
           for i in (1, 2)]


def test_fastspeech_split_for_lj_ids(tmp_path: Path) -> None:
    rows = read_metadata(write_ljspeech(tmp_path, LJ_ROWS))
    assert rows[0].text == 'Text 1 1, "quoted".'  # quotes are text, not CSV quoting
    assert [u.id for u in split_utterances(rows, "test")] == ["LJ001-0001", "LJ001-0002", "LJ002-0001", "LJ002-0002"]
    assert [u.id for u in split_utterances(rows, "validation")] == ["LJ003-0001", "LJ003-0002"]
    assert [u.id for u in split_utterances(rows, "train")] == ["LJ004-0001", "LJ004-0002"]


def test_hash_split_for_other_ids_is_deterministic_and_disjoint(tmp_path: Path) -> None:
    rows = read_metadata(write_ljspeech(tmp_path, [f"utt{i:03d}|words {i}|words {i}" for i in range(80)], 0.1))
    parts = {s: [u.id for u in split_utterances(rows, s)] for s in ("train", "validation", "test")}
    assert sum(map(len, parts.values())) == 80 and len(set().union(*parts.values())) == 80
    assert parts["validation"] and parts["test"] and len(parts["train"]) > 60
    assert parts == {s: [u.id for u in split_utterances(read_metadata(tmp_path), s)] for s in parts}


@pytest.mark.parametrize("row,message", [
    ("LJ001-0001|only two|fields|and a fourth", "expected 3 pipe-separated fields"),
    ("LJ001-0001", "expected 3 pipe-separated fields"),
    ("LJ001-0001| | ", "empty transcript"),
])
def test_malformed_rows_are_refused_with_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    write_ljspeech(tmp_path, ["LJ001-0002|fine|fine"])
    (tmp_path / "metadata.csv").write_text("LJ001-0002|fine|fine\n" + row + "\n")
    with pytest.raises(DataError, match=message) as e:
        read_metadata(tmp_path)
    assert "metadata.csv, line 2" in str(e.value)


def test_missing_and_unreadable_wavs_are_refused(tmp_path: Path) -> None:
    write_ljspeech(tmp_path, ["LJ001-0001|a|a", "LJ001-0002|b|b"])
    (tmp_path / "wavs" / "LJ001-0002.wav").unlink()
    with pytest.raises(DataError, match=r"line 2: the audio of LJ001-0002 is missing .*LJ001-0002.wav"):
        read_metadata(tmp_path)
    (tmp_path / "wavs" / "LJ001-0002.wav").write_bytes(b"RIFF not really a wav")
    with pytest.raises(DataError, match=r"LJ001-0002.wav cannot be read as a wav"):
        split_features(DataConfig(path=str(tmp_path)), "test")
    with pytest.raises(DataError, match="metadata.csv is missing"):
        read_metadata(tmp_path / "wavs")
    with pytest.raises(DataError, match="does not exist"):
        read_metadata(tmp_path / "nowhere")


def test_overlong_clips_are_skipped_and_counted(tmp_path: Path, caplog) -> None:
    write_ljspeech(tmp_path, ["LJ001-0001|short|short"], seconds=0.5)
    write_ljspeech(tmp_path / "long", ["LJ001-0002|long|long"], seconds=2.0)
    (tmp_path / "wavs" / "LJ001-0002.wav").write_bytes((tmp_path / "long" / "wavs" / "LJ001-0002.wav").read_bytes())
    (tmp_path / "metadata.csv").write_text("LJ001-0001|short|short\nLJ001-0002|long|long\n")
    with caplog.at_level(logging.WARNING):
        feats = split_features(DataConfig(path=str(tmp_path), max_duration=1.0), "test")
    assert feats.ids == ["LJ001-0001"] and feats.skipped == 1
    assert "skipped 1 of 2 clips" in caplog.text


def test_stereo_is_mixed_down_and_other_rates_resampled(tmp_path: Path) -> None:
    stereo = tone(0.5, 44_100, channels=2)  # [N, 2]
    sf.write(str(tmp_path / "s.wav"), stereo, 44_100, subtype="FLOAT")
    wave = read_wav(tmp_path / "s.wav", 22_050)
    assert wave.ndim == 1 and abs(wave.size - 11_025) <= 1
    mono = stereo.mean(1)
    sf.write(str(tmp_path / "m.wav"), mono, 22_050, subtype="FLOAT")  # same samples, declared at 22,050 Hz
    np.testing.assert_allclose(read_wav(tmp_path / "m.wav", 22_050), mono, atol=1e-7)
    import torch
    import torchaudio.functional as AF
    expected = AF.resample(torch.from_numpy(mono), 44_100, 22_050).numpy()
    np.testing.assert_allclose(wave, expected, atol=1e-6)


def test_feature_cache_is_reused_and_rebuilt_when_a_file_changes(tmp_path: Path) -> None:
    root = write_ljspeech(tmp_path / "data", LJ_ROWS[:2])
    cfg = DataConfig(path=str(root), cache_dir=str(tmp_path / "cache"))
    first = split_features(cfg, "test")
    cached = list((tmp_path / "cache").rglob("test-*.npz"))
    assert len(cached) == 1
    assert split_features(cfg, "test").frames.tobytes() == first.frames.tobytes()
    sf.write(str(root / "wavs" / "LJ001-0001.wav"), tone(0.8), 22_050, subtype="PCM_16")
    second = split_features(cfg, "test")
    assert second.item(0).shape[0] > first.item(0).shape[0]
    assert [p.name for p in (tmp_path / "cache").rglob("test-*.npz")] != [p.name for p in cached]  # stale removed


def test_dataset_normalises_with_train_statistics(tmp_path: Path) -> None:
    cfg = DataConfig(path=str(write_ljspeech(tmp_path, LJ_ROWS)))
    train = build_dataset(cfg, "train")
    mels = np.concatenate([train[i]["mel"].numpy() for i in range(len(train))])
    np.testing.assert_allclose(mels.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(mels.std(0), 1.0, atol=1e-3)
    batch = collate([build_dataset(cfg, "test")[i] for i in range(3)])
    assert batch["tokens"].shape[0] == 3 and batch["tokens"][0, batch["token_lengths"][0] - 1] == 1  # ends in EOS
    assert batch["mel"].shape[:2] == (3, int(batch["mel_lengths"].max())) and batch["mel"].shape[2] == 80


def test_ljspeech_mini(shared_data: Path) -> None:
    root = shared_data / "ljspeech-mini"
    if not root.is_dir():
        pytest.skip(f"{root} is absent")
    rows = read_metadata(root)
    assert len(rows) == 120
    sizes = {s: len(split_utterances(rows, s)) for s in ("train", "validation", "test")}
    assert sizes == {"train": 75, "validation": 15, "test": 30}
    feats = split_features(DataConfig(path=str(root), max_utterances=3), "test")
    assert feats.ids == ["LJ001-0001", "LJ001-0002", "LJ001-0003"] and feats.frames.shape[1] == 80


def test_a_metadata_line_that_is_not_utf8_and_a_wav_of_nan_samples_are_named(tmp_path: Path) -> None:
    root = write_ljspeech(tmp_path / "a", ["PY00001|one two three|one two three"])
    (root / "metadata.csv").write_bytes(b"PY00001|caf\xe9|caf\xe9\n")
    with pytest.raises(DataError, match=r"metadata.csv, line 1: not UTF-8"):
        split_features(DataConfig(path=str(root)), "train")
    root = write_ljspeech(tmp_path / "b", ["PY00002|four five six|four five six"])
    wave = np.full(22_050, np.nan, dtype=np.float32)
    sf.write(str(root / "wavs" / "PY00002.wav"), wave, 22_050, subtype="FLOAT")
    with pytest.raises(DataError, match=r"PY00002.wav holds NaN or infinite samples"):
        read_wav(root / "wavs" / "PY00002.wav", 22_050)
