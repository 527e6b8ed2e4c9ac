"""Padded rows as the row alone (ops/padding.py): the packing of a row's real tokens, first and in order."""
from __future__ import annotations

import torch

from lavo_zoo.attention.ops.padding import gather_rows, pack


def test_pack_moves_real_tokens_first_in_order() -> None:
    mask = torch.tensor([[False, True, False, True, True], [True, True, True, True, True]])
    x = torch.arange(10).view(2, 5)
    order, inverse, packed = pack(mask)
    assert gather_rows(x, order)[0, :3].tolist() == [1, 3, 4]
    assert packed.tolist() == [[True, True, True, False, False], [True] * 5]
    assert torch.equal(gather_rows(gather_rows(x, order), inverse), x)

