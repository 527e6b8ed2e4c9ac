"""Summarization inference: decode summaries of padded source batches with a trained model (the recipe's
evaluation), and :class:`Summarizer`, a loaded checkpoint that summarizes article texts (``lavo-zoo summarize``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lavo_zoo.engine.checkpoint import unwrap
from lavo_zoo.engine.recipe import Recipe, to_device
from lavo_zoo.errors import UsageError
from lavo_zoo.recipes.summarization.data import Vocabulary, collate


@torch.no_grad()
def generate_summaries(model: nn.Module, cfg: Any, source: torch.Tensor, source_mask: torch.Tensor,
                       beam: int | None = None, max_length: int | None = None) -> list[str]:
    """Summaries of a padded batch of sources (source [B, S], source_mask [B, S]) as text, decoded with the eval
    settings of ``cfg`` (``beam`` and ``max_length`` in tokens override them)."""
    from lavo_zoo.nn.search import generate

    core, e, vocab = unwrap(model), cfg.eval, Vocabulary(cfg.data.tokenizer)
    max_len_a, max_len_b = (0.0, max_length) if max_length else (e.max_len_a, e.max_len_b)
    out = generate(core, source, source_mask, bos_id=vocab.bos, eos_id=vocab.eos, pad_id=vocab.pad,
                   beam_size=beam or e.beam, max_len_a=max_len_a,
                   max_len_b=min(max_len_b, core.cfg.max_target_positions),
                   min_len_a=e.min_len_a, min_len_b=min(e.min_len_b, max_len_b - 1) if max_length else e.min_len_b,
                   length_penalty=e.length_penalty, no_repeat_ngram_size=e.no_repeat_ngram_size)
    return [vocab.decode(row[:n].tolist()) for row, n in zip(out.tokens, out.lengths.tolist())]


@dataclass
class Summarizer:
    """A loaded checkpoint that summarizes lists of articles (``lavo-zoo summarize``)."""

    recipe: Recipe
    cfg: Any
    model: nn.Module
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
        return generate_summaries(self.model, self.cfg, batch["source"], batch["source_mask"], beam, max_length)


def load_summarizer(path: Path, device: str | None = None) -> Summarizer:
    """A :class:`Summarizer` from a summarization checkpoint directory."""
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device

    dev = pick_device(device)
    recipe, cfg, model, _ = load_model(path, dev)
    if recipe.name != "summarization":
        raise UsageError(f"{path} is a '{recipe.name}' checkpoint; `lavo-zoo summarize` needs a summarization one")
    return Summarizer(recipe, cfg, model, dev)
