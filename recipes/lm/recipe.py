"""The ``lm`` recipe: GPT-2 on PG-19 (or the built-in corpus), perplexity at several lengths and streaming."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeInt, PositiveFloat
from lavo_zoo.engine.recipe import EvalPlaces, Recipe, register_recipe
from lavo_zoo.engine.run_config import EvalConfig, RunConfig, TrainConfig
from lavo_zoo.errors import ConfigError, UsageError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.nn.tokenizers import get_tokenizer
from lavo_zoo.recipes.lm.builtin import BuiltinCorpus
from lavo_zoo.recipes.lm.data import DataConfig, TokenBlocks, load_tokens
from lavo_zoo.recipes.lm.infer import LanguageModel, length_perplexity, stream_perplexity
from lavo_zoo.recipes.lm.model import ModelConfig, TransformerLM


def paper_train_config() -> TrainConfig:
    """The paper's PG-19 training (fairseq's transformer_lm_gpt): AdamW (0.9, 0.98), weight decay 0.01, peak lr 5e-4
    with inverse-sqrt decay after 10K warm-up steps from 1e-7, 2^17 tokens per step (2 x 8,192 x 8 accumulated), no
    gradient clipping (fairseq's default). The paper does not state its number of updates: 100K here."""
    return TrainConfig(optimizer="adamw", lr=5e-4, betas=[0.9, 0.98], weight_decay=0.01, schedule="inverse_sqrt",
                       warmup_steps=10_000, warmup_init_lr=1e-7, max_steps=100_000, batch_size=2, grad_accum=8,
                       clip_grad_norm=0.0, log_every=100, eval_every=2000, eval_batches=50, save_every=2000)


@dataclass
class LMEvalConfig(EvalConfig):
    # batch_size (shared): blocks per batch at length L (0: train.batch_size); longer contexts use fewer
    length_factors: list[PositiveFloat] = field(default_factory=lambda: [1.0])  # score at round(L * f) (e.g. [1,2,4,8])
    max_tokens: NonNegativeInt = 0  # tokens scored per length (0: the whole split), the same tokens at every length
    stream: bool = False  # also stream the split through the recurrent state, with per-position-bucket ppl
    stream_chunk: NonNegativeInt = 0  # tokens per streamed chunk (0: L)
    stream_tokens: NonNegativeInt = 0  # tokens to stream (0: the whole split)
    plot: str | None = None  # PNG path: perplexity against context length


@dataclass
class LMConfig(RunConfig):
    recipe: str = "lm"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: LMEvalConfig = field(default_factory=LMEvalConfig)


@register_recipe("lm")
class LMRecipe(Recipe):
    description = "GPT-2 decoder language model: perplexity at and beyond the training length, streaming, generation"
    config_class = LMConfig
    tiny_config = "lm/tiny-lavo"
    evaluator = "perplexity_table"  # ppl@<length> (and ppl@stream, ppl@ctx:<lo>-<hi> with eval.stream)
    builtin = BuiltinCorpus()
    task = ("text-generation", "Language modelling")
    limits = ("A small language model trained briefly on one corpus: it continues text in that corpus's style and "
              "is no general-purpose generator; its perplexity depends on the tokenizer and the context length.")
    predictor = LanguageModel

    def resolve(self, cfg: LMConfig) -> LMConfig:
        """``model.vocab_size`` from ``data.tokenizer``."""
        cfg.model.vocab_size = get_tokenizer(cfg.data.tokenizer).vocab_size
        return cfg

    def split_tokens(self, cfg: LMConfig, split: str) -> np.ndarray:
        """The token stream of ``split`` (memory-mapped), from ``data.path`` or the built-in corpus."""
        return load_tokens(self.data_path(cfg.data), self.check_split(split), get_tokenizer(cfg.data.tokenizer),
                           self.cache_dir(cfg.data) / "tokens", skip_bad_files=cfg.data.skip_bad_files)

    def build_model(self, cfg: LMConfig) -> nn.Module:
        """The network of ``cfg.model``; refused when ``data.tokenizer`` gives ids the model has no embedding for (a
        config whose tokenizer and vocabulary do not belong together: a :class:`ConfigError`)."""
        tokenizer = get_tokenizer(cfg.data.tokenizer)
        if 0 < cfg.model.vocab_size < tokenizer.vocab_size:
            raise ConfigError(f"data.tokenizer '{tokenizer.name}' gives ids 0..{tokenizer.vocab_size - 1}, but "
                              f"model.vocab_size is {cfg.model.vocab_size}: the model has no embedding for the others. "
                              "The config does not belong to these weights (an edited config.yaml or config.json?); "
                              "use the tokenizer the model was trained with")
        return TransformerLM(cfg.model)

    def build_dataset(self, cfg: LMConfig, split: str) -> Dataset:
        return TokenBlocks(self.split_tokens(cfg, split), cfg.data.block_size)

    def training_loss(self, model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        nll = model(batch[:, :-1], batch[:, 1:])  # batch [B, T+1] -> nll [B, T]
        return nll.mean(), {}

    def predict(self, model: nn.Module, batch: torch.Tensor) -> tuple[dict[str, torch.Tensor], None]:
        """({"<T>": per-token NLL [B, T]}, None): the table's group is the context length."""
        return {str(batch.shape[1] - 1): model(batch[:, :-1], batch[:, 1:])}, None

    def validation_step(self, model: nn.Module, batch: torch.Tensor
                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor], None]:
        """One forward pass: the mean NLL is the loss, the per-token NLL the perplexity's input."""
        predictions, targets = self.predict(model, batch)
        (nll,) = predictions.values()
        return nll.mean(), predictions, targets

    @torch.no_grad()
    def evaluate(self, model: nn.Module, cfg: LMConfig, split: str, device: torch.device,
                 max_batches: int | None = None, places: EvalPlaces | None = None) -> Evaluator:
        """Perplexity at every length in ``eval.length_factors`` (``ppl@<length>``, the same tokens at each) and,
        with ``eval.stream``, over the streamed split (``ppl@stream`` and ``ppl@ctx:<lo>-<hi>`` per bucket of
        context length). ``max_batches`` caps the tokens scored at ``max_batches`` batches of length L (at least one
        block of the longest length), and the stream at ``max_batches`` chunks; perplexity against length is drawn
        at ``places.plot`` (default: ``eval.plot``)."""
        was_training = model.training
        model.eval()
        table = self.build_evaluator(cfg)
        tokens = self.split_tokens(cfg, split)
        L, batch_size = cfg.data.block_size, self.eval_batch_size(cfg)
        lengths = [round(L * f) for f in cfg.eval.length_factors]
        if (not lengths and not cfg.eval.stream) or min(lengths, default=1) < 1:
            raise UsageError(f"eval.length_factors must be positive numbers (or empty with eval.stream=true), "
                             f"got {cfg.eval.length_factors}")
        if lengths:
            capped = max(max_batches * batch_size * L, max(lengths)) if max_batches else 0  # >= 1 longest block
            limits = (tokens.size - 1, cfg.eval.max_tokens, capped)
            length_perplexity(model, tokens, table, lengths, tokens_per_batch=batch_size * L,
                              max_tokens=min(x for x in limits if x), device=device)
        if cfg.eval.stream:
            chunk = cfg.eval.stream_chunk or L
            limits = (cfg.eval.stream_tokens, max_batches * chunk if max_batches else 0)
            stream_perplexity(model, tokens, table, chunk=chunk, bucket_start=L,
                              max_tokens=min((x for x in limits if x), default=None), device=device)
        plot = (places or EvalPlaces.from_config(cfg)).plot
        if plot:
            from lavo_zoo.recipes.lm.plot import plot_perplexity

            plot_perplexity(table.compute(), plot)
        model.train(was_training)
        return table
