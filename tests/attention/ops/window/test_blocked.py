"""The sliding window's blocked recompute Function (ops/window/blocked.py) has exact gradients: gradcheck, and equality
with the autograd kernel across chunk boundaries, with query blocks smaller than the window, with chunks that skip
the masking pass. Parametrised over the available devices, so a CUDA machine exercises the same checks there."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.window import window_attention
from tests.attention.ops.window.helpers import DEVICES, F64, _leaves


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal, prefix, masked", [(True, 0, False), (True, 3, False), (False, 0, True)])
def test_window_function_gradcheck(device, causal, prefix, masked):
    B, H, T, d, w = 1, 2, 9, 3, 4
    q, k, v, bias = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), device=device)
    pk, pv = _leaves((B, H, prefix, d), (B, H, prefix, d), device=device)
    mask = (torch.arange(T, device=device) % 3 != 1)[None] if masked else None
    rows = torch.ones(T, 1, dtype=F64, device=device) if mask is None else mask[0, :, None].to(F64)

    def f(q, k, v, bias, pk, pv):  # padded query rows are garbage by contract: zero them
        return window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=mask,
                                prefix=(pk, pv) if prefix else None, kernel="recompute", chunk=4) * rows
    assert torch.autograd.gradcheck(f, (q, k, v, bias, pk, pv))


@pytest.mark.parametrize("chunk", [5, 40])  # one block per chunk (keys added per block), 8 (per key slot group)
@pytest.mark.parametrize("causal", [True, False])
def test_window_function_chunks_with_only_real_keys_skip_masking_and_stay_exact(causal, chunk):
    """A key_mask that is all True over some chunks (where the recompute kernel skips the mask pass on CPU) and
    has holes and end padding elsewhere: outputs and gradients on real rows equal the autograd kernel's, with
    either way of adding the blocks' key gradients."""
    B, H, T, d, w = 2, 2, 60, 4, 5
    q, k, v, bias = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), device="cpu")
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 50:] = False          # end padding
    mask[1, [7, 33, 34]] = False  # holes inside; chunks of 5 queries elsewhere see only real keys
    rows = mask[:, None, :, None].to(F64)
    g = torch.randn(B, H, T, d, dtype=F64)
    outs = []
    for kernel in ("recompute", "autograd"):
        y = window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=mask, kernel=kernel, chunk=chunk) * rows
        outs.append((y, torch.autograd.grad((y * g).sum(), (q, k, v, bias))))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-10, atol=1e-12)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    everything = torch.ones(B, T, dtype=torch.bool)  # an all-True mask is no mask
    torch.testing.assert_close(window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=everything, chunk=5),
                               window_attention(q, k, v, w, causal=causal, bias=bias, chunk=5), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal, prefix, masked", [(True, 0, False), (True, 4, False), (False, 0, True),
                                                    (False, 0, False)])
@pytest.mark.parametrize("block", [2, 3, 64])  # query blocks smaller than the window (w = 5; w = 70 for 64)
def test_window_function_with_query_blocks_smaller_than_the_window(monkeypatch, device, causal, prefix, masked,
                                                                   block):
    """Blocks of c < w queries (what large windows such as LRA's w = 256 use): outputs and every gradient equal the
    autograd kernel (whole-window blocks), across chunk boundaries and the sequence's ends."""
    from lavo_zoo.attention.ops.window import blocked

    w = 70 if block == 64 else 5
    monkeypatch.setattr(blocked, "query_block", lambda window: block)
    B, H, T, d = 2, 2, 2 * w + 7, 3
    q, k, v, bias = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), device=device)
    pk, pv = _leaves((B, H, prefix, d), (B, H, prefix, d), device=device)
    mask = torch.rand(B, T, device=device) > 0.3 if masked else None
    rows = torch.ones(B, 1, T, 1, dtype=F64, device=device) if mask is None else mask[:, None, :, None].to(F64)
    g = torch.randn(B, H, T, d, dtype=F64, device=device) * rows
    results = []
    for kernel in ("recompute", "autograd"):
        out = window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=mask,
                               prefix=(pk, pv) if prefix else None, kernel=kernel, chunk=2 * block + 1)
        leaves = (q, k, v, bias) + ((pk, pv) if prefix else ())
        results.append((out * rows, torch.autograd.grad((out * g).sum(), leaves)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-9, atol=1e-10)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


