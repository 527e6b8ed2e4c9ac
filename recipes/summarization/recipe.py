"""The ``summarization`` recipe: the paper's encoder-decoder Transformer on Multi-News (or the built-in corpus),
any attention at each site, greedy (or beam) decoding with lengths from the source, ROUGE."""
from __future__ import annotations

import logging
import platform
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.config import EvalConfig, NonNegativeFloat, NonNegativeInt, PositiveInt, RunConfig
from lavo_zoo.engine.checkpoint import unwrap
from lavo_zoo.engine.recipe import Recipe, register_recipe, to_device
from lavo_zoo.errors import ConfigError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.evaluators.rouge import Rouge
from lavo_zoo.nn.losses import label_smoothed_cross_entropy
from lavo_zoo.recipes.summarization.data import (
    BUILTIN_VERSION,
    DataConfig,
    SummarizationDataset,
    Vocabulary,
    collate,
    load_split,
    write_stdlib_corpus,
)
from lavo_zoo.recipes.summarization.infer import Summarizer, generate_summaries
from lavo_zoo.recipes.summarization.model import ModelConfig, SummarizationTransformer

log = logging.getLogger(__name__)


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
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: SummarizationEvalConfig = field(default_factory=SummarizationEvalConfig)


@register_recipe("summarization")
class SummarizationRecipe(Recipe):
    description = "6+6 Transformer on Multi-News: any attention per site, greedy/beam decoding, ROUGE"
    config_class = SummarizationConfig
    tiny_config = "summarization/tiny-lavo-noncausal"
    evaluator = "rouge"
    datasets = ("stdlib",)
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

    def builtin_key(self, data: DataConfig) -> dict:
        """The corpus of this Python's standard library (its version and location), a fixed size."""
        return {"dataset": "stdlib", "python": platform.python_version(), "stdlib": sysconfig.get_paths()["stdlib"],
                "format": BUILTIN_VERSION}

    def write_builtin(self, out: Path, data: DataConfig) -> Path:
        """The standard-library corpus in the Multi-News layout ({train,val,test}.src/.tgt)."""
        log.info("generated the built-in summarization corpus: %s", write_stdlib_corpus(out))
        return out

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

    @torch.no_grad()
    def evaluate(self, model: nn.Module, cfg: SummarizationConfig, split: str, device: torch.device,
                 max_batches: int | None = None) -> Evaluator:
        """Decode ``split`` (at most ``max_batches`` batches) and score the summaries against the full references,
        keeping every (id, hypothesis, reference) for ``lavo-zoo eval --out`` to write beside the results. Periodic
        validation during training goes through :meth:`validation_step` (loss, then the same decoding and ROUGE)."""
        evaluator = Rouge(keep_summaries=True)
        was_training = model.training
        model.eval()
        for i, batch in enumerate(self.eval_loader(cfg, split)):
            if max_batches and i >= max_batches:
                break
            batch = to_device(batch, device)
            hypotheses = generate_summaries(model, cfg, batch["source"], batch["source_mask"])
            evaluator.update(hypotheses, batch["references"], ids=batch["ids"])  # as predict(), with the ids
        model.train(was_training)
        return evaluator


__all__ = ["SummarizationConfig", "SummarizationEvalConfig", "SummarizationRecipe"]
