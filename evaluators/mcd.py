"""Mel-cepstral and mel-spectral distortion (MCD, MSD) exactly as fairseq's ``examples/speech_synthesis/evaluation/
eval_sp.py``, which the paper's TTS numbers came from.

Features (torchaudio, float32 waveforms in [-1, 1] at the file's own rate ``sr``): n_fft = win = int(0.05 sr),
hop = int(0.0125 sr), Hann window, f_min 20, 80 mel bands (HTK, power 2). MCD uses
``MFCC(n_mfcc=13, log_mels=True)`` (13 coefficients including c0); MSD uses ``log(mel + 1e-6)`` (80 dims).
Frame distance sqrt(||x - y||^2 / D); full unconstrained DTW (steps left, diagonal, up, each adding the target cell's
distance); per utterance the total cost of the best path. Over a set: ``dist_per_syn_frm`` = sum of path costs /
total synthesised frames (the reported MCD/MSD), insertion rate = sum over reference frames of (synthesised frames
aligned to it - 1) / total reference frames, deletion rate the same the other way round.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from lavo_zoo.dependencies import import_torchaudio
from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, check_finite, input_path
from lavo_zoo.nn.full_precision import no_autocast

MSD_OFFSET = 1e-6


@lru_cache(maxsize=4)
def _transforms(sr: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    torchaudio = import_torchaudio()
    melkwargs = {"n_fft": int(0.05 * sr), "win_length": int(0.05 * sr), "hop_length": int(0.0125 * sr),
                 "f_min": 20, "n_mels": 80, "window_fn": torch.hann_window}
    mfcc = torchaudio.transforms.MFCC(sr, n_mfcc=13, log_mels=True, melkwargs=melkwargs)
    mel = torchaudio.transforms.MelSpectrogram(sr, **melkwargs)
    return mfcc, mel


def _wave(wave: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A float32 CPU tensor of a waveform (a numpy array or a tensor in any float dtype, on any device)."""
    return torch.as_tensor(wave).detach().to("cpu", torch.float32) if isinstance(wave, torch.Tensor) \
        else torch.as_tensor(np.asarray(wave, dtype=np.float32))


def mcd_features(wave: np.ndarray | torch.Tensor, sr: int) -> np.ndarray:
    """13 MFCCs per frame [T, 13] of a mono waveform [N], in fp32 (also under autocast)."""
    mfcc, _ = _transforms(sr)
    with torch.no_grad(), no_autocast("cpu"):
        return mfcc(_wave(wave)).T.numpy()


def msd_features(wave: np.ndarray | torch.Tensor, sr: int) -> np.ndarray:
    """80 log-mel bands per frame [T, 80] (log(mel + 1e-6)) of a mono waveform [N], in fp32 (also under autocast)."""
    _, mel = _transforms(sr)
    with torch.no_grad(), no_autocast("cpu"):
        return torch.log(mel(_wave(wave)) + MSD_OFFSET).T.numpy()


def frame_distances(ref: np.ndarray, syn: np.ndarray) -> np.ndarray:
    """sqrt(||x_i - y_j||^2 / D) [M, N] for ref [M, D] and syn [N, D] (float64)."""
    x, y = ref.astype(np.float64), syn.astype(np.float64)
    sq = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T
    return np.sqrt(np.maximum(sq, 0.0) / x.shape[1])


def dtw(dist: np.ndarray) -> tuple[float, np.ndarray]:
    """(total cost of the cheapest monotone path from (0, 0) to (M-1, N-1), its path map [M, N] of 0/1).

    fairseq's recurrence, one anti-diagonal at a time: cum[i, j] = dist[i, j] + min(cum[i, j-1], cum[i-1, j-1],
    cum[i-1, j]) (ties to the first), the first row and column cumulative sums.
    """
    m, n = dist.shape
    cum = np.zeros_like(dist)
    back = np.zeros(dist.shape, dtype=np.int8)  # 0 = from the left, 1 = diagonal, 2 = from above
    cum[0, :] = np.cumsum(dist[0, :])
    cum[:, 0] = np.cumsum(dist[:, 0])
    back[:, 0] = 2
    back[0, :] = 0
    for offset in range(2, m + n - 1):
        i = np.arange(max(1, offset - n + 1), min(m - 1, offset - 1) + 1)  # rows on this anti-diagonal, j >= 1
        j = offset - i
        choices = np.stack([cum[i, j - 1], cum[i - 1, j - 1], cum[i - 1, j]], axis=1)  # [K, 3]
        best = choices.argmin(axis=1)
        back[i, j] = best
        cum[i, j] = choices[np.arange(len(i)), best] + dist[i, j]
    path = np.zeros(dist.shape, dtype=np.int64)
    i, j = m - 1, n - 1
    path[i, j] = 1
    steps = ((0, -1), (-1, -1), (-1, 0))
    while i or j:
        di, dj = steps[back[i, j]]
        i, j = i + di, j + dj
        path[i, j] = 1
    return float(cum[-1, -1]), path


@dataclass
class Distortion:
    """One utterance: total path cost, reference / synthesised / path frames, insertions, deletions."""

    cost: float
    ref_frames: int
    syn_frames: int
    path_frames: int
    insertions: int
    deletions: int


