"""Answers of a trained recall model: :func:`query_logits` (the recipe's loss and evaluation) and :class:`Recaller`,
what ``lavo_zoo.load`` returns for a ``recall`` checkpoint (``lavo-zoo answer`` calls it)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lavo_zoo import limits
from lavo_zoo.engine.predictor import Predictor, as_batch, describe, int_values, is_flat_sequence, is_int
from lavo_zoo.errors import InputError
from lavo_zoo.recipes.recall.data import IGNORE, read_examples


def query_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [N, V], answers [N]) at the N query positions of a collated batch (tokens [B, T], targets [B, T]
    with -100 where nothing is asked, and the source context [B, S] in cross recall), in row-major order."""
    select = batch["targets"] != IGNORE  # [B, T]
    if "context" in batch:
        return model(batch["tokens"], select, context=batch["context"]), batch["targets"][select]
    return model(batch["tokens"], select), batch["targets"][select]


class Recaller(Predictor):
    """A trained recall model: ``answer`` gives its answers at the query positions of token sequences (of a target
    and its source ``context``, for a cross-recall model)."""

    @torch.no_grad()
    def answer(self, tokens: Sequence[int] | Sequence[Sequence[int]],
               queries: Sequence[int] | Sequence[Sequence[int]], batch_size: int = 64, *,
               context: Sequence[int] | Sequence[Sequence[int]] | None = None) -> list[int] | list[list[int]]:
        """The model's answers at query positions.

        Args:
            tokens: one sequence of token ids, or a list of sequences (of any lengths); for a cross-recall model
                (``cross_mqar``) the target, whose positions ask for keys of the source.
            queries: the positions to answer at in ``tokens`` (for a list: one list of positions per sequence).
            batch_size: sequences per forward pass.
            context: a cross-recall model's source (one sequence of ids, or one per target in ``tokens``); refused
                for the other models, which read ``tokens`` alone.

        Returns:
            The model's most likely next token at each query position (a noncausal or cross model's answer there):
            a list of ids for one sequence, one such list per sequence for a list.

        Raises:
            InputError: ``tokens`` is not one sequence of integer ids or a list of them, ``queries`` not one list of
                integer positions (per sequence), ``context`` missing for a cross model, given to another, or not one
                sequence per target, ids outside the vocabulary, positions outside a sequence, as many query lists
                as sequences not given, ``batch_size`` outside its range, a batch that would not fit in memory, or
                scores that are not finite.
        """
        sequences, asked, single = self._requests(tokens, queries)
        sources = self._sources(context, len(sequences), single)
        batch_size = limits.BATCH_SIZE.check(batch_size)
        out: list[list[int]] = [[] for _ in sequences]
        by_length: dict[tuple[int, int], list[int]] = {}
        for i, seq in enumerate(sequences):
            by_length.setdefault((len(seq), len(sources[i]) if sources else 0), []).append(i)
        m = self.cfg.model
        widest = max((min(batch_size, len(rows)) * sum(lengths), sum(lengths)) for lengths, rows in by_length.items())
        self.check_fits(widest[0] * (m.ffn_dim + 8 * m.embed_dim) * 4,  # the widest activations of one batch
                        f"answering batches of up to {widest[0] // widest[1]} sequence(s) of {widest[1]:,} tokens",
                        "give shorter sequences or lower batch_size")
        for rows in by_length.values():  # sequences of one length (and source length) share a batch
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                batch = torch.tensor([list(sequences[i]) for i in chunk], device=self.device)  # [b, T]
                select = torch.zeros_like(batch, dtype=torch.bool)
                for row, i in enumerate(chunk):
                    select[row, list(asked[i])] = True
                if sources:
                    source = torch.tensor([sources[i] for i in chunk], device=self.device)  # [b, S]
                    logits = self.model(batch, select, context=source)  # [N, V], row-major
                else:
                    logits = self.model(batch, select)  # [N, V], row-major
                self.check_finite(logits, f"sequences {chunk[0]}..{chunk[-1]}")
                answers = torch.full_like(batch, -1)  # [b, T]: the answer at each selected position
                answers[select] = logits.argmax(-1)
                for row, i in enumerate(chunk):
                    out[i] = answers[row, list(asked[i])].tolist()
        return out[0] if single else out

    def _sources(self, context: Any, count: int, single: bool) -> list[list[int]]:
        """The cross model's sources, one per target, every id checked (empty for the other models, which refuse a
        ``context``)."""
        pattern = self.cfg.data.pattern
        if pattern != "cross":
            if context is not None:
                raise InputError(f"context is a cross-recall model's source; this model is {pattern} recall "
                                 f"(data.task={self.cfg.data.task}) and reads tokens alone: leave context out")
            return []
        if context is None:
            raise InputError("this model answers from a source (cross recall, data.task=cross_mqar): give "
                             "context=[ids of the source] (one per sequence of tokens)")
        found, one = as_batch(context, is_flat_sequence, "context", "a sequence of token ids (a list of int)")
        given = "one sequence of ids" if one else f"a list of {len(found)} sequence{'s' * (len(found) != 1)}"
        if single and not one:
            raise InputError(f"tokens is one sequence, so context is its source, one sequence of ids; got {given}")
        if not single and (one or len(found) != count):
            raise InputError(f"tokens holds {count} sequences, so context holds one source per sequence ({count} "
                             f"lists of ids); got {given}")
        sources = []
        vocab = self.cfg.model.vocab_size
        for i, source in enumerate(found):
            where = "context" if single else f"context[{i}]"
            source = int_values(source, where, "a token id")
            if not source:
                raise InputError(f"{where} is empty; give at least one token")
            if min(source) < 0 or max(source) >= vocab:
                raise InputError(f"{where}: the model reads ids 0..{vocab - 1}, got {min(source)}..{max(source)} over "
                                 f"{len(source)} tokens")
            sources.append(source)
        return sources

    def _requests(self, tokens: Any, queries: Any) -> tuple[list[list[int]], list[list[int]], bool]:
        """(sequences, their query positions, whether one sequence was given) from :meth:`answer`'s arguments, every
        id and position checked (:func:`~lavo_zoo.engine.predictor.as_batch`, ``int_values``: an
        :class:`InputError` naming the argument, never a TypeError or IndexError from deeper down)."""
        found, single = as_batch(tokens, is_flat_sequence, "tokens", "a sequence of token ids (a list of int)")
        if single:
            if not is_flat_sequence(queries):
                raise InputError("queries must be a list of positions (int) in tokens, got " + describe(queries)
                                 + ("; a single position is given as a list of one" if is_int(queries) else ""))
            asked = [queries]
        else:
            asked, flat = as_batch(queries, is_flat_sequence, "queries", "a list of positions (int), one per sequence")
            if flat and found:  # one list of positions for a list of sequences
                raise InputError(f"queries must hold one list of positions per sequence ({len(found)} lists), got "
                                 "one flat list of positions")
        if len(found) != len(asked):
            raise InputError(f"{len(found)} sequences but {len(asked)} lists of queries; give one list each")
        sequences, positions = [], []
        vocab = self.cfg.model.vocab_size
        for i, (seq, qs) in enumerate(zip(found, asked)):
            where, asked_where = ("tokens", "queries") if single else (f"tokens[{i}]", f"queries[{i}]")
            seq, qs = int_values(seq, where, "a token id"), int_values(qs, asked_where, "a position")
            if not seq:
                raise InputError(f"{where} is empty; give at least one token")
            if min(seq) < 0 or max(seq) >= vocab:
                raise InputError(f"{where}: the model reads ids 0..{vocab - 1}, got {min(seq)}..{max(seq)} over "
                                 f"{len(seq)} tokens")
            if any(not 0 <= q < len(seq) for q in qs):
                raise InputError(f"{asked_where}: query positions must lie in 0..{len(seq) - 1}, got {qs[:8]}")
            sequences.append(seq)
            positions.append(qs)
        return sequences, positions, single

    def answer_file(self, path: Path, batch_size: int = 64) -> list[dict[str, list[int]]]:
        """``{"queries", "answers"}`` for every example of a recall split file (checked as the recipe reads it):
        the predictions ``lavo-zoo score accuracy`` reads beside that file."""
        data = self.cfg.data
        sizes = f"{data.seq_len}-token " + ("sources and " + f"{data.target_len}-token targets" if data.target_len
                                              else "examples")
        fixed = (f"this model was trained on {sizes} over ids 0..{data.vocab_size - 1}: give a split of those "
                 "settings; from Python, lavo_zoo.load(CKPT).answer(tokens, queries) answers sequences of any length")
        examples = read_examples(Path(path), data.vocab_size, data.seq_len, fixed, data.pattern, data.target_len)
        sequences = [examples.tokens[i].tolist() for i in range(len(examples))]
        queries = [(examples.targets[i] != IGNORE).nonzero()[0].tolist() for i in range(len(examples))]
        context = None if examples.context is None else [row.tolist() for row in examples.context]
        answers = self.answer(sequences, queries, batch_size, context=context)
        return [{"queries": q, "answers": a} for q, a in zip(queries, answers)]
