"""The ``tts`` recipe: Transformer-TTS on LJSpeech (or the built-in spoken corpus), fairseq's tacotron2 loss,
autoregressive synthesis with a stop token, Griffin-Lim, MCD / MSD as fairseq's eval_sp.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.config import RunConfig, TrainConfig
from lavo_zoo.errors import ConfigError
from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.recipes import Recipe, register_recipe
from lavo_zoo.recipes.tts import data as tts_data
from lavo_zoo.recipes.tts.audio import griffin_lim, read_wav, write_wav
from lavo_zoo.recipes.tts.data import DataConfig
from lavo_zoo.recipes.tts.model import (
    ModelConfig,
    TransformerTTS,
    group_frames,
    shift_right,
    synthesize,
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
class TTSEvalConfig:
    batch_size: int = 0  # utterances synthesised together (0: train.batch_size)
    max_utterances: int = 0  # synthesise at most this many utterances of the split (0: all)
    stop_threshold: float = 0.5  # stop when the stop-token probability exceeds this
    max_frames: int = 2000  # and at the latest after this many frames (about 23 s)
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


def core(model: nn.Module) -> TransformerTTS:
    """The TransformerTTS under torch.compile / DistributedDataParallel wrappers."""
    while not isinstance(model, TransformerTTS):
        model = getattr(model, "_orig_mod", None) or model.module
    return model


@register_recipe("tts")
class TTSRecipe(Recipe):
    """Transformer-TTS; batches are dicts of tokens, token_lengths, mel, mel_lengths, ids, texts."""

    description = "Transformer-TTS on LJSpeech: log-mel frames, stop token, Griffin-Lim; MCD / MSD"
    config_class = TTSConfig
    evaluator = "mcd"
    commands: ClassVar[dict[str, str]] = {"synthesize": "lavo_zoo.recipes.tts.cli:synthesize"}
    score_commands: ClassVar[dict[str, str]] = {"mcd": "lavo_zoo.recipes.tts.cli:score_mcd"}

    # -------------------------------------------------------------------------------------------- set-up
    def resolve(self, cfg: TTSConfig) -> TTSConfig:
        """Fill the sizes and statistics that come from the data into cfg.model (once, before training): the text
        front end's vocabulary size and the train split's feature mean / std (used to denormalise at synthesis)."""
        m = cfg.model
        m.vocab_size = m.vocab_size or text_encoder(cfg.data.text).vocab_size
        m.n_mels = cfg.data.features().n_mels
        if not m.feature_mean:
            mean, std = tts_data.feature_stats(cfg.data)
            m.feature_mean, m.feature_std = mean.tolist(), std.tolist()
        return cfg

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None) -> Path:
        """The built-in spoken corpus in the LJSpeech layout (``size`` sentences; all, about 3,400, by default)."""
        if dataset not in (None, "builtin"):
            raise ConfigError(f"the tts recipe generates one built-in dataset ('builtin'), not '{dataset}'")
        return tts_data.write_corpus(Path(out), size or 0)

    def build_model(self, cfg: TTSConfig) -> TransformerTTS:
        if not cfg.model.vocab_size or not cfg.model.feature_mean:
            self.resolve(cfg)
        if cfg.data.text and text_encoder(cfg.data.text).vocab_size != cfg.model.vocab_size:
            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} does not match data.text={cfg.data.text} "
                              f"({text_encoder(cfg.data.text).vocab_size} symbols)")
        return TransformerTTS(cfg.model)

    def build_dataset(self, cfg: TTSConfig, split: str) -> Dataset:
        return tts_data.build_dataset(cfg.data, split)

    def collate(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return tts_data.collate(samples)

    def eval_batch_size(self, cfg: TTSConfig) -> int:
        return cfg.eval.batch_size or cfg.train.batch_size

    # ----------------------------------------------------------------------------------------- training
    def training_loss(self, model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        r = core(model).cfg.frames_per_step
        target, lengths = group_frames(batch["mel"], batch["mel_lengths"], r)  # [B, T / r, r * n_mels]
        steps = torch.arange(target.shape[1], device=target.device)[None] < lengths[:, None]  # [B, T / r]
        token_mask = batch["tokens"] != 0
        frames, post, stop = model(batch["tokens"], token_mask, shift_right(target), steps)
        return tacotron2_loss(frames.float(), post.float(), stop.float(), target.float(), lengths,
                              core(model).cfg.stop_pos_weight)

    # ------------------------------------------------------------------------------------------ scoring
    def synthesize_batch(self, model: nn.Module, cfg: TTSConfig, batch: dict[str, Any]
                         ) -> list[dict[str, np.ndarray]]:
        """Per utterance: ``mel`` [T, n_mels] (denormalised log-mel), ``wave`` [N] (Griffin-Lim), ``grouped``
        [T / r, r * n_mels] (the normalised groups fed back to the decoder)."""
        tts = core(model)
        frames, lengths, grouped = synthesize(tts, batch["tokens"], batch["tokens"] != 0, cfg.eval.max_frames,
                                              cfg.eval.stop_threshold)
        mean, std = (torch.tensor(v, device=frames.device) for v in (tts.cfg.feature_mean, tts.cfg.feature_std))
        mel = (frames.float() * std + mean).cpu().numpy()  # [B, T, n_mels]
        r = tts.cfg.frames_per_step
        return [{"mel": mel[i, :n], "wave": griffin_lim(mel[i, :n], cfg.data.features()), "grouped": grouped[i, :n // r]}
                for i, n in enumerate(lengths.tolist())]

    def predict(self, model: nn.Module, batch: dict[str, Any]) -> tuple[Any, Any]:
        raise NotImplementedError("the tts recipe scores through evaluate() (synthesis needs the run's config)")

    @torch.no_grad()
    def evaluate(self, model: nn.Module, cfg: TTSConfig, split: str, device: torch.device,
                 max_batches: int | None = None, batches: Any = None) -> Evaluator:
        """Synthesise the split (at most ``eval.max_utterances``), vocode with Griffin-Lim and score MCD / MSD
        against the Griffin-Lim resynthesis of the target features (or the recordings); with ``eval.out_dir``
        write synthesized/<id>.wav, reference/<id>.wav and plots/<id>.png there."""
        from lavo_zoo.recipes.tts.plot import plot_utterance, teacher_forced_view

        s = cfg.data.features()
        evaluator = build_evaluator(self.evaluator, sample_rate=s.sample_rate)
        was_training = model.training
        model.eval()
        loader = batches if batches is not None else self.eval_loader(cfg, split)
        root = tts_data.data_root(cfg.data)
        out = Path(cfg.eval.out_dir) if cfg.eval.out_dir else None
        tts = core(model)
        mean, std = np.asarray(tts.cfg.feature_mean), np.asarray(tts.cfg.feature_std)
        done = 0
        for b, batch in enumerate(loader):
            if (max_batches and b >= max_batches) or (cfg.eval.max_utterances and done >= cfg.eval.max_utterances):
                break
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            results = self.synthesize_batch(model, cfg, batch)
            for i, res in enumerate(results):
                if cfg.eval.max_utterances and done >= cfg.eval.max_utterances:
                    break
                uid, n = batch["ids"][i], int(batch["mel_lengths"][i])
                target = batch["mel"][i, :n].float().cpu().numpy() * std + mean  # [T, n_mels] denormalised
                if cfg.eval.reference == "recording":
                    reference = read_wav(root / "wavs" / f"{uid}.wav", s.sample_rate)
                else:
                    reference = griffin_lim(target, s)
                evaluator.update([res["wave"]], [reference])
                done += 1
                if out is not None:
                    write_wav(out / "synthesized" / f"{uid}.wav", res["wave"], s.sample_rate)
                    write_wav(out / "reference" / f"{uid}.wav", reference, s.sample_rate)
                    if cfg.eval.plots:
                        tokens = batch["tokens"][i:i + 1, :int(batch["token_lengths"][i])]
                        stop, align = teacher_forced_view(tts, tokens, res["grouped"][None])
                        plot_utterance(out / "plots" / f"{uid}.png", res["mel"], target, stop, align,
                                       title=f"{uid}: {batch['texts'][i][:80]}")
        model.train(was_training)
        return evaluator
