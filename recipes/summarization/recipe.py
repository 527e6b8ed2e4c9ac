"""The ``summarization`` recipe: the paper's encoder-decoder Transformer on Multi-News (or the built-in corpus),
any attention at each site, greedy (or beam) decoding with lengths from the source, ROUGE."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.config import RunConfig
from lavo_zoo.errors import ConfigError, UsageError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.evaluators.rouge import Rouge
from lavo_zoo.nn.losses import label_smoothed_cross_entropy
from lavo_zoo.recipes import Recipe, register_recipe, to_device
from lavo_zoo.recipes.summarization.data import (
    DataConfig,
    SummarizationDataset,
    Vocabulary,
    builtin_corpus,
    collate,
    load_split,
    write_builtin,
)
from lavo_zoo.recipes.summarization.model import ModelConfig, SummarizationTransformer


@dataclass
class SummarizationEvalConfig:
    """Evaluation batch size and decoding. Summary length limits grow with the source's S real tokens:
    at most ``int(max_len_a * S + max_len_b)`` tokens (EOS included) and at least ``int(min_len_a * S + min_len_b)``.
    """

    batch_size: int = 0  # sources per evaluation batch (0: train.batch_size)
    beam: int = 1  # 1 = greedy (the paper's decoding)
    max_len_a: float = 0.1
    max_len_b: int = 60
    min_len_a: float = 0.0
    min_len_b: int = 10
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0


@dataclass
class SummarizationConfig(RunConfig):
    recipe: str = "summarization"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: SummarizationEvalConfig = field(default_factory=SummarizationEvalConfig)


def data_root(cfg: SummarizationConfig) -> Path:
    """``data.path``, or the built-in corpus (generated on first use)."""
    if cfg.data.path:
        return Path(cfg.data.path).expanduser()
    return builtin_corpus(Path(cfg.data.cache_dir).expanduser() if cfg.data.cache_dir else None)


@register_recipe("summarization")
class SummarizationRecipe(Recipe):
    description = "6+6 Transformer on Multi-News: any attention per site, greedy/beam decoding, ROUGE"
    config_class = SummarizationConfig
    tiny_config = "summarization/tiny-lavo-noncausal"
    evaluator = "rouge"
    commands: ClassVar[dict[str, str]] = {"summarize": "lavo_zoo.recipes.summarization.cli:summarize"}
    score_commands: ClassVar[dict[str, str]] = {"rouge": "lavo_zoo.recipes.summarization.cli:score_rouge"}

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
        examples = load_split(data_root(cfg), self.check_split(split), cfg.data.format).examples
        return SummarizationDataset(examples, Vocabulary(cfg.data.tokenizer), cfg.data.max_source_tokens,
                                    cfg.data.max_target_tokens)

    def write_data(self, out: Path, dataset: str | None = None, size: int | None = None) -> Path:
        """The built-in corpus in the Multi-News layout ({train,val,test}.src/.tgt); ``size`` is not supported."""
        if dataset not in (None, "stdlib"):
            raise UsageError(f"recipe 'summarization' has one built-in dataset, 'stdlib'; got '{dataset}'")
        if size is not None:
            raise UsageError("the built-in summarization corpus has a fixed size (all standard-library modules); "
                             "drop --size")
        write_builtin(Path(out))
        return Path(out)

    def collate(self, samples: list[dict]) -> dict:
        return collate(samples, pad=Vocabulary().pad)

    def training_loss(self, model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        """Label-smoothed cross-entropy of the summary tokens (fairseq's, padding ignored, the tied output head's
        logits computed in chunks); also logs the plain NLL."""
        core = _unwrap(model)
        pad = core.cfg.pad_id
        target_in, target_out = batch["target"][:, :-1], batch["target"][:, 1:]  # [B, T]
        hidden = model(batch["source"], batch["source_mask"], target_in, target_in != pad)  # [B, T, D]
        loss, nll = label_smoothed_cross_entropy(hidden, target_out, core.cfg.label_smoothing,
                                                 weight=core.embed_tokens.weight, ignore_index=pad)  # tied head
        return loss, {"nll": float(nll.detach())}

    @torch.no_grad()
    def generate(self, model: nn.Module, cfg: SummarizationConfig, source: torch.Tensor, source_mask: torch.Tensor,
                 beam: int | None = None, max_length: int | None = None) -> list[str]:
        """Summaries of a padded batch of sources (source [B, S], source_mask [B, S]) as text."""
        from lavo_zoo.nn.search import generate

        core, e, vocab = _unwrap(model), cfg.eval, Vocabulary(cfg.data.tokenizer)
        max_len_a, max_len_b = (0.0, max_length) if max_length else (e.max_len_a, e.max_len_b)
        out = generate(core, source, source_mask, bos_id=vocab.bos, eos_id=vocab.eos, pad_id=vocab.pad,
                       beam_size=beam or e.beam, max_len_a=max_len_a,
                       max_len_b=min(max_len_b, core.cfg.max_target_positions),
                       min_len_a=e.min_len_a, min_len_b=min(e.min_len_b, max_len_b - 1) if max_length else e.min_len_b,
                       length_penalty=e.length_penalty, no_repeat_ngram_size=e.no_repeat_ngram_size)
        return [vocab.decode(row[:n].tolist()) for row, n in zip(out.tokens, out.lengths.tolist())]

    def predict(self, model: nn.Module, batch: dict) -> tuple[list[str], list[str]]:
        """(generated summaries, reference summaries) of a batch, decoded with the eval settings of the config the
        model was built from (the defaults before any)."""
        cfg = getattr(self, "cfg", None) or self.resolve(SummarizationConfig())
        return self.generate(model, cfg, batch["source"], batch["source_mask"]), batch["references"]

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
            hypotheses = self.generate(model, cfg, batch["source"], batch["source_mask"])
            evaluator.update(hypotheses, batch["references"], ids=batch["ids"])  # as predict(), with the ids
        model.train(was_training)
        return evaluator

    def eval_batch_size(self, cfg: SummarizationConfig) -> int:
        return cfg.eval.batch_size or cfg.train.batch_size


def _unwrap(model: nn.Module) -> SummarizationTransformer:
    """The model inside DDP / torch.compile wrappers."""
    while not isinstance(model, SummarizationTransformer):
        model = getattr(model, "module", None) or model._orig_mod
    return model


@dataclass
class Summarizer:
    """A loaded checkpoint that summarizes lists of articles (``lavo-zoo summarize``)."""

    recipe: SummarizationRecipe
    cfg: SummarizationConfig
    model: SummarizationTransformer
    device: torch.device

    def summarize(self, documents: list[list[str]], beam: int | None = None, max_length: int | None = None
                  ) -> list[str]:
        """One summary per document (a list of article texts)."""
        vocab = Vocabulary(self.cfg.data.tokenizer)
        samples = [{"id": str(i), "source": torch.tensor(vocab.encode_source(articles)[:self.cfg.data.max_source_tokens]
                                                        or [vocab.sep]),
                    "target": torch.tensor([vocab.bos, vocab.eos]), "reference": ""}
                   for i, articles in enumerate(documents)]
        batch = to_device(collate(samples, vocab.pad), self.device)
        return self.recipe.generate(self.model, self.cfg, batch["source"], batch["source_mask"], beam, max_length)


def load_summarizer(path: Path, device: str | None = None) -> Summarizer:
    """A :class:`Summarizer` from a summarization checkpoint directory."""
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device

    dev = pick_device(device)
    recipe, cfg, model, _ = load_model(path, dev)
    if not isinstance(recipe, SummarizationRecipe):
        raise UsageError(f"{path} is a '{recipe.name}' checkpoint; `lavo-zoo summarize` needs a summarization one")
    return Summarizer(recipe, cfg, model, dev)


__all__ = ["SummarizationConfig", "SummarizationEvalConfig", "SummarizationRecipe", "Summarizer"]
