"""The ``lm`` recipe: GPT-2 on PG-19 (or the built-in corpus), perplexity at several lengths and streaming."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from lavo_zoo.config import PositiveInt, RunConfig
from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.evaluators.perplexity import PerplexityTable
from lavo_zoo.recipes import Recipe, register_recipe
from lavo_zoo.recipes.lm.data import TokenBlocks, builtin_corpus, load_tokens
from lavo_zoo.recipes.lm.model import ModelConfig, TransformerLM
from lavo_zoo.recipes.lm.tokenizers import get_tokenizer


@dataclass
class DataConfig:
    path: str | None = None  # a PG-19-layout folder; unset: the built-in corpus (Python standard library sources)
    tokenizer: Literal["gpt2", "bytes"] = "gpt2"
    block_size: PositiveInt = 8192  # training context length L
    cache_dir: str | None = None  # token cache and built-in corpus (default: $LAVO_ZOO_CACHE/lm or the user cache)
    skip_bad_files: bool = False  # leave out (and name) books that are not UTF-8 text or hold NUL bytes; else refuse


@dataclass
class EvalConfig:
    batch_size: int = 0  # blocks per batch at length L (0: train.batch_size); longer contexts use fewer
    length_factors: list[float] = field(default_factory=lambda: [1.0])  # score at round(L * f) (e.g. [1,2,4,8])
    max_tokens: int = 0  # tokens scored per length (0: the whole split), the same tokens at every length
    stream: bool = False  # also stream the split through the recurrent state, with per-position-bucket ppl
    stream_chunk: int = 0  # tokens per streamed chunk (0: L)
    stream_tokens: int = 0  # tokens to stream (0: the whole split)
    plot: str | None = None  # PNG path: perplexity against context length


@dataclass
class LMRunConfig(RunConfig):
    recipe: str = "lm"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def split_tokens(cfg: LMRunConfig, split: str) -> np.ndarray:
    """The token stream of ``split`` (memory-mapped), from ``data.path`` or the built-in corpus."""
    cache = Path(cfg.data.cache_dir).expanduser() if cfg.data.cache_dir else None
    root = Path(cfg.data.path).expanduser() if cfg.data.path else builtin_corpus(cache / "builtin" if cache else None)
    return load_tokens(root, split, get_tokenizer(cfg.data.tokenizer), cache / "tokens" if cache else None,
                       skip_bad_files=cfg.data.skip_bad_files)


@register_recipe("lm")
class LanguageModelling(Recipe):
    description = "GPT-2 decoder on PG-19: perplexity at and beyond the training length, streaming, generation"
    config_class = LMRunConfig
    evaluator = "perplexity"

    def build_model(self, cfg: LMRunConfig) -> nn.Module:
        return TransformerLM(cfg.model, get_tokenizer(cfg.data.tokenizer).vocab_size)

    def build_dataset(self, cfg: LMRunConfig, split: str) -> Dataset:
        return TokenBlocks(split_tokens(cfg, split), cfg.data.block_size)

    def training_loss(self, model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        nll = model(batch[:, :-1], batch[:, 1:])  # batch [B, T+1] -> nll [B, T]
        return nll.mean(), {}

    def predict(self, model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, None]:
        return model(batch[:, :-1], batch[:, 1:]), None  # per-token NLL [B, T]

    def eval_batch_size(self, cfg: LMRunConfig) -> int:
        return cfg.eval.batch_size or cfg.train.batch_size

    @torch.no_grad()
    def evaluate(self, model: nn.Module, cfg: LMRunConfig, split: str, device: torch.device,
                 max_batches: int | None = None, batches: Any = None) -> Evaluator:
        """Perplexity at every length in ``eval.length_factors`` (``ppl@<length>``, the same tokens at each) and,
        with ``eval.stream``, over the streamed split (``ppl@stream`` and ``ppl@ctx:<lo>-<hi>`` per bucket of
        context length). ``max_batches`` caps the blocks scored at length L to ``max_batches`` batches."""
        if batches is not None:
            return super().evaluate(model, cfg, split, device, max_batches, batches)
        was_training = model.training
        model.eval()
        table = PerplexityTable()
        tokens = split_tokens(cfg, split)
        L, batch_size = cfg.data.block_size, self.eval_batch_size(cfg)
        lengths = [round(L * f) for f in cfg.eval.length_factors]
        if (not lengths and not cfg.eval.stream) or min(lengths, default=1) < 1:
            raise UsageError(f"eval.length_factors must be positive numbers (or empty with eval.stream=true), "
                             f"got {cfg.eval.length_factors}")
        if lengths:
            limits = (tokens.size - 1, cfg.eval.max_tokens, (max_batches or 0) * batch_size * L)
            length_perplexity(model, tokens, table, lengths, tokens_per_batch=batch_size * L,
                              max_tokens=min(x for x in limits if x), device=device)
        if cfg.eval.stream:
            stream_perplexity(model, tokens, table, chunk=cfg.eval.stream_chunk or L, bucket_start=L,
                              max_tokens=cfg.eval.stream_tokens or None, device=device)
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
            table.update(model(batch[:, :-1], batch[:, 1:]), str(length))


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
        table.update(nll, "stream")
        context = torch.arange(start + 1, start + 1 + nll.shape[1])  # [t] tokens seen when predicting each target
        bucket = torch.bucketize(context, edges, right=False) - 1  # context in (edges[b], edges[b+1]]
        for b in bucket.unique().tolist():
            table.update(nll[0, (bucket == b).to(nll.device)], names[b])


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
