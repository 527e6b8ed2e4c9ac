"""Summarization inference: decode summaries of padded source batches with a trained model
(:func:`generate_summaries`), score a split's summaries with ROUGE (:func:`summarize_batches`, the recipe's
evaluation), and :class:`Summarizer`, what ``lavo_zoo.load`` returns for a ``summarization`` checkpoint
(``lavo-zoo summarize`` calls it)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from lavo_zoo import limits
from lavo_zoo.engine.checkpoint_io import unwrap
from lavo_zoo.engine.predictor import Predictor, as_batch
from lavo_zoo.engine.recipe import to_device
from lavo_zoo.errors import InputError
from lavo_zoo.evaluators.rouge import Rouge
from lavo_zoo.formats.multinews import ARTICLE_SEPARATOR, split_articles
from lavo_zoo.nn.search import Generation
from lavo_zoo.recipes.summarization.data import Vocabulary, collate


@torch.no_grad()
def search_summaries(model: nn.Module, cfg: Any, source: torch.Tensor, source_mask: torch.Tensor,
                     beam: int | None = None, max_length: int | None = None) -> Generation:
    """The search's output (token ids, lengths, scores) for a padded batch of sources (source [B, S], source_mask
    [B, S]), decoded with the eval settings of ``cfg`` (``beam`` and ``max_length`` in tokens override them).

    Args:
        model: the summarisation model (a wrapped one is unwrapped).
        cfg: the run's config (its ``eval`` search settings, its tokenizer).
        source: [B, S] the sources' token ids.
        source_mask: [B, S] bool, True = real token.
        beam: the beam size, or None (``eval.beam``).
        max_length: the summaries' maximum length in tokens, or None (``eval.max_len_a`` and ``max_len_b``).
    """
    from lavo_zoo.nn.search import generate

    core, e, vocab = unwrap(model), cfg.eval, Vocabulary(cfg.data.tokenizer)
    max_len_a, max_len_b = (0.0, max_length) if max_length else (e.max_len_a, e.max_len_b)
    return generate(core, source, source_mask, bos_id=vocab.bos, eos_id=vocab.eos, pad_id=vocab.pad,
                    beam_size=beam or e.beam, max_len_a=max_len_a,
                    max_len_b=min(max_len_b, core.cfg.max_target_positions),
                    min_len_a=e.min_len_a, min_len_b=min(e.min_len_b, max_len_b - 1) if max_length else e.min_len_b,
                    length_penalty=e.length_penalty, no_repeat_ngram_size=e.no_repeat_ngram_size)


def decode_summaries(cfg: Any, out: Generation) -> list[str]:
    """The texts of a search's output."""
    vocab = Vocabulary(cfg.data.tokenizer)
    return [vocab.decode(row[:n].tolist()) for row, n in zip(out.tokens, out.lengths.tolist())]


@torch.no_grad()
def generate_summaries(model: nn.Module, cfg: Any, source: torch.Tensor, source_mask: torch.Tensor,
                       beam: int | None = None, max_length: int | None = None) -> list[str]:
    """Summaries of a padded batch of sources (source [B, S], source_mask [B, S]) as text, decoded with the eval
    settings of ``cfg`` (``beam`` and ``max_length`` in tokens override them).

    Its arguments are stated on `search_summaries`.
    """
    return decode_summaries(cfg, search_summaries(model, cfg, source, source_mask, beam, max_length))


@torch.no_grad()
def summarize_batches(model: nn.Module, cfg: Any, batches: Iterable[dict], device: torch.device | str,
                      max_batches: int | None = None) -> Rouge:
    """ROUGE of the summaries of ``batches`` (collated dicts with ``source``, ``source_mask``, ``references``,
    ``ids``; at most ``max_batches`` of them) against the full references, decoded in eval mode with the eval settings
    of ``cfg``; the evaluator keeps every (id, hypothesis, reference).

    Args:
        model: the summarisation model (put back in training mode after, where it was).
        cfg: the run's config.
        batches: the collated batches.
        device: where the model runs.
        max_batches: batches to summarise at most (None: all).
    """
    evaluator = Rouge(keep_summaries=True)
    was_training = model.training
    model.eval()
    for i, batch in enumerate(batches):
        if max_batches and i >= max_batches:
            break
        batch = to_device(batch, device)
        hypotheses = generate_summaries(model, cfg, batch["source"], batch["source_mask"])
        evaluator.update(hypotheses, batch["references"], ids=batch["ids"])  # as the recipe's predict, with the ids
    model.train(was_training)
    return evaluator


