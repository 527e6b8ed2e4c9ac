"""Attention dropout inside the recompute kernels (ops/dropout.py, ops/window/blocked.py, lavo/read.py): each
chunk's mask comes from the call's seed and backward regenerates it. The kernels with dropout equal the autograd
kernels given the same mask, materialised (forward and every gradient, with other random draws between forward and
backward); the drop rate is p; eval mode is untouched; the layer trains on these kernels with dropout, and its
gradients under a fixed seed pass gradcheck. The Triton kernels' dropout: tests/attention/lavo/test_triton.py."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.lavo.read import dropout_slots, read_memory, read_memory_autograd
from lavo_zoo.attention.ops import dropout as dropout_ops
from lavo_zoo.attention.ops.window.blocked import WindowAttentionFunction, dropout_band, window_autograd

F64 = torch.float64
P = 0.3


def _leaves(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=F64, requires_grad=True) for s in shapes]


def test_keep_factor_drops_at_rate_p_and_repeats_from_its_seed():
    n = 4 * 64 * 64
    z = dropout_ops.keep_factor(7, 0, (4, 64, 64), P, torch.device("cpu"), F64)
    assert set(z.unique().tolist()) == {0.0, 1 / (1 - P)}
    dropped = (z == 0).double().mean().item()
    assert abs(dropped - P) < 4 * (P * (1 - P) / n) ** 0.5, dropped        # within 4 standard deviations
    torch.rand(100)                                                          # other draws in between change nothing
    assert torch.equal(z, dropout_ops.keep_factor(7, 0, (4, 64, 64), P, torch.device("cpu"), F64))
    assert not torch.equal(z, dropout_ops.keep_factor(7, 64, (4, 64, 64), P, torch.device("cpu"), F64))  # chunk
    assert not torch.equal(z, dropout_ops.keep_factor(8, 0, (4, 64, 64), P, torch.device("cpu"), F64))   # call
    torch.manual_seed(3)
    a = dropout_ops.new_seed()
    torch.manual_seed(3)
    assert dropout_ops.new_seed() == a and 0 <= a < 2**31 - 1               # seeds follow torch.manual_seed


@pytest.mark.parametrize("causal, prefix, masked", [(True, 0, True), (True, 3, False), (False, 0, True)])
def test_window_recompute_dropout_equals_autograd_with_the_same_mask(causal, prefix, masked):
    B, H, T, d, w, chunk, seed = 2, 2, 21, 4, 4, 8, 11
    q, k, v, bias, pk, pv = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), (B, H, prefix, d),
                                    (B, H, prefix, d))
    mask = None
    if masked:
        mask = torch.rand(B, T) > 0.3
        mask[:, 0] = True
    rows = torch.ones(B, 1, T, 1, dtype=F64) if mask is None else mask[:, None, :, None].to(F64)
    g = torch.randn(B, H, T, d, dtype=F64) * rows
    prefix_kv = (pk, pv) if prefix else (None, None)
    out = WindowAttentionFunction.apply(q, k, v, *prefix_kv, bias, mask, w, causal, chunk, P, seed)
    other = WindowAttentionFunction.apply(q, k, v, *prefix_kv, bias, mask, w, causal, chunk, P, seed + 1)
    torch.rand(1000)                                              # the backward below must not draw a new mask
    leaves = [q, k, v, bias] + ([pk, pv] if prefix else [])
    grads = torch.autograd.grad((out * g).sum(), leaves)
    keep = dropout_band(seed, B, H, T, w, P, chunk, dtype=F64)    # [B, H, T, 2w - 1]
    ref = window_autograd(q, [t for t in (pk, k) if prefix or t is k], [t for t in (pv, v) if prefix or t is v], w,
                          causal, bias, mask, prefix, keep=keep)
    refs = torch.autograd.grad((ref * g).sum(), leaves)
    torch.testing.assert_close(out * rows, ref * rows)
    for name, a, b in zip(["q", "k", "v", "bias", "prefix_k", "prefix_v"], grads, refs):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")
    plain = WindowAttentionFunction.apply(q, k, v, *prefix_kv, bias, mask, w, causal, chunk)
    assert not torch.allclose(out * rows, plain * rows) and not torch.allclose(out, other)  # the masks do act


@pytest.mark.parametrize("offset, group, n", [(2, 5, 6), (3, 1, 24), (0, 1, 1)])  # per window, per token, one row
def test_read_recompute_dropout_equals_autograd_with_the_same_mask(offset, group, n):
    B, H, T, d, r, chunk, seed = 2, 2, 21, 6, 4, 5, 5
    q, mem = _leaves((B, H, T, d), (B, H, n, d))
    bases = torch.linalg.qr(torch.randn(H, d, r, dtype=F64)).Q.mT.contiguous().requires_grad_()
    g = torch.randn(B, H, T, d, dtype=F64)
    out = read_memory(q, mem, bases, offset, group, chunk, P, seed)
    read_memory(q, mem, bases, offset, group, chunk, P, seed + 1)
    torch.rand(1000)
    grads = torch.autograd.grad((out * g).sum(), (q, mem, bases))
    ref = read_memory_autograd(q, mem, bases, offset, group, keep=dropout_slots(seed, B, H, T, r, P, chunk, dtype=F64))
    refs = torch.autograd.grad((ref * g).sum(), (q, mem, bases))
    torch.testing.assert_close(out, ref)
    for name, a, b in zip(["q", "mem", "bases"], grads, refs):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")
    assert not torch.allclose(out, read_memory(q, mem, bases, offset, group, chunk))


@pytest.mark.parametrize("pattern", ["causal", "noncausal", "cross"])
def test_layer_trains_with_dropout_on_the_recompute_kernels(helpers, monkeypatch, pattern):
    """In training the layer runs its recompute kernels with dropout (not the autograd ones); a fixed seed gives a
    deterministic function whose gradients (masks regenerated in backward) pass gradcheck; eval mode is the layer
    without dropout."""
    attn = helpers.make("lavo", pattern, num_bases=4, window_size=4, dropout=P)
    attn.chunk_size = 4                                           # several chunks, each with its own mask
    plain = helpers.make("lavo", pattern, num_bases=4, window_size=4)
    plain.load_state_dict(attn.state_dict())
    x = torch.randn(1, 7, 16, dtype=F64, requires_grad=True)
    kw = {"context": torch.randn(1, 5, 16, dtype=F64)} if pattern == "cross" else {}
    attn.eval()
    torch.testing.assert_close(attn(x, **kw), plain(x, **kw), rtol=0, atol=0)
    attn.train()
    assert not torch.allclose(attn(x, **kw), plain(x, **kw))
    assert attn.kernels_used == "recompute"
    monkeypatch.setattr(dropout_ops, "new_seed", lambda: 1234)    # every call the same masks: a fixed function
    from lavo_zoo.attention.lavo import ops
    from lavo_zoo.attention.ops import window
    monkeypatch.setattr(ops, "new_seed", dropout_ops.new_seed)
    monkeypatch.setattr(window, "new_seed", dropout_ops.new_seed)
    assert torch.autograd.gradcheck(lambda x: attn(x, **kw), (x,))
