"""The ``tts`` recipe: Transformer-TTS on LJSpeech (or the built-in spoken corpus), fairseq's tacotron2 loss,
autoregressive synthesis with a stop token, Griffin-Lim, MCD / MSD as fairseq's eval_sp.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeInt, PositiveInt, Range
from lavo_zoo.engine.checkpoint_io import unwrap
from lavo_zoo.engine.recipe import EvalPlaces, Recipe, register_recipe
from lavo_zoo.engine.run_config import EvalConfig, RunConfig, TrainConfig
from lavo_zoo.errors import ConfigError
from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.recipes.tts import data as tts_data
from lavo_zoo.recipes.tts.builtin import BuiltinSpokenCorpus
from lavo_zoo.recipes.tts.data import DataConfig
from lavo_zoo.recipes.tts.infer import Synthesis, Synthesizer, evaluate_synthesis, reproducible, synthesize_batch
from lavo_zoo.recipes.tts.model import (
    ModelConfig,
    TransformerTTS,
    group_frames,
    shift_right,
    tacotron2_loss,
)
from lavo_zoo.recipes.tts.text import text_encoder


def paper_train_config() -> TrainConfig:
    """The paper's table: AdamW (0.9, 0.98), weight decay 0.01, inverse-sqrt, peak 5e-4, 4K warm-up, 20K steps,
    batch 48, gradient clipping 5."""
    return TrainConfig(optimizer="adamw", lr=5e-4, betas=[0.9, 0.98], weight_decay=0.01, schedule="inverse_sqrt",
                       warmup_steps=4000, max_steps=20_000, batch_size=48, clip_grad_norm=5.0, eval_every=1000,
                       eval_batches=2, save_every=1000)


@dataclass
class TTSEvalConfig(EvalConfig):
    max_utterances: NonNegativeInt = 0  # synthesise at most this many utterances of the split (0: all)
    stop_threshold: Annotated[float, Range(ge=0, le=1)] = 0.5  # stop when the stop-token probability exceeds this
    max_frames: PositiveInt = 2000  # and at the latest after this many frames (about 23 s)
    length: Literal["stop_token", "reference"] = "stop_token"  # when synthesis ends: at the stop token (the real
    # task), or after as many frames as the reference has (the stop token ignored: scores the frames alone)
    reference: Literal["resynthesized", "recording"] = "resynthesized"  # Griffin-Lim of the target features, or
    # the original recording (fairseq --use-resynthesized-target is the default, as CAB scored)
    out_dir: str | None = None  # write synthesized/, reference/ wavs and plots/ here (eval --out sets it beside
    # the results JSON)
    plots: bool = True  # a mel / stop / alignment PNG per utterance in out_dir/plots


@dataclass
class TTSConfig(RunConfig):
    recipe: str = "tts"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: TTSEvalConfig = field(default_factory=TTSEvalConfig)


@register_recipe("tts")
class TTSRecipe(Recipe):
    """Transformer-TTS; batches are dicts of tokens, token_lengths, mel, mel_lengths, ids, texts and the
    :class:`Synthesis` settings."""

    description = "Transformer-TTS: log-mel frames, stop token, Griffin-Lim; MCD / MSD"
    config_class = TTSConfig
    evaluator = "mcd"
    tiny_config = "tts/tiny-lavo-causal"
    builtin = BuiltinSpokenCorpus()
    task = ("text-to-speech", "Text to speech")
    limits = ("It speaks in the one voice of its training corpus through a Griffin-Lim vocoder: intelligible at "
              "best, not natural speech; do not use it to imitate a person's voice.")
    predictor = Synthesizer

    # -------------------------------------------------------------------------------------------- set-up
    def resolve(self, cfg: TTSConfig) -> TTSConfig:
        """Fill the sizes and statistics that come from the data into cfg.model (once, before training): the text
        front end's vocabulary size and the train split's feature mean / std (used to denormalise at synthesis)."""
        m = cfg.model
        m.vocab_size = m.vocab_size or text_encoder(cfg.data.text).vocab_size
        m.n_mels = cfg.data.features().n_mels
        if not m.feature_mean:
            mean, std = tts_data.feature_stats(cfg.data, self.data_root(cfg.data), self.cache_dir(cfg.data))
            m.feature_mean, m.feature_std = mean.tolist(), std.tolist()
        return cfg

    def data_root(self, data: DataConfig) -> Path:
        """The LJSpeech-layout folder: ``data.path`` or the built-in corpus (spoken on first use)."""
        return self.data_path(data).resolve()

    def build_model(self, cfg: TTSConfig) -> TransformerTTS:
        """The network of ``cfg.model``, never reading data: its vocabulary size and feature statistics come from
        :meth:`resolve` (before training) or a checkpoint's config."""
        if not cfg.model.vocab_size or not cfg.model.feature_mean:
            raise ValueError("model.vocab_size and model.feature_mean are unset: resolve the config first "
                             "(TTSRecipe.resolve(cfg), which reads the train split's feature statistics)")
        if cfg.data.text and text_encoder(cfg.data.text).vocab_size != cfg.model.vocab_size:
            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} does not match data.text={cfg.data.text} "
                              f"({text_encoder(cfg.data.text).vocab_size} symbols)")
        return TransformerTTS(cfg.model)

    def build_dataset(self, cfg: TTSConfig, split: str) -> Dataset:
        return tts_data.build_dataset(cfg.data, self.check_split(split), self.data_root(cfg.data),
                                      self.cache_dir(cfg.data), Synthesis.of(cfg, self.data_root(cfg.data)))

    def collate(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return tts_data.collate(samples)

    # ----------------------------------------------------------------------------------------- training
    def training_loss(self, model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        r = unwrap(model).cfg.frames_per_step
        target, lengths = group_frames(batch["mel"], batch["mel_lengths"], r)  # [B, T / r, r * n_mels]
        steps = torch.arange(target.shape[1], device=target.device)[None] < lengths[:, None]  # [B, T / r]
        token_mask = batch["tokens"] != 0
        with reproducible(model):
            frames, post, stop = model(batch["tokens"], token_mask, shift_right(target), steps)
        return tacotron2_loss(frames.float(), post.float(), stop.float(), target.float(), lengths,
                              unwrap(model).cfg.stop_pos_weight)

    # ------------------------------------------------------------------------------------------ scoring
    def build_evaluator(self, cfg: TTSConfig) -> Evaluator:
        return build_evaluator(self.evaluator, sample_rate=cfg.data.features().sample_rate)

    def predict(self, model: nn.Module, batch: dict[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(synthesised waves, reference waves) of the batch's utterances: autoregressive synthesis (in eval mode
        reproducible: :func:`reproducible`) and Griffin-Lim, scored by the ``mcd`` evaluator."""
        results = synthesize_batch(model, batch)
        return [r["wave"] for r in results], [r["reference"] for r in results]

    def validation_step(self, model: nn.Module, batch: dict[str, Any]
                        ) -> tuple[torch.Tensor, list[np.ndarray], list[np.ndarray]]:
        """The teacher-forced loss, and the synthesised and reference waves (synthesis needs its own decoding:
        the teacher-forced pass cannot give the audio)."""
        loss, _ = self.training_loss(model, batch)
        return (loss, *self.predict(model, batch))

    def evaluate(self, model: nn.Module, cfg: TTSConfig, split: str, device: torch.device,
                 max_batches: int | None = None, places: EvalPlaces | None = None) -> Evaluator:
        """Synthesise the split (at most ``eval.max_utterances``), vocode with Griffin-Lim and score MCD / MSD
        against the Griffin-Lim resynthesis of the target features (or the recordings); with a files folder
        (``places.files``, default ``eval.out_dir``) write synthesized/<id>.wav, reference/<id>.wav and
        plots/<id>.png there (:func:`~lavo_zoo.recipes.tts.infer.evaluate_synthesis`)."""
        return evaluate_synthesis(model, cfg, self.eval_loader(cfg, split), self.build_evaluator(cfg), device,
                                  max_batches, out=(places or EvalPlaces.from_config(cfg)).files)
