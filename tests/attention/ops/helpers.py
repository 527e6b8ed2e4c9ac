"""What the tests of the recurrent ops share: the sizes, the comparison of a fast form with its recurrence (outputs and
every gradient) and the delta rule's gates."""
from __future__ import annotations

import torch

from tests.attention.mechanism_testing import ATOL, RTOL

B, H, T, K, V = 2, 3, 29, 5, 4


def _close_with_grads(fast, slow, inputs) -> None:
    out_f, out_s = fast(), slow()
    for a, b in zip(out_f, out_s):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)
    w = [torch.randn_like(o) for o in out_f]
    gf = torch.autograd.grad(sum((o * x).sum() for o, x in zip(out_f, w)), inputs)
    gs = torch.autograd.grad(sum((o * x).sum() for o, x in zip(out_s, w)), inputs)
    for a, b in zip(gf, gs):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)

def _delta_gates(g0: torch.Generator, decay: str, strengths: str, scale: float = 2.0) -> dict:
    """The delta rule's gates: ``decay`` none / head / channel (log decays in [-scale, 0]), ``strengths`` head (one
    beta per head, also the write strength) or channel (erase per key channel, write per value channel)."""
    rand = lambda *shape: torch.rand(*shape, generator=g0, dtype=torch.float64)
    gates = {"beta": rand(B, H, T) if strengths == "head" else rand(B, H, T, K)}
    if decay != "none":
        gates["g"] = -scale * (rand(B, H, T) if decay == "head" else rand(B, H, T, K))
    if strengths == "channel":
        gates["write"] = rand(B, H, T, V)
    return gates

