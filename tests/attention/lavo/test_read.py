"""LAVO's orthogonal-memory read kernels (lavo/read.py): the recompute Function has exact gradients (gradcheck)
and equals the autograd read, for one memory row per token, per window and per sequence. Parametrised over the
available devices, so a CUDA machine exercises the same checks there."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.lavo.read import read_memory, read_memory_autograd

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _leaves(*shapes: tuple[int, ...], device: str) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=F64, device=device, requires_grad=True) for s in shapes]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset, group, rows", [(0, 1, 7), (2, 3, 3), (0, 1, 1)])  # per token, per window, one
def test_memory_read_function_gradcheck_and_equals_autograd(device, offset, group, rows):
    B, H, T, d, r = 1, 2, 7, 4, 3
    q, mem = _leaves((B, H, T, d), (B, H, rows, d), device=device)
    bases = torch.linalg.qr(torch.randn(H, d, r, dtype=F64, device=device)).Q.mT.contiguous().requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: read_memory(*a, offset, group, chunk=2), (q, mem, bases))
    g = torch.randn(B, H, T, d, dtype=F64, device=device)
    fast, slow = read_memory(q, mem, bases, offset, group, chunk=3), read_memory_autograd(q, mem, bases, offset, group)
    torch.testing.assert_close(fast, slow)
    for a, b in zip(torch.autograd.grad((fast * g).sum(), (q, mem, bases)),
                    torch.autograd.grad((slow * g).sum(), (q, mem, bases))):
        torch.testing.assert_close(a, b)
