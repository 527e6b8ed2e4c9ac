"""Transformer-LS (longshort.py) beyond its naive reference (test_naive_references.py): the paper's defaults."""
from __future__ import annotations

from lavo_zoo.attention import build_attention
from tests.attention.mechanism_testing import D, H


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: window 16, 64 landmarks."""
    ls = build_attention("longshort", D, H, "noncausal")
    assert (ls.window_size, ls.num_landmarks) == (16, 64)
