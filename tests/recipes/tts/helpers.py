"""Helpers for the TTS tests: test signals, LJSpeech-layout folders, tiny model configs."""
from pathlib import Path

import numpy as np
import soundfile as sf

from lavo_zoo.attention import AttentionSpec, SiteAttention
from lavo_zoo.recipes.tts.model import ModelConfig

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


# attention sites the model and synthesis tests cover (sdpa at the sites not named)
SITES = [{}, {"decoder_self": {"name": "lavo", "num_bases": 4, "window_size": 2}},
         {"decoder_self": {"name": "local", "window_size": 2}},
         {"encoder_self": {"name": "lavo", "num_bases": 4, "window_size": 2}},
         {"cross": {"name": "lavo", "num_bases": 4}}]


def tiny_config(**attention) -> ModelConfig:
    return ModelConfig(vocab_size=20, n_mels=8, frames_per_step=2, embed_dim=16, num_heads=2, ffn_dim=32,
                       encoder_layers=2, decoder_layers=2, dropout=0.0, attention_dropout=0.0, prenet_dim=16,
                       prenet_dropout=0.0, postnet_layers=3, postnet_dim=16, encoder_conv_layers=2,
                       attention=SiteAttention(**{site: AttentionSpec.from_config(v, site, "the test")
                                                  for site, v in attention.items()}))
