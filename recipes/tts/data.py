"""LJSpeech data: the on-disk layout, the split, cached log-mel features.

Layout (as the LJSpeech-1.1 release)::

    DIR/metadata.csv    id|transcript|normalised transcript   (pipe-separated, no header, quotes are text)
    DIR/wavs/<id>.wav

Splits: for LJSpeech ids (``LJ001-0001``) the FastSpeech split fairseq uses (test = LJ001-*, LJ002-*; validation =
LJ003-*; train = the rest); for other ids a deterministic hash split (crc32 of the id: 1/20 validation, 1/20 test).
Features (``audio.log_mel``) are computed once per split into ``<cache>/tts/features/<dir>-<hash>/<split>-<key>.npz``
(``key`` hashes the settings and every wav's name, size and modification time) and normalised with the mean and
variance of the train split. Without ``data.path`` the recipe speaks a built-in corpus with espeak-ng (sentences of
the Python documentation that ships with the interpreter) into the same layout, once, under the cache
(:mod:`.builtin`).
"""
from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from lavo_zoo.atomic import put_file
from lavo_zoo.config import NonNegativeInt, PositiveFloat
from lavo_zoo.data.cache import cached_file, file_stats
from lavo_zoo.data.split import hash_split
from lavo_zoo.errors import DataError, not_a_file
from lavo_zoo.formats.text import read_lines
from lavo_zoo.recipes.tts.audio import FeatureSettings, log_mel, read_wav
from lavo_zoo.recipes.tts.text import TextEncoder, text_encoder

log = logging.getLogger(__name__)
SPLITS = ("train", "validation", "test")
CACHE_FORMAT = 1
LJ_ID = re.compile(r"LJ\d{3}-\d{4}")
FASTSPEECH_SPLIT = {"LJ001": "test", "LJ002": "test", "LJ003": "validation"}


@dataclass
class DataConfig:
    path: str | None = None  # an LJSpeech-layout folder; unset: the built-in spoken corpus
    builtin_size: NonNegativeInt = 0  # utterances in the built-in corpus (0: every sentence, about 3,400)
    text: Literal["chars", "phonemes"] = "chars"  # front end: normalised characters or espeak-ng IPA phonemes
    max_duration: PositiveFloat = 12.0  # seconds; longer clips are skipped (and counted in the log)
    max_utterances: NonNegativeInt = 0  # use at most this many utterances per split (0: all), in id order
    cache_dir: str | None = None  # features and built-in corpus (default: $LAVO_ZOO_CACHE/tts or the user cache)

    def features(self) -> FeatureSettings:
        """The log-mel feature settings (fairseq's, fixed)."""
        return FeatureSettings()


@dataclass(frozen=True)
class Utterance:
    id: str
    text: str  # the normalised transcript (third field), or the transcript where that is empty
    wav: Path


# -------------------------------------------------------------------------------------------- the LJSpeech layout
def read_metadata(root: Path) -> list[Utterance]:
    """Every row of ``root/metadata.csv``; a malformed row or a missing wav is a :class:`DataError` naming it."""
    if not root.is_dir():
        raise DataError(f"data.path {root} does not exist or is not a directory; it must hold the LJSpeech layout "
                        f"(metadata.csv and wavs/<id>.wav)")
    meta = root / "metadata.csv"
    if not meta.is_file():
        raise DataError(f"{meta} {not_a_file(meta)}: an LJSpeech folder has metadata.csv (id|text|normalised text)")
    rows = []
    for line_no, line in enumerate(read_lines(meta), 1):  # a line that is not UTF-8: DataError naming file and line
        if not line.strip():
            continue
        fields = line.split("|")  # no quote handling: LJSpeech transcripts contain quotes
        if len(fields) not in (2, 3):
            raise DataError(f"{meta}, line {line_no}: expected 3 pipe-separated fields (id|text|normalised "
                            f"text), got {len(fields)}: {line[:80]!r}")
        uid, text = fields[0].strip(), (fields[-1].strip() or fields[1].strip())
        if not uid:
            raise DataError(f"{meta}, line {line_no}: the id (first field) is empty")
        if not text:
            raise DataError(f"{meta}, line {line_no}: utterance {uid} has an empty transcript")
        wav = root / "wavs" / f"{uid}.wav"
        if not wav.is_file():
            raise DataError(f"{meta}, line {line_no}: the audio of {uid} {not_a_file(wav)} (expected {wav})")
        rows.append(Utterance(uid, text, wav))
    if not rows:
        raise DataError(f"{meta} has no utterances")
    return rows


