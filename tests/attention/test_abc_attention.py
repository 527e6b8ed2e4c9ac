"""ABC (abc_attention.py) beyond its naive reference (test_naive_references.py): the causal memory accumulates, and
the paper's default size."""
from __future__ import annotations

from lavo_zoo.attention import build_attention
from tests.attention.mechanism_testing import D, H, assert_causal_is_cumulative


def test_causal_is_cumulative_not_the_cab_defect(request) -> None:
    assert_causal_is_cumulative("abc", request)


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: 64 slots."""
    assert build_attention("abc", D, H, "causal").num_slots == 64
