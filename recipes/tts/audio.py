"""Audio front end and vocoder as fairseq's LJSpeech recipe (``examples/speech_synthesis``):

- ``log_mel``: |STFT| (n_fft 1024, Hann window 1024, hop 256, the signal reflect-padded by n_fft/2 on the left and
  n_fft/2 + 1 on the right as fairseq's ``TTSSpectrogram``), an 80-band Slaney mel filterbank from librosa
  (20-8,000 Hz), ``log(max(mel, 1e-5))``; frames [T, 80].
- ``griffin_lim``: the mel inverted with the filterbank's pseudo-inverse (clamped at 0, fairseq's
  ``TTSInverseMelScale``), then torchaudio's Griffin-Lim, 32 iterations from random phases (fixed seed), no
  momentum. (librosa's is the same algorithm; importing all of librosa costs seconds per process.)
- ``read_wav`` / ``write_wav``: soundfile IO; other sample rates resampled with torchaudio, stereo mixed down.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from lavo_zoo.atomic import write_file
from lavo_zoo.dependencies import import_torchaudio
from lavo_zoo.errors import DataError


@dataclass(frozen=True)
class FeatureSettings:
    sample_rate: int = 22_050
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 256
    n_mels: int = 80
    f_min: float = 20.0
    f_max: float = 8000.0
    eps: float = 1e-5
    griffin_lim_iters: int = 32


@lru_cache(maxsize=8)
def mel_basis(s: FeatureSettings) -> np.ndarray:
    """librosa's Slaney-normalised mel filterbank [n_mels, n_fft // 2 + 1] (float64)."""
    import librosa

    return librosa.filters.mel(sr=s.sample_rate, n_fft=s.n_fft, n_mels=s.n_mels, fmin=s.f_min, fmax=s.f_max,
                               dtype=np.float64)


def magnitude(wave: torch.Tensor, s: FeatureSettings) -> torch.Tensor:
    """|STFT| [n_fft // 2 + 1, T] of ``wave`` [N] with fairseq's asymmetric reflect padding."""
    pad = (s.n_fft // 2, s.n_fft // 2 + 1)
    x = torch.nn.functional.pad(wave[None, None], pad, mode="reflect")[0, 0]  # [N + n_fft + 1]
    window = torch.hann_window(s.win_length, dtype=wave.dtype, device=wave.device)
    spec = torch.stft(x, s.n_fft, hop_length=s.hop_length, win_length=s.win_length, window=window, center=False,
                      return_complex=True)  # [F, T]
    return spec.abs()


def log_mel(wave: np.ndarray | torch.Tensor, s: FeatureSettings = FeatureSettings()) -> np.ndarray:
    """Log-mel frames [T, n_mels] (float32) of a mono float waveform [N] in [-1, 1] at ``s.sample_rate``."""
    w = torch.as_tensor(np.asarray(wave, dtype=np.float64))
    if w.numel() < s.n_fft // 2 + 2:
        raise ValueError(f"a waveform of {w.numel()} samples is too short for n_fft {s.n_fft}")
    mel = torch.from_numpy(mel_basis(s)) @ magnitude(w, s)  # [n_mels, T]
    return mel.clamp(min=s.eps).log().T.float().numpy()  # [T, n_mels]


@lru_cache(maxsize=8)
def inverse_mel_basis(s: FeatureSettings) -> torch.Tensor:
    """The mel filterbank's pseudo-inverse [n_fft // 2 + 1, n_mels] (fairseq's ``TTSInverseMelScale``)."""
    return torch.linalg.pinv(torch.from_numpy(mel_basis(s)))


def griffin_lim(logmel: np.ndarray | torch.Tensor, s: FeatureSettings = FeatureSettings(), seed: int = 0
                ) -> np.ndarray:
    """A waveform [N] (float32) from log-mel frames [T, n_mels]: pseudo-inverse mel (clamped at 0), then
    torchaudio's Griffin-Lim (``s.griffin_lim_iters`` iterations from random phases drawn with ``seed``, no
    momentum, as fairseq's ``GriffinLimVocoder``)."""
    AF = import_torchaudio().functional
    mel = torch.as_tensor(np.asarray(logmel, dtype=np.float64)).exp().T  # [n_mels, T]
    spec = (inverse_mel_basis(s) @ mel).clamp(min=0.0)  # [F, T]
    window = torch.hann_window(s.win_length, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wave = AF.griffinlim(spec, window, s.n_fft, s.hop_length, s.win_length, power=1.0,
                             n_iter=s.griffin_lim_iters, momentum=0.0, length=None, rand_init=True)
    return wave.float().numpy()


def read_wav(path: Path, sample_rate: int) -> np.ndarray:
    """Mono float32 samples [N] at ``sample_rate`` (stereo mixed down, other rates resampled with torchaudio)."""
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)  # [N, C]
    except FileNotFoundError:
        raise DataError(f"audio file {path} is missing") from None
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise DataError(f"audio file {path} cannot be read as a wav ({e}); re-export it as PCM wav") from None
    if not np.isfinite(data).all():
        first = int(np.flatnonzero(~np.isfinite(data).all(1))[0])
        raise DataError(f"audio file {path} holds NaN or infinite samples (the first at sample {first}); a wav must "
                        "hold finite samples: re-export it")
    wave = data.mean(axis=1)  # [N]
    if rate != sample_rate:
        wave = import_torchaudio().functional.resample(torch.from_numpy(wave), rate, sample_rate).numpy()
    return wave.astype(np.float32)


def write_wav(path: Path, wave: np.ndarray, sample_rate: int, overwrite: bool = True, exact: bool = False) -> Path:
    """A wav written atomically: 16-bit PCM (samples clipped to [-1, 1]) to listen to, or with ``exact`` 32-bit
    float holding the samples as they are (what an evaluation scored, so that ``lavo-zoo score mcd`` on the files
    gives the same figures). With ``overwrite=False`` an existing file is refused.

    Args:
        path: the wav to write.
        wave: [N] the samples.
        sample_rate: samples per second.
        overwrite: replace an existing file.
        exact: 32-bit float samples as they are (else 16-bit PCM, clipped).
    """
    buffer = io.BytesIO()
    wave = np.asarray(wave, dtype=np.float32)
    if exact:
        sf.write(buffer, wave, sample_rate, subtype="FLOAT", format="WAV")
    else:
        sf.write(buffer, np.clip(wave, -1.0, 1.0), sample_rate, subtype="PCM_16", format="WAV")
    return write_file(Path(path), buffer.getvalue(), overwrite)