def utterance_split(uid: str, lj_style: bool) -> str:
    """The split of utterance ``uid``: FastSpeech's for LJSpeech ids, else a crc32 hash split (90 / 5 / 5)."""
    if lj_style:
        return FASTSPEECH_SPLIT.get(uid[:5], "train")
    return hash_split(uid)


def split_utterances(rows: list[Utterance], split: str) -> list[Utterance]:
    """The utterances of ``split``, sorted by id (:func:`utterance_split`); an unknown or empty split is a
    :class:`DataError`."""
    if split not in SPLITS:
        raise DataError(f"unknown split '{split}'; LJSpeech has {', '.join(SPLITS)}")
    lj_style = all(LJ_ID.fullmatch(r.id) for r in rows)
    chosen = sorted((r for r in rows if utterance_split(r.id, lj_style) == split), key=lambda r: r.id)
    if not chosen:
        raise DataError(f"split '{split}' of {rows[0].wav.parent.parent} is empty "
                        f"({'FastSpeech split by id prefix' if lj_style else 'hash split of the ids'})")
    return chosen


# ------------------------------------------------------------------------------------------------------ features
@dataclass
class SplitFeatures:
    """The log-mel frames of one split, concatenated: ``frames`` [sum T, n_mels], item i at offsets[i]:offsets[i+1]."""

    ids: list[str]
    texts: list[str]
    frames: np.ndarray
    offsets: np.ndarray
    skipped: int  # clips over max_duration

    def __len__(self) -> int:
        return len(self.ids)

    def item(self, i: int) -> np.ndarray:
        """The log-mel frames [T, n_mels] of utterance ``i``."""
        return self.frames[self.offsets[i]:self.offsets[i + 1]]


def split_features(cfg: DataConfig, split: str, root: Path, cache: Path) -> SplitFeatures:
    """The features of ``split`` of the LJSpeech-layout folder ``root``, from the feature cache under ``cache`` (the
    recipe's cache folder), computing (and caching) them first when the files or settings changed.

    Args:
        cfg: the recipe's data settings (the features, the limits on utterances).
        split: ``train``, ``val`` or ``test``.
        root: the LJSpeech-layout folder.
        cache: the recipe's cache folder.
    """
    root = Path(root).resolve()
    utts = split_utterances(read_metadata(root), split)
    if cfg.max_utterances:
        utts = utts[:cfg.max_utterances]
    payload = {"format": CACHE_FORMAT, "features": asdict(cfg.features()), "max": cfg.max_duration,
               "utts": [(u.id, u.text, *file_stats(u.wav)) for u in utts]}
    path = cached_file(Path(cache) / "features", root, f"{split}-", payload, ".npz",
                       lambda path: _compute(utts, cfg, path))
    with np.load(path, allow_pickle=False) as z:
        return SplitFeatures([str(x) for x in z["ids"]], [str(x) for x in z["texts"]], z["frames"], z["offsets"],
                             int(z["skipped"]))


