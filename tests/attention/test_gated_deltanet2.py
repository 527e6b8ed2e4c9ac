"""Gated DeltaNet-2 (gated_deltanet2.py) beyond the registry-wide tests and those of the layers on KDA (test_kda.py):
with its gates tied it is KDA, the whole layer, in every pattern. float64."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.testing import randomise_zero_parameters
from tests.attention.mechanism_testing import ATOL, RTOL, D, H, build, gen, randn


@pytest.mark.parametrize("pattern", ["causal", "noncausal", "cross"])
def test_gates_tied_reduce_to_kda(pattern: str, request) -> None:
    """Every row of a head's erase gate (d_k rows) and of its write gate (d_v rows) equal to KDA's strength row for
    that head, the rest of the weights KDA's: the outputs, the state a causal call returns, and the gradients w.r.t.
    the inputs and every shared parameter are KDA's; KDA's strength gradient is the sum of the tied rows'."""
    g = gen(request)
    opts = {"chunk_size": 20, "expand_v": 2.0}
    kda = randomise_zero_parameters(build("kda", pattern, **opts))
    gdn2 = build("gated_deltanet2", pattern, **opts)
    d_k, d_v = D // H, 2 * D // H
    rows = kda.b_proj.weight  # [H, D]
    with torch.no_grad():
        gdn2.load_state_dict({**kda.state_dict(), "b_proj.weight": rows.repeat_interleave(d_k, 0),
                              "w_proj.weight": rows.repeat_interleave(d_v, 0)})
    x = randn(g, 2, 37, D).requires_grad_()
    kw = {}
    if pattern == "cross":
        kw = {"context": randn(g, 2, 19, D).requires_grad_(),
              "context_mask": torch.arange(19)[None] < torch.tensor([[19], [11]])}
    y_kda, y_gdn2 = kda(x, **kw), gdn2(x, **kw)
    torch.testing.assert_close(y_gdn2, y_kda, atol=ATOL, rtol=RTOL)
    if pattern == "causal":
        torch.testing.assert_close(gdn2(x, return_state=True)[1].memory, kda(x, return_state=True)[1].memory,
                                   atol=ATOL, rtol=RTOL)
    w = randn(g, *y_kda.shape)
    inputs = [x] + ([kw["context"]] if kw else [])
    shared = [n for n, _ in kda.named_parameters() if n != "b_proj.weight"]
    grads_kda = torch.autograd.grad((y_kda * w).sum(), inputs + [kda.get_parameter(n) for n in shared]
                                    + [kda.b_proj.weight], materialize_grads=True)
    grads_gdn2 = torch.autograd.grad((y_gdn2 * w).sum(), inputs + [gdn2.get_parameter(n) for n in shared]
                                     + [gdn2.b_proj.weight, gdn2.w_proj.weight], materialize_grads=True)
    for name, a, b in zip(["x", "context"][:len(inputs)] + shared, grads_kda, grads_gdn2):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=RTOL, msg=lambda m, name=name: f"grad of {name}: {m}")
    erase, write = grads_gdn2[-2].view(H, d_k, D).sum(1), grads_gdn2[-1].view(H, d_v, D).sum(1)
    torch.testing.assert_close(erase + write, grads_kda[-1], atol=ATOL, rtol=RTOL)
    assert erase.abs().max() > 1e-6 and write.abs().max() > 1e-6  # both gates take part