def split_document(text: str) -> list[str]:
    """The articles of one document given as text: separated by ``|||||`` (Multi-News) or, without it, by blank
    lines."""
    if ARTICLE_SEPARATOR in text:
        return split_articles(text)
    return [a.strip() for a in text.replace("\r\n", "\n").split("\n\n") if a.strip()]


def is_articles(value: Any) -> bool:
    """Whether ``value`` is a document given as a list of article texts."""
    return isinstance(value, list) and all(isinstance(a, str) for a in value)


class Summarizer(Predictor):
    """A trained summarization model: ``summarize`` turns documents into summaries (``lavo_zoo.load`` returns it for
    a ``summarization`` checkpoint)."""

    def memory_estimate(self, documents: int, beam: int, length: int) -> int:
        """Estimated bytes of decoding ``documents`` sources at once with ``beam`` hypotheses each, up to ``length``
        tokens: per hypothesis the step's scores over the vocabulary (fp32 logits and the fp64 log-probabilities
        and candidates the search keeps) and the decoder's caches (self attention over the summary, cross attention
        over the source)."""
        m, S = self.cfg.model, self.cfg.data.max_source_tokens
        scores = m.vocab_size * (4 + 3 * 8)
        caches = m.decoder_layers * 2 * (S + length) * m.embed_dim * 4 + S * m.embed_dim * 4
        return documents * beam * (scores + caches)

    def summarize(self, documents: str | list[str | list[str]], beam: int | None = None,
                  max_length: int | None = None, batch_size: int = 8) -> str | list[str]:
        """Summarise documents with the checkpoint's eval settings (lengths from the source, greedy or beam).

        Args:
            documents: one document (a string: articles separated by ``|||||`` or blank lines), or a list of
                documents, each a string or a list of article texts.
            beam: beam size (default: the checkpoint's ``eval.beam``).
            max_length: the longest summary in tokens, at most the model's ``max_target_positions`` (default: from
                the source's length, ``eval.max_len_a/b``).
            batch_size: documents decoded together.

        Returns:
            The summary, or a list of them for a list of documents.

        Raises:
            InputError: ``documents`` is not a document or a list of them, a document holds no article text, an
                option is outside its range, the search would not fit in memory, or the model's scores are not
                finite.
        """
        docs, single = as_batch(documents, lambda d: isinstance(d, str), "documents", "a document (str)",
                                lambda d: isinstance(d, str) or is_articles(d),
                                "a document (a str, or a list of article texts)")
        beam = limits.BEAM.check_optional(beam)
        positions = self.cfg.model.max_target_positions
        max_length = limits.MAX_LENGTH.check_optional(max_length, positions,
                                                      "the longest summary this model writes, its "
                                                      "max_target_positions")
        batch_size = limits.BATCH_SIZE.check(batch_size)
        articles = [split_document(d) if isinstance(d, str) else [a for a in d if a.strip()] for d in docs]
        empty = [i for i, a in enumerate(articles) if not a]
        if empty:
            raise InputError(f"document {empty[0]} holds no article text")
        if articles:
            width = beam or self.cfg.eval.beam
            self.check_fits(self.memory_estimate(min(batch_size, len(articles)), width, max_length or positions),
                            f"a beam of {width} over batches of {min(batch_size, len(articles))} documents",
                            "lower beam or batch_size")
        vocab = Vocabulary(self.cfg.data.tokenizer)
        summaries: list[str] = []
        for start in range(0, len(articles), batch_size):
            samples = [{"id": str(i), "target": torch.tensor([vocab.bos, vocab.eos]), "reference": "",
                        "source": torch.tensor(vocab.encode_source(a)[:self.cfg.data.max_source_tokens] or [vocab.sep])}
                       for i, a in enumerate(articles[start:start + batch_size])]
            batch = to_device(collate(samples, vocab.pad), self.device)
            out = search_summaries(self.model, self.cfg, batch["source"], batch["source_mask"], beam, max_length)
            bad = (~torch.isfinite(out.scores)).nonzero()  # NaN scores, or no hypothesis left (-inf)
            if len(bad):
                self.check_finite(out.scores[bad[0]], f"document {start + int(bad[0][0])}")
            summaries += decode_summaries(self.cfg, out)
        return summaries[0] if single else summaries