def distortion(ref_feats: np.ndarray, syn_feats: np.ndarray) -> Distortion:
    """The DTW alignment of two MFCC sequences: its total cost, both lengths, the path's length and its insertions and
    deletions."""
    cost, path = dtw(frame_distances(ref_feats, syn_feats))
    return Distortion(cost, path.shape[0], path.shape[1], int(path.sum()), int((path.sum(1) - 1).sum()),
                      int((path.sum(0) - 1).sum()))


def summarise(items: list[Distortion]) -> dict[str, float]:
    """eval_sp.py's totals: dist_per_syn_frm (and per ref / path frame), ins and del rates per reference frame."""
    cost = sum(d.cost for d in items)
    ref = sum(d.ref_frames for d in items)
    syn = sum(d.syn_frames for d in items)
    path = sum(d.path_frames for d in items)
    return {"dist_per_syn_frm": cost / syn, "dist_per_ref_frm": cost / ref, "dist_per_ali_frm": cost / path,
            "ins": sum(d.insertions for d in items) / ref, "del": sum(d.deletions for d in items) / ref}


@register_evaluator("mcd")
class MelDistortion(Evaluator):
    """MCD and MSD (fairseq eval_sp.py): predictions = synthesised waveforms, targets = reference waveforms (lists
    of mono float arrays [N] at ``sample_rate``); ``num_samples`` counts utterances."""

    higher_is_better: ClassVar[dict[str, bool]] = {
        "mcd": False, "msd": False, "mcd_ins": False, "mcd_del": False, "msd_ins": False, "msd_del": False,
        "length_error": False}

    files = ("--pred: a folder of synthesised wavs; --ref: a folder of reference wavs with the same file names, at "
             "one sample rate (first channel, as eval_sp.py)")

    def __init__(self, sample_rate: int = 22_050) -> None:
        self.sample_rate = sample_rate
        super().__init__()

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> MelDistortion:
        import soundfile as sf

        if ref is None:
            raise UsageError("score mcd needs --ref, the folder of reference wavs")
        syn_dir, ref_dir = input_path(pred, "--pred", "folder"), input_path(ref, "--ref", "folder")
        ref_names = {p.name for p in ref_dir.glob("*.wav")}
        syn_names = {p.name for p in syn_dir.glob("*.wav")}
        if not ref_names:
            raise DataError(f"--ref {ref_dir}: no .wav files in this folder")
        for missing, where in ((sorted(ref_names - syn_names), syn_dir), (sorted(syn_names - ref_names), ref_dir)):
            if missing:
                raise DataError(f"{len(missing)} wav file(s) have no counterpart of the same name in {where}, e.g. "
                                f"{missing[0]}; synthesised files must be named as their references")
        evaluator, rate = None, None
        for name in sorted(ref_names):
            waves = []
            for path in (ref_dir / name, syn_dir / name):
                try:
                    wave, sr = sf.read(str(path), dtype="float32", always_2d=True)
                except (sf.LibsndfileError, RuntimeError, OSError) as e:
                    raise DataError(f"cannot read {path} as a wav ({e})") from None
                rate = rate or sr
                if sr != rate:
                    raise DataError(f"{path} is at {sr} Hz but the other files are at {rate} Hz; MCD compares files "
                                    f"at one sample rate (resample them first)")
                check_finite(wave, path, "sample")
                frame = int(0.05 * sr)  # one analysis window (n_fft)
                if len(wave) <= frame // 2:
                    raise DataError(f"{path} holds {len(wave)} samples, less than half an analysis window "
                                    f"({frame} samples, 0.05 s at {sr} Hz); MCD needs at least one frame of audio")
                waves.append(wave[:, 0])  # first channel, as eval_sp.py
            evaluator = evaluator or cls(sample_rate=rate)
            evaluator.update([waves[1]], [waves[0]])
        return evaluator

    def details(self) -> dict[str, Any]:
        return {"sample_rate": self.sample_rate}

    def reset(self) -> None:
        self.num_samples = 0
        self.mcd: list[Distortion] = []
        self.msd: list[Distortion] = []

    def update(self, predictions: list[np.ndarray], targets: list[np.ndarray]) -> None:
        if len(predictions) != len(targets):
            raise ValueError(f"{len(predictions)} synthesised waveforms for {len(targets)} references")
        sr = self.sample_rate
        for syn, ref in zip(predictions, targets):
            self.mcd.append(distortion(mcd_features(ref, sr), mcd_features(syn, sr)))
            self.msd.append(distortion(msd_features(ref, sr), msd_features(syn, sr)))
            self.num_samples += 1

    def compute(self) -> dict[str, float]:
        if not self.mcd:
            raise ValueError("MelDistortion.compute() called before any update()")
        mcd, msd = summarise(self.mcd), summarise(self.msd)
        # how far each utterance's duration is from its reference's (stopping early or late), mean over utterances:
        # |syn frames - ref frames| / ref frames, 0 for the right length (not in eval_sp.py)
        length_error = float(np.mean([abs(d.syn_frames - d.ref_frames) / d.ref_frames for d in self.mcd]))
        return {"mcd": mcd["dist_per_syn_frm"], "msd": msd["dist_per_syn_frm"], "mcd_ins": mcd["ins"],
                "mcd_del": mcd["del"], "msd_ins": msd["ins"], "msd_del": msd["del"], "length_error": length_error}
