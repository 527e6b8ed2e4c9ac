"""Summarization inference: decode summaries of padded source batches with a trained model (the recipe's
evaluation), and :class:`Summarizer`, what ``lavo_zoo.load`` returns for a ``summarization`` checkpoint
(``lavo-zoo summarize`` calls it)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from lavo_zoo.engine.checkpoint import unwrap
from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.engine.recipe import to_device
from lavo_zoo.errors import InputError
from lavo_zoo.formats.multinews import ARTICLE_SEPARATOR, split_articles
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


def split_document(text: str) -> list[str]:
    """The articles of one document given as text: separated by ``|||||`` (Multi-News) or, without it, by blank
    lines."""
    if ARTICLE_SEPARATOR in text:
        return split_articles(text)
    return [a.strip() for a in text.replace("\r\n", "\n").split("\n\n") if a.strip()]


class Summarizer(Predictor):
    """A trained summarization model: ``summarize`` turns documents into summaries (``lavo_zoo.load`` returns it for
    a ``summarization`` checkpoint)."""

    def summarize(self, documents: str | Sequence[str] | Sequence[Sequence[str]], beam: int | None = None,
                  max_length: int | None = None, batch_size: int = 8) -> str | list[str]:
        """The summary of one document (a string: articles separated by ``|||||`` or blank lines), or one summary per
        document of a list (each a string or a list of article texts), decoded ``batch_size`` documents at a time
        with the checkpoint's eval settings (``beam``, ``max_length`` in tokens override them)."""
        single = isinstance(documents, str)
        docs = [documents] if single else list(documents)
        articles = [split_document(d) if isinstance(d, str) else [a for a in d if a.strip()] for d in docs]
        empty = [i for i, a in enumerate(articles) if not a]
        if empty:
            raise InputError(f"document {empty[0]} holds no article text")
        vocab = Vocabulary(self.cfg.data.tokenizer)
        summaries: list[str] = []
        for start in range(0, len(articles), batch_size):
            samples = [{"id": str(i), "target": torch.tensor([vocab.bos, vocab.eos]), "reference": "",
                        "source": torch.tensor(vocab.encode_source(a)[:self.cfg.data.max_source_tokens] or [vocab.sep])}
                       for i, a in enumerate(articles[start:start + batch_size])]
            batch = to_device(collate(samples, vocab.pad), self.device)
            summaries += generate_summaries(self.model, self.cfg, batch["source"], batch["source_mask"], beam,
                                            max_length)
        return summaries[0] if single else summaries
