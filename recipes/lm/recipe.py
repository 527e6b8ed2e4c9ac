"""The ``lm`` recipe: GPT-2 on PG-19 (or the built-in corpus), perplexity at several lengths and streaming."""
from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from lavo_zoo.config import EvalConfig, NonNegativeInt, PositiveFloat, RunConfig
from lavo_zoo.engine.recipe import Recipe, register_recipe
from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.evaluators.perplexity import PerplexityTable
from lavo_zoo.nn.tokenizers import get_tokenizer
from lavo_zoo.recipes.lm.data import CACHE_FORMAT, DataConfig, TokenBlocks, load_tokens, write_stdlib_corpus
from lavo_zoo.recipes.lm.infer import LanguageModel
from lavo_zoo.recipes.lm.model import ModelConfig, TransformerLM


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
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: LMEvalConfig = field(default_factory=LMEvalConfig)


@register_recipe("lm")
class LMRecipe(Recipe):
    description = "GPT-2 decoder on PG-19: perplexity at and beyond the training length, streaming, generation"
    config_class = LMConfig
    tiny_config = "lm/tiny-lavo"
    evaluator = "perplexity_table"  # ppl@<length> (and ppl@stream, ppl@ctx:<lo>-<hi> with eval.stream)
    datasets = ("stdlib",)
    task = ("text-generation", "Language modelling")
    limits = ("A small language model trained briefly on one corpus: it continues text in that corpus's style and "
              "is no general-purpose generator; its perplexity depends on the tokenizer and the context length.")
    predictor = LanguageModel

    def resolve(self, cfg: LMConfig) -> LMConfig:
        """``model.vocab_size`` from ``data.tokenizer``."""
        cfg.model.vocab_size = get_tokenizer(cfg.data.tokenizer).vocab_size
        return cfg

    def builtin_key(self, data: DataConfig) -> dict:
        """The standard-library corpus of this Python version (``builtin_size`` books, 0: all)."""
        return {"dataset": "stdlib", "python": platform.python_version(), "books": data.builtin_size,
                "format": CACHE_FORMAT}

    def write_builtin(self, out: Path, data: DataConfig) -> Path:
        """The standard-library corpus in the PG-19 layout."""
        return write_stdlib_corpus(out, max_books=data.builtin_size or None)

    def split_tokens(self, cfg: LMConfig, split: str) -> np.ndarray:
        """The token stream of ``split`` (memory-mapped), from ``data.path`` or the built-in corpus."""
        return load_tokens(self.data_path(cfg.data), self.check_split(split), get_tokenizer(cfg.data.tokenizer),
                           self.cache_dir(cfg.data) / "tokens", skip_bad_files=cfg.data.skip_bad_files)

    def build_model(self, cfg: LMConfig) -> nn.Module:
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
                 max_batches: int | None = None) -> Evaluator:
        """Perplexity at every length in ``eval.length_factors`` (``ppl@<length>``, the same tokens at each) and,
        with ``eval.stream``, over the streamed split (``ppl@stream`` and ``ppl@ctx:<lo>-<hi>`` per bucket of
        context length). ``max_batches`` caps the tokens scored at ``max_batches`` batches of length L (at least one
        block of the longest length), and the stream at ``max_batches`` chunks."""
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
        if cfg.eval.plot:
            plot_perplexity(table.compute(), Path(cfg.eval.plot))
        model.train(was_training)
        return table


@torch.no_grad()
def length_perplexity(model: nn.Module, tokens: np.ndarray, table: PerplexityTable, lengths: list[int], *,
                      tokens_per_batch: int, max_tokens: int, device: torch.device | str = "cpu") -> None:
    """Score non-overlapping blocks of each length into group ``<length>`` of ``table``, every length over the same
    first ``max_tokens`` targets rounded down to a multiple of the longest length."""
    scored = max_tokens // max(lengths) * max(lengths)
    if scored == 0:
        raise DataError(f"the split has {tokens.size} tokens (limit {max_tokens}), fewer than one block of the "
                        f"longest evaluation length {max(lengths)}; lower eval.length_factors or data.block_size")
    for length in lengths:
        blocks = TokenBlocks(tokens, length, max_tokens=scored)
        for batch in DataLoader(blocks, batch_size=max(1, tokens_per_batch // length)):
            batch = batch.to(device)  # [b, length + 1]
            table.update({str(length): model(batch[:, :-1], batch[:, 1:])})


def bucket_edges(first: int, total: int) -> list[int]:
    """Context-length bucket bounds 0, first, 2*first, 4*first, ... up to >= total."""
    edges = [0, first]
    while edges[-1] < total:
        edges.append(edges[-1] * 2)
    return edges


@torch.no_grad()
def stream_perplexity(model: nn.Module, tokens: np.ndarray, table: PerplexityTable, *, chunk: int, bucket_start: int,
                      max_tokens: int | None = None, device: torch.device | str = "cpu") -> None:
    """Feed ``tokens`` through ``model`` as ONE sequence, ``chunk`` tokens at a time, carrying the recurrent state.

    Adds every token's NLL to group ``stream`` of ``table`` and to ``ctx:<lo>-<hi>``, the bucket of its context
    length (tokens seen so far, 1-based; buckets double from ``bucket_start``). Memory is constant in the stream's
    length for attentions with a bounded state (LAVO, local); a KV cache grows with it.
    """
    if not getattr(model, "streaming", False):
        raise UsageError("eval.stream needs a streaming attention (one whose `lavo-zoo list attentions` entry has "
                         "streaming=True); this model's attention cannot carry state across chunks")
    n = min(tokens.size - 1, max_tokens or tokens.size)
    edges = torch.tensor(bucket_edges(bucket_start, n))
    names = [f"ctx:{lo + 1}-{hi}" for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist())]
    state = None
    for start in tqdm(range(0, n, chunk), desc="streaming", unit="chunk", disable=None, file=sys.stderr):
        block = torch.from_numpy(tokens[start:min(start + chunk, n) + 1].astype(np.int64))[None].to(device)  # [1, t+1]
        nll, state = model(block[:, :-1], block[:, 1:], state=state, return_state=True)  # [1, t]
        table.update({"stream": nll})
        context = torch.arange(start + 1, start + 1 + nll.shape[1])  # [t] tokens seen when predicting each target
        bucket = torch.bucketize(context, edges, right=False) - 1  # context in (edges[b], edges[b+1]]
        for b in bucket.unique().tolist():
            table.update({names[b]: nll[0, (bucket == b).to(nll.device)]})


def plot_perplexity(metrics: dict[str, float], path: Path) -> None:
    """PNG of perplexity against context length: evaluation lengths and streamed context buckets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    lengths = sorted((int(k[4:]), v) for k, v in metrics.items() if k[4:].isdigit())
    if lengths:
        ax.plot(*zip(*lengths), "o-", label="blocks of this length")
    buckets = [(int(k.rsplit("-", 1)[1]), v) for k, v in metrics.items() if k.startswith("ppl@ctx:")]
    if buckets:
        ax.plot(*zip(*sorted(buckets)), "s-", label="streaming, by context length")
    ax.set(xscale="log", xlabel="context length (tokens)", ylabel="perplexity", title="Perplexity vs context")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
