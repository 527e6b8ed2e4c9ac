"""Text-to-speech inference: synthesise token sequences with a trained Transformer-TTS and vocode them with
Griffin-Lim (:func:`speak`, which the recipe's evaluation calls), and :class:`Synthesizer`, what ``lavo_zoo.load``
returns for a ``tts`` checkpoint (``lavo-zoo synthesize`` calls it)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from lavo_zoo.engine.checkpoint import unwrap
from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.errors import InputError
from lavo_zoo.recipes.tts.audio import FeatureSettings, griffin_lim
from lavo_zoo.recipes.tts.model import synthesize
from lavo_zoo.recipes.tts.text import text_encoder


@torch.no_grad()
def speak(model: nn.Module, tokens: torch.Tensor, features: FeatureSettings, max_frames: int,
          stop_threshold: float = 0.5, frames: torch.Tensor | None = None) -> list[dict[str, np.ndarray]]:
    """Synthesise tokens [B, S] (0 = pad): per utterance ``mel`` [T, n_mels] (denormalised log-mel), ``wave`` [N]
    (Griffin-Lim) and ``grouped`` [T / r, r * n_mels] (the normalised groups fed back to the decoder). ``frames``
    [B] (optional) fixes each utterance's length instead of the stop token (:func:`synthesize`)."""
    tts = unwrap(model)
    frames, lengths, grouped = synthesize(tts, tokens, tokens != 0, max_frames, stop_threshold, frames)
    mean, std = np.asarray(tts.cfg.feature_mean), np.asarray(tts.cfg.feature_std)
    mel = frames.float().cpu().numpy() * std + mean  # [B, T, n_mels]
    r = tts.cfg.frames_per_step
    return [{"mel": mel[i, :n], "wave": griffin_lim(mel[i, :n], features), "grouped": grouped[i, :n // r]}
            for i, n in enumerate(lengths.tolist())]




class Synthesizer(Predictor):
    """A trained text-to-speech model: ``synthesize`` speaks text (``lavo_zoo.load`` returns it for a ``tts``
    checkpoint)."""

    @property
    def sample_rate(self) -> int:
        return self.cfg.data.features().sample_rate

    def tokens(self, texts: Sequence[str]) -> torch.Tensor:
        """Right-padded ids [B, S] of ``texts`` (0 = pad); text that reduces to nothing speakable is refused."""
        encoder = text_encoder(self.cfg.data.text)
        for text in texts:
            if not encoder.symbols_of(text):
                raise InputError(f"{text!r} holds nothing this model can speak (its {self.cfg.data.text} front end "
                                 "keeps letters, digits (spelled out) and punctuation); give words to say")
        ids = [torch.tensor(encoder.encode(t)) for t in texts]
        return torch.nn.utils.rnn.pad_sequence(ids, batch_first=True).to(self.device)

    def speak(self, texts: Sequence[str], *, max_frames: int | None = None, stop_threshold: float | None = None,
              seed: int = 0) -> list[dict[str, np.ndarray]]:
        """Per text: ``wave`` [N], ``mel`` [T, n_mels] (denormalised log-mel) and ``grouped`` (what the decoder fed
        back), decoded as one batch. The decoder prenet's dropout (on at inference, as Tacotron 2) draws from the
        generator seeded with ``seed``; the caller's random state is left as it was."""
        e = self.cfg.eval
        tokens = self.tokens(texts)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            return speak(self.model, tokens, self.cfg.data.features(), max_frames or e.max_frames,
                         e.stop_threshold if stop_threshold is None else stop_threshold)

    def synthesize(self, text: str | Sequence[str], *, max_frames: int | None = None,
                   stop_threshold: float | None = None, seed: int = 0
                   ) -> tuple[np.ndarray, int] | list[tuple[np.ndarray, int]]:
        """(samples [N] float32 in [-1, 1], sample rate) of ``text``, or a list of them for a list of texts:
        autoregressive mel frames until the stop token (or ``max_frames``), then Griffin-Lim."""
        texts = [text] if isinstance(text, str) else list(text)
        results = self.speak(texts, max_frames=max_frames, stop_threshold=stop_threshold, seed=seed)
        out = [(r["wave"].astype(np.float32), self.sample_rate) for r in results]
        return out[0] if isinstance(text, str) else out
