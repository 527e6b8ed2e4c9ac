"""Answers of a trained recall model: :func:`query_logits` (the recipe's loss and evaluation) and :class:`Recaller`,
what ``lavo_zoo.load`` returns for a ``recall`` checkpoint (``lavo-zoo answer`` calls it)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lavo_zoo import limits
from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.errors import InputError
from lavo_zoo.recipes.recall.data import IGNORE, read_examples


def query_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [N, V], answers [N]) at the N query positions of a collated batch (tokens [B, T], targets [B, T]
    with -100 where nothing is asked), in row-major order."""
    select = batch["targets"] != IGNORE  # [B, T]
    return model(batch["tokens"], select), batch["targets"][select]


class Recaller(Predictor):
    """A trained recall model: ``answer`` gives its answers at the query positions of token sequences."""

    @torch.no_grad()
    def answer(self, tokens: Sequence[int] | Sequence[Sequence[int]],
               queries: Sequence[int] | Sequence[Sequence[int]], batch_size: int = 64) -> list[int] | list[list[int]]:
        """The model's answers at query positions.

        Args:
            tokens: one sequence of token ids, or a list of sequences (of any lengths).
            queries: the positions to answer at in ``tokens`` (for a list: one list of positions per sequence).
            batch_size: sequences per forward pass.

        Returns:
            The model's most likely next token at each query position: a list of ids for one sequence, one such list
            per sequence for a list.

        Raises:
            InputError: ids outside the vocabulary, positions outside a sequence, as many query lists as sequences
                not given, ``batch_size`` outside its range, or scores that are not finite.
        """
        batch_size = limits.BATCH_SIZE.check(batch_size)
        single = len(tokens) > 0 and np.ndim(tokens[0]) == 0  # ids, not sequences of ids
        sequences, asked = ([tokens], [queries]) if single else (list(tokens), list(queries))
        if len(sequences) != len(asked):
            raise InputError(f"{len(sequences)} sequences but {len(asked)} lists of queries; give one list each")
        vocab = self.cfg.model.vocab_size
        for i, (seq, qs) in enumerate(zip(sequences, asked)):
            if len(seq) == 0 or min(seq) < 0 or max(seq) >= vocab:
                raise InputError(f"sequence {i}: the model reads ids 0..{vocab - 1}, got "
                                 f"{min(seq, default=None)}..{max(seq, default=None)} over {len(seq)} tokens")
            if any(not 0 <= q < len(seq) for q in qs):
                raise InputError(f"sequence {i}: query positions must lie in 0..{len(seq) - 1}, got {list(qs)[:8]}")
        out: list[list[int]] = [[] for _ in sequences]
        by_length: dict[int, list[int]] = {}
        for i, seq in enumerate(sequences):
            by_length.setdefault(len(seq), []).append(i)
        for rows in by_length.values():  # sequences of one length share a batch
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                batch = torch.tensor([list(sequences[i]) for i in chunk], device=self.device)  # [b, T]
                select = torch.zeros_like(batch, dtype=torch.bool)
                for row, i in enumerate(chunk):
                    select[row, list(asked[i])] = True
                logits = self.model(batch, select)  # [N, V], row-major
                self.check_finite(logits, f"sequences {chunk[0]}..{chunk[-1]}")
                answers = torch.full_like(batch, -1)  # [b, T]: the answer at each selected position
                answers[select] = logits.argmax(-1)
                for row, i in enumerate(chunk):
                    out[i] = answers[row, list(asked[i])].tolist()
        return out[0] if single else out

    def answer_file(self, path: Path, batch_size: int = 64) -> list[dict[str, list[int]]]:
        """``{"queries", "answers"}`` for every example of a recall split file (checked as the recipe reads it):
        the predictions ``lavo-zoo score accuracy`` reads beside that file."""
        data = self.cfg.data
        examples = read_examples(Path(path), data.vocab_size, data.seq_len)
        sequences = [examples.tokens[i].tolist() for i in range(len(examples))]
        queries = [(examples.targets[i] != IGNORE).nonzero()[0].tolist() for i in range(len(examples))]
        answers = self.answer(sequences, queries, batch_size)
        return [{"queries": q, "answers": a} for q, a in zip(queries, answers)]
