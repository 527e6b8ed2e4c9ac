"""LAVO's memory-lean training path: the recompute Functions (local window, memory read) have exact gradients
(gradcheck, and equality with the autograd kernels and the dense reference across chunk boundaries), gradients flow
through a streaming state, nothing O(T w) or O(T r) is saved for backward, the kernel choice, torch.compile.
Parametrised over the available devices, so a CUDA machine exercises the same checks there."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.lavo.memory import read_memory, read_memory_autograd
from lavo_zoo.attention.lavo.naive import naive as lavo_reference
from lavo_zoo.attention.ops.window import window_attention
from tests.attention.test_lavo import BASE, CONFIGS, _id

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _leaves(*shapes: tuple[int, ...], device: str) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=F64, device=device, requires_grad=True) for s in shapes]


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
                                prefix=(pk, pv) if prefix else None, backend="recompute", chunk=4) * rows
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
    for backend in ("recompute", "autograd"):
        y = window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=mask, backend=backend, chunk=chunk) * rows
        outs.append((y, torch.autograd.grad((y * g).sum(), (q, k, v, bias))))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-10, atol=1e-12)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    everything = torch.ones(B, T, dtype=torch.bool)  # an all-True mask is no mask
    torch.testing.assert_close(window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=everything, chunk=5),
                               window_attention(q, k, v, w, causal=causal, bias=bias, chunk=5), rtol=0, atol=0)


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


def _grads(attn, x, mask, g, **kw):
    y = attn(x, mask, **kw)
    inputs = [x] + ([kw["context"]] if "context" in kw else []) + list(attn.parameters())
    return y, torch.autograd.grad((y * g).sum(), inputs, materialize_grads=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_recompute_equals_autograd_kernels_and_reference_across_chunks(helpers, device, config):
    """T = 45 in chunks of 8 queries, padded: the recompute path == the autograd kernels (the previous
    implementation) == the dense float64 reference, outputs and every gradient."""
    pattern, opts = config
    attn = helpers.make("lavo", pattern, **BASE, **opts).to(device)
    B, T = 2, 45
    x = torch.randn(B, T, 16, dtype=F64, device=device, requires_grad=True)
    mask = torch.rand(B, T, device=device) > 0.3
    mask[:, 0] = True
    kw = {}
    if pattern == "cross":
        kw = {"context": torch.randn(B, 30, 16, dtype=F64, device=device, requires_grad=True),
              "context_mask": torch.arange(30, device=device)[None].expand(B, 30) < 25}
    g = torch.randn(B, T, 16, dtype=F64, device=device)
    results = []
    for backend in ("recompute", "autograd"):
        attn.backend, attn.chunk_size = backend, 8
        results.append(_grads(attn, x, mask, g, **kw))
    y_ref = lavo_reference(attn.cpu(), x.cpu(), mask.cpu(), **{k: v.cpu() for k, v in kw.items()})
    attn.to(device)
    torch.testing.assert_close(results[0][0].cpu(), y_ref, rtol=1e-9, atol=1e-10)
    for (y, grads), (y2, grads2) in [(results[0], results[1])]:
        torch.testing.assert_close(y, y2, rtol=1e-9, atol=1e-10)
        for a, b in zip(grads, grads2):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("opts", [o for p, o in CONFIGS if p == "causal"], ids=str)
def test_gradients_flow_through_the_streaming_state(helpers, opts):
    """Chunks carrying an undetached state (prefix keys/values, sums) give the full-sequence gradients."""
    attn = helpers.make("lavo", "causal", **BASE, **opts)
    attn.chunk_size = 3
    x = torch.randn(2, 23, 16, dtype=F64, requires_grad=True)
    g = torch.randn(2, 23, 16, dtype=F64)
    full = torch.autograd.grad((attn(x) * g).sum(), [x, *attn.parameters()], materialize_grads=True)
    streamed = helpers.stream(attn, x, [5, 2, 7, 1, 8])
    for a, b in zip(torch.autograd.grad((streamed * g).sum(), [x, *attn.parameters()], materialize_grads=True),
                    full):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def _saved_storages(attn, x, mask=None, **kw) -> list[int]:
    """Bytes of every distinct storage autograd saves for backward during one forward pass."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn(x, mask, **kw)
    return list(saved.values())


