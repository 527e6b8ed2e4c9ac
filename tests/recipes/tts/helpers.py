"""Helpers for the TTS tests: test signals and LJSpeech-layout folders."""
from pathlib import Path

import numpy as np
import soundfile as sf

BUILTIN_SIZE = 40  # utterances in the tests' built-in corpus (spoken once per session)


def tone(seconds: float, rate: int = 22_050, freq: float = 220.0, channels: int = 1) -> np.ndarray:
    """A chirp-like test signal [N] or [N, channels] in [-0.5, 0.5]."""
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.5 * np.sin(2 * np.pi * (freq + 200 * t) * t).astype(np.float32)
    return wave if channels == 1 else np.stack([wave * (c + 1) / channels for c in range(channels)], axis=1)


def write_ljspeech(root: Path, rows: list[str], seconds: float = 0.5, rate: int = 22_050) -> Path:
    """An LJSpeech-layout folder: ``rows`` (metadata.csv lines) and a wav for each row's id."""
    (root / "wavs").mkdir(parents=True, exist_ok=True)
    (root / "metadata.csv").write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    for i, row in enumerate(rows):
        uid = row.split("|")[0]
        sf.write(str(root / "wavs" / f"{uid}.wav"), tone(seconds, rate, 150 + 10 * i), rate, subtype="PCM_16")
    return root
