"""The ``summarization`` recipe: the paper's encoder-decoder Transformer on Multi-News (or the built-in corpus),
any attention at each site, greedy (or beam) decoding with lengths from the source, ROUGE."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeFloat, NonNegativeInt, PositiveInt
from lavo_zoo.engine.checkpoint_io import unwrap
from lavo_zoo.engine.recipe import EvalPlaces, Recipe, register_recipe
from lavo_zoo.engine.run_config import EvalConfig, RunConfig, TrainConfig
from lavo_zoo.errors import ConfigError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.nn.losses import label_smoothed_cross_entropy
from lavo_zoo.recipes.summarization.builtin import BuiltinCorpus
from lavo_zoo.recipes.summarization.data import DataConfig, SummarizationDataset, Vocabulary, collate, load_split
from lavo_zoo.recipes.summarization.infer import Summarizer, generate_summaries, summarize_batches
from lavo_zoo.recipes.summarization.model import ModelConfig, SummarizationTransformer


def paper_train_config() -> TrainConfig:
    """CAB's ParaGen settings for Multi-News: AdamW (0.9, 0.98), eps 1e-8, weight decay 0.01, peak lr 5e-4 with
    inverse-sqrt decay after 1,000 warm-up steps, 50K steps, 64 examples per step (8 x 8 accumulated), no gradient
    clipping."""
    return TrainConfig(optimizer="adamw", lr=5e-4, betas=[0.9, 0.98], eps=1e-8, weight_decay=0.01,
                       schedule="inverse_sqrt", warmup_steps=1000, max_steps=50_000, batch_size=8, grad_accum=8,
                       clip_grad_norm=0.0, eval_every=2000, eval_batches=4, save_every=2000)


@dataclass
class SummarizationEvalConfig(EvalConfig):
    """Decoding (``batch_size``, shared: sources per evaluation batch). Summary length limits grow with the
    source's S real tokens: at most ``int(max_len_a * S + max_len_b)`` tokens (EOS included) and at least
    ``int(min_len_a * S + min_len_b)``.
    """

    beam: PositiveInt = 1  # 1 = greedy (the paper's decoding)
    max_len_a: NonNegativeFloat = 0.1
    max_len_b: NonNegativeInt = 60
    min_len_a: NonNegativeFloat = 0.0
    min_len_b: NonNegativeInt = 10
    length_penalty: float = 1.0
    no_repeat_ngram_size: NonNegativeInt = 0


@dataclass
class SummarizationConfig(RunConfig):
    recipe: str = "summarization"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: SummarizationEvalConfig = field(default_factory=SummarizationEvalConfig)


@register_recipe("summarization")
class SummarizationRecipe(Recipe):
    description = "6+6 Transformer summariser: any attention per site, greedy/beam decoding, ROUGE"
    config_class = SummarizationConfig
    tiny_config = "summarization/tiny-lavo-noncausal"
    evaluator = "rouge"
    builtin = BuiltinCorpus()
    task = ("summarization", "Multi-document summarization")
    limits = ("Its summaries come from a small encoder-decoder and may state what the sources do not say: do not "
              "rely on them as faithful summaries.")
    predictor = Summarizer

    def resolve(self, cfg: SummarizationConfig) -> SummarizationConfig:
        """Vocabulary size and padding id from ``data.tokenizer``; length settings checked against the positions."""
        vocab = Vocabulary(cfg.data.tokenizer)
        cfg.model.vocab_size, cfg.model.pad_id = vocab.size, vocab.pad
        cfg.model.never_generate = [vocab.bos, vocab.pad, vocab.sep]
        m, d, e = cfg.model, cfg.data, cfg.eval
        if d.max_source_tokens > m.max_source_positions:
            raise ConfigError(f"data.max_source_tokens ({d.max_source_tokens}) exceeds model.max_source_positions "
                              f"({m.max_source_positions})")
        if d.max_target_tokens + 1 > m.max_target_positions:
            raise ConfigError(f"data.max_target_tokens + 1 (BOS) = {d.max_target_tokens + 1} exceeds "
                              f"model.max_target_positions ({m.max_target_positions})")
        longest = int(e.max_len_a * d.max_source_tokens + e.max_len_b)
        if longest > m.max_target_positions:
            raise ConfigError(f"eval.max_len_a * data.max_source_tokens + eval.max_len_b = {longest} summary tokens "
                              f"would outgrow model.max_target_positions ({m.max_target_positions}); lower them")
        if e.beam < 1:
            raise ConfigError(f"eval.beam must be >= 1, got {e.beam}")
        return cfg

    def build_model(self, cfg: SummarizationConfig) -> nn.Module:
        self.cfg = self.resolve(cfg)  # the decoding settings `predict` uses
        return SummarizationTransformer(cfg.model)

    def build_dataset(self, cfg: SummarizationConfig, split: str) -> Dataset:
        examples = load_split(self.data_path(cfg.data), self.check_split(split), cfg.data.format).examples
        return SummarizationDataset(examples, Vocabulary(cfg.data.tokenizer), cfg.data.max_source_tokens,
                                    cfg.data.max_target_tokens)

    def collate(self, samples: list[dict]) -> dict:
        return collate(samples, pad=Vocabulary().pad)

    def training_loss(self, model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        """Label-smoothed cross-entropy of the summary tokens (fairseq's, padding ignored, the tied output head's
        logits computed in chunks); also logs the plain NLL."""
        core = unwrap(model)
        pad = core.cfg.pad_id
        target_in, target_out = batch["target"][:, :-1], batch["target"][:, 1:]  # [B, T]
        hidden = model(batch["source"], batch["source_mask"], target_in, target_in != pad)  # [B, T, D]
        loss, nll = label_smoothed_cross_entropy(hidden, target_out, core.cfg.label_smoothing,
                                                 weight=core.embed_tokens.weight, ignore_index=pad)  # tied head
        return loss, {"nll": float(nll.detach())}

    def predict(self, model: nn.Module, batch: dict) -> tuple[list[str], list[str]]:
        """(generated summaries, reference summaries) of a batch, decoded with the eval settings of the config the
        model was built from (the defaults before any)."""
        cfg = getattr(self, "cfg", None) or self.resolve(SummarizationConfig())
        return generate_summaries(model, cfg, batch["source"], batch["source_mask"]), batch["references"]

    def evaluate(self, model: nn.Module, cfg: SummarizationConfig, split: str, device: torch.device,
                 max_batches: int | None = None, places: EvalPlaces | None = None) -> Evaluator:
        """Decode ``split`` (at most ``max_batches`` batches) and score the summaries against the full references,
        keeping every (id, hypothesis, reference) for ``lavo-zoo eval --out`` to write beside the results
        (:func:`~lavo_zoo.recipes.summarization.infer.summarize_batches`); nothing is written at ``places``. Periodic
        validation during training goes through :meth:`validation_step` (loss, then the same decoding and ROUGE)."""
        return summarize_batches(model, cfg, self.eval_loader(cfg, split), device, max_batches)


__all__ = ["SummarizationConfig", "SummarizationEvalConfig", "SummarizationRecipe"]
