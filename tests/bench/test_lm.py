"""``lavo-zoo bench lm``: config overrides reach the model, and LAVO's kernels are recorded for training and eval."""
from __future__ import annotations

from lavo_zoo.bench.lm import measure


def test_overrides_apply_and_lavo_kernels_are_recorded():
    plain = measure("lm/tiny-lavo", 64, 1, "cpu")
    assert plain["attention"] == "lavo" and plain["train_tokens_per_s"] > 0 and plain["eval_tokens_per_s"] > 0
    assert (plain["train_kernels"], plain["eval_kernels"]) == ("recompute", "recompute")  # CPU, no attention dropout
    dropped = measure("lm/tiny-lavo", 64, 1, "cpu", ("model.attention.dropout=0.1",))
    assert (dropped["train_kernels"], dropped["eval_kernels"]) == ("recompute", "recompute")  # dropout inside them
    assert "train_kernels" not in measure("lm/tiny-sdpa", 64, 1, "cpu")
