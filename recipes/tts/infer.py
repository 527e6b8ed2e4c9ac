"""Text-to-speech inference: synthesise token sequences with a trained Transformer-TTS and vocode them with
Griffin-Lim (``lavo-zoo synthesize`` and the recipe's evaluation call :func:`speak`)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lavo_zoo.engine.checkpoint import unwrap
from lavo_zoo.recipes.tts.audio import FeatureSettings, griffin_lim
from lavo_zoo.recipes.tts.model import synthesize


@torch.no_grad()
def speak(model: nn.Module, tokens: torch.Tensor, features: FeatureSettings, max_frames: int,
          stop_threshold: float = 0.5) -> list[dict[str, np.ndarray]]:
    """Synthesise tokens [B, S] (0 = pad): per utterance ``mel`` [T, n_mels] (denormalised log-mel), ``wave`` [N]
    (Griffin-Lim) and ``grouped`` [T / r, r * n_mels] (the normalised groups fed back to the decoder)."""
    tts = unwrap(model)
    frames, lengths, grouped = synthesize(tts, tokens, tokens != 0, max_frames, stop_threshold)
    mean, std = np.asarray(tts.cfg.feature_mean), np.asarray(tts.cfg.feature_std)
    mel = frames.float().cpu().numpy() * std + mean  # [B, T, n_mels]
    r = tts.cfg.frames_per_step
    return [{"mel": mel[i, :n], "wave": griffin_lim(mel[i, :n], features), "grouped": grouped[i, :n // r]}
            for i, n in enumerate(lengths.tolist())]


