"""Perplexity as fairseq-eval-lm with context window 0: exp(mean token NLL) over non-overlapping blocks."""
from __future__ import annotations

import math
from typing import ClassVar

import torch

from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator


@register_evaluator("perplexity")
class Perplexity(Evaluator):
    """``ppl`` = exp(mean token NLL) and ``nll`` (mean NLL, nats/token). ``num_samples`` counts scored tokens.

    ``update(nll, None)``: the per-token NLL the model produced (any shape, natural log; select the tokens to score
    before passing them). The targets are already inside the NLL, so ``targets`` is None.
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"ppl": False, "nll": False}

    def reset(self) -> None:
        self.total = 0.0
        self.num_samples = 0

    def update(self, predictions: torch.Tensor, targets: None = None) -> None:
        if targets is not None:
            raise ValueError("Perplexity.update(nll, None): the NLL already holds the targets; select the tokens to "
                             "score before passing them")
        nll = predictions.detach().double()
        self.total += float(nll.sum())
        self.num_samples += nll.numel()

    def compute(self) -> dict[str, float]:
        if self.num_samples == 0:
            raise ValueError("Perplexity.compute() called before any token was scored")
        nll = self.total / self.num_samples
        return {"ppl": math.exp(nll), "nll": nll}


@register_evaluator("perplexity_table")
class PerplexityTable(Evaluator):
    """Several perplexities in one result, one per group: ``update({group: nll}, None)`` -> metric ``ppl@<group>``.

    Groups are, e.g., evaluation context lengths (``ppl@1024``, ``ppl@2048``) or streaming position buckets; they are
    part of the predictions (a mapping of group name to per-token NLL). ``num_samples`` is the largest number of
    tokens any group scored.
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"ppl": False}

    def reset(self) -> None:
        self.groups: dict[str, Perplexity] = {}
        self.num_samples = 0

    def update(self, predictions: dict[str, torch.Tensor], targets: None = None) -> None:
        if not isinstance(predictions, dict):
            raise TypeError(f"PerplexityTable.update takes {{group: nll}}, got {type(predictions).__name__}")
        for name, nll in predictions.items():
            group = self.groups.setdefault(str(name), Perplexity())
            group.update(nll, targets)
            self.num_samples = max(self.num_samples, group.num_samples)

    def compute(self) -> dict[str, float]:
        if not self.groups:
            raise ValueError("PerplexityTable.compute() called before any token was scored")
        return {f"ppl@{name}": group.compute()["ppl"] for name, group in self.groups.items()}