def _compute(utts: list[Utterance], cfg: DataConfig, path: Path) -> None:
    s = cfg.features()
    ids, texts, frames, skipped = [], [], [], 0
    for u in utts:
        wave = read_wav(u.wav, s.sample_rate)
        if wave.size > cfg.max_duration * s.sample_rate:
            skipped += 1
            log.info("skipping %s: %.1f s is longer than data.max_duration=%g s", u.wav, wave.size / s.sample_rate,
                     cfg.max_duration)
            continue
        if wave.size < s.n_fft:
            raise DataError(f"audio file {u.wav} is too short ({wave.size} samples; at least {s.n_fft} needed)")
        ids.append(u.id)
        texts.append(u.text)
        frames.append(log_mel(wave, s))
    if skipped:
        log.warning("skipped %d of %d clips of %s longer than data.max_duration=%g s", skipped, len(utts),
                    utts[0].wav.parent.parent, cfg.max_duration)
    if not ids:
        raise DataError(f"every clip of {utts[0].wav.parent} is longer than data.max_duration={cfg.max_duration} s")
    offsets = np.cumsum([0] + [f.shape[0] for f in frames])
    put_file(path, lambda f: np.savez(f, ids=np.array(ids), texts=np.array(texts), frames=np.concatenate(frames),
                                      offsets=offsets, skipped=skipped))


def feature_stats(cfg: DataConfig, root: Path, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) [n_mels] of the train split's log-mel frames (fairseq's global CMVN)."""
    frames = split_features(cfg, "train", root, cache).frames.astype(np.float64)
    return frames.mean(0).astype(np.float32), np.sqrt(np.maximum(frames.var(0), 1e-8)).astype(np.float32)


class TTSDataset(Dataset):
    """Item i: ``{"id", "text", "tokens": int64 [S], "mel": float32 [T, n_mels] normalised}``."""

    def __init__(self, feats: SplitFeatures, encoder: TextEncoder, mean: np.ndarray, std: np.ndarray,
                 synthesis: Any = None) -> None:
        self.feats, self.encoder = feats, encoder
        self.mean, self.std = mean, std
        self.synthesis = synthesis  # the recipe's synthesis settings, passed along in every batch
        self.tokens = [torch.tensor(encoder.encode(t), dtype=torch.long) for t in feats.texts]

    def __len__(self) -> int:
        return len(self.feats)

    def __getitem__(self, i: int) -> dict[str, Any]:
        mel = (self.feats.item(i) - self.mean) / self.std
        return {"id": self.feats.ids[i], "text": self.feats.texts[i], "tokens": self.tokens[i],
                "mel": torch.from_numpy(np.ascontiguousarray(mel, dtype=np.float32)), "synthesis": self.synthesis}


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Padded batch: tokens [B, S] (0 = pad), mel [B, T, n_mels] (0-padded), token/frame lengths [B], ids, texts,
    and the dataset's synthesis settings."""
    tokens = torch.nn.utils.rnn.pad_sequence([s["tokens"] for s in samples], batch_first=True)
    mel = torch.nn.utils.rnn.pad_sequence([s["mel"] for s in samples], batch_first=True)
    return {"ids": [s["id"] for s in samples], "texts": [s["text"] for s in samples], "tokens": tokens,
            "token_lengths": torch.tensor([len(s["tokens"]) for s in samples]), "mel": mel,
            "mel_lengths": torch.tensor([len(s["mel"]) for s in samples]), "synthesis": samples[0].get("synthesis")}


def build_dataset(cfg: DataConfig, split: str, root: Path, cache: Path, synthesis: Any = None) -> TTSDataset:
    """The dataset of ``split`` of the LJSpeech-layout folder ``root``: features from the cache under ``cache``
    (computed on first use), normalised by the train split's statistics.

    Args:
        cfg: the recipe's data settings.
        split: ``train``, ``val`` or ``test``.
        root: the LJSpeech-layout folder.
        cache: the recipe's cache folder.
        synthesis: the recipe's synthesis settings, passed along in every batch, or None.
    """
    mean, std = feature_stats(cfg, root, cache)
    return TTSDataset(split_features(cfg, split, root, cache), text_encoder(cfg.text), mean, std, synthesis)