@pytest.mark.parametrize("pattern, opts", [("causal", {}), ("causal", {"memory_source": "value"}),
                                           ("noncausal", {}), ("cross", {})])
def test_nothing_of_size_t_by_w_or_t_by_r_is_saved_for_backward(pattern, opts):
    """Saved: x, q, k, v and the merged output ([T, D] each, at most 5), and per-window tensors (<= T D / w: the
    window means). A [T, 2w] score or [T, r] probability tensor per head (2 T D / w bytes here) fails it, as the
    autograd kernels do."""
    B, T, H, d, w, r = 1, 256, 2, 16, 4, 8
    D = H * d
    big = B * T * D * 4
    x = torch.randn(B, T, D, requires_grad=True)
    mask = torch.arange(T)[None] < T - 5 if pattern == "noncausal" else None
    kw = {"context": torch.randn(B, T, D, requires_grad=True)} if pattern == "cross" else {}
    for backend in ("recompute", "autograd"):
        attn = build_attention("lavo", D, H, pattern, num_bases=r, window_size=w, backend=backend, **opts)
        attn.chunk_size = 64
        sizes = _saved_storages(attn, x, mask, **kw)
        lean = sum(s == big for s in sizes) <= 5 and all(s == big or s <= big / w for s in sizes)
        assert lean == (backend == "recompute"), (backend, sorted(sizes))


def test_kernel_choice_is_made_in_the_layer():
    attn = build_attention("lavo", 32, 2, "causal", dropout=0.1).eval()
    q = torch.randn(1, 2, 512, 16)
    assert attn.kernels(q) == ("recompute", "recompute")  # CPU, no dropout: saves inputs, recomputes
    attn.train()
    assert attn.kernels(q) == ("autograd", "autograd")    # dropout in training: the mask backward must see
    assert build_attention("lavo", 32, 2, "causal").kernels(q) == ("recompute", "recompute")
    if torch.cuda.is_available():
        attn.eval()
        assert attn.kernels(q.cuda())[0] == "flex"
    with pytest.raises(ValueError, match="backend must be one of"):
        build_attention("lavo", 32, 2, "causal", backend="fast")


@pytest.mark.slow
@pytest.mark.parametrize("pattern, padded", [("causal", False), ("noncausal", True)])
def test_torch_compile_matches_eager(pattern, padded):
    """One graph (fullgraph: no break, also with a padding mask, whose all-real chunks eager mode skips) and the
    eager outputs and input gradients."""
    torch.manual_seed(0)
    attn = build_attention("lavo", 16, 2, pattern, num_bases=4, window_size=4)
    attn.chunk_size = 8
    x = torch.randn(2, 40, 16, requires_grad=True)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 30:] = False
    mask = mask if padded else None
    rows = mask[..., None] if padded else 1.0
    compiled = torch.compile(attn, backend="aot_eager", fullgraph=True)
    y = compiled(x, mask) * rows
    (gx,) = torch.autograd.grad(y.sum(), x)
    y_ref = attn(x, mask) * rows
    (gx_ref,) = torch.autograd.grad(y_ref.sum(), x)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(gx, gx_ref)


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
    for backend in ("recompute", "autograd"):
        out = window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=mask,
                               prefix=(pk, pv) if prefix else None, backend=backend, chunk=2 * block + 1)
        leaves = (q, k, v, bias) + ((pk, pv) if prefix else ())
        results.append((out * rows, torch.autograd.grad((out * g).sum(), leaves)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-9, atol=1e-10)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
