"""The perplexity evaluator: tokens counted, the perplexity of their mean NLL, lower is better."""
import math

import pytest
import torch

from lavo_zoo.evaluators import build_evaluator


def test_perplexity_evaluator_counts_tokens():
    ev = build_evaluator("perplexity")
    nll, scored = torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[True, True], [True, False]])
    ev.update(nll[scored], None)
    assert ev.num_samples == 3 and ev.compute()["ppl"] == pytest.approx(math.exp(2.0))
    assert ev.results()["ppl"]["higher_is_better"] is False
