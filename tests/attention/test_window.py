"""The sliding-window op (ops/window): the blocked recompute Function has exact gradients (gradcheck, and equality
with the autograd kernel across chunk boundaries, with query blocks smaller than the window, with chunks that skip
the masking pass), the CUDA flex path's block mask, mask_mod and score_mod match the blocked kernel, and a decoding
step's window equals the op's last query. Parametrised over the available devices, so a CUDA machine exercises the
same checks there."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.window import window_attention, window_attention_step
from lavo_zoo.attention.ops.window.flex import flex_window_attention

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


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("causal, prefix, T, block", [(True, 0, 37, 128), (True, 3, 37, 128), (False, 0, 37, 128),
                                                      (True, 0, 100, 16), (True, 5, 90, 16), (False, 0, 100, 16),
                                                      (False, 0, 100, 8)])
def test_cuda_flex_window_logic_matches_blocked(causal, prefix, T, block):
    """The fused CUDA path's banded block mask, mask_mod and score_mod, run by flex_attention's eager forward on CPU;
    small blocks make the band span several key blocks per query block, as 128-token blocks do at long lengths."""
    B, H, d, w = 2, 2, 8, 4 if block == 128 else 11
    q, k, v = torch.randn(B, H, T, d), torch.randn(B, H, prefix + T, d), torch.randn(B, H, prefix + T, d)
    bias = torch.randn(H, 2 * w - 1)
    key_mask = None if prefix else torch.rand(B, T) > 0.2  # streaming (a prefix) has no padding
    out = flex_window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=key_mask, compiled=False, block=block)
    ref = window_attention(q, k[:, :, prefix:], v[:, :, prefix:], w, causal=causal, bias=bias, key_mask=key_mask,
                           prefix=(k[:, :, :prefix], v[:, :, :prefix]) if prefix else None)
    real = torch.ones(B, 1, T, 1) if key_mask is None else key_mask[:, None, :, None]  # rows with a real key
    torch.testing.assert_close(out * real, ref * real, rtol=1e-5, atol=1e-5)


class _CountingBackend:
    """A torch.compile backend that runs the traced graph as is (flex_attention's eager math: on a CPU, where
    inductor's flex template does not build, it stands in for the compiled kernel) and counts the graphs compiled and
    the calls that went through one. Dynamo's guards, which decide the recompilations, are the real ones."""

    def __init__(self):
        self.compiles = self.calls = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1

        def run(*args):
            self.calls += 1
            return gm.forward(*args)
        return run


@pytest.mark.parametrize("causal", [True, False])
def test_flex_compiles_once_for_many_lengths_and_never_runs_dense(monkeypatch, recwarn, causal):
    """Variable-length batches (summarization, TTS, evaluation): 10 distinct lengths, one a streaming chunk after a
    key prefix, compile flex_attention at most twice per kind of call (with a key mask; causal: without one, the
    streaming chunk), where torch's recompile limit is 8, past which it would run its unfused eager form with
    [B, H, T, T] scores; every call goes through a compiled graph, none warns of the dense path, and each equals the
    blocked kernel."""
    import torch._dynamo

    from lavo_zoo.attention.ops.window import flex

    counter = _CountingBackend()
    monkeypatch.setattr(flex, "COMPILE_BACKEND", counter)
    torch._dynamo.reset()
    B, H, d, w = 1, 2, 8, 4
    bias = torch.randn(H, 2 * w - 1)
    lengths = [256 + 5 * i for i in range(9)]                     # and 300 after a prefix
    try:
        for i, T in enumerate(lengths + [300]):
            prefix = 3 if causal and i == len(lengths) else 0
            q, k, v = torch.randn(B, H, T, d), torch.randn(B, H, prefix + T, d), torch.randn(B, H, prefix + T, d)
            key_mask = None if prefix else torch.rand(B, T) > 0.2
            out = flex.flex_window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=key_mask)
            ref = window_attention(q, k[:, :, prefix:], v[:, :, prefix:], w, causal=causal, bias=bias,
                                   key_mask=key_mask, prefix=(k[:, :, :prefix], v[:, :, :prefix]) if prefix else None)
            real = torch.ones(B, 1, T, 1) if key_mask is None else key_mask[:, None, :, None]
            torch.testing.assert_close(out * real, ref * real, rtol=1e-5, atol=1e-5)
    finally:
        torch._dynamo.reset()
    assert counter.compiles <= (3 if causal else 2) and counter.calls == len(lengths) + 1, (counter.compiles,
                                                                                             counter.calls)
    assert not [w for w in recwarn if "without torch.compile" in str(w.message)]


def test_flex_band_block_mask_lists_exactly_the_touched_key_blocks():
    """Every key block holding a key of some query's window is listed for that query block, and no other."""
    from lavo_zoo.attention.ops.window.flex import band_block_mask
    for q_len, kv_len, w, causal, block in [(100, 100, 11, True, 16), (90, 95, 11, True, 16), (100, 100, 11, False, 8),
                                            (300, 300, 16, True, 128), (64, 64, 40, False, 16)]:
        mask = band_block_mask(q_len, kv_len, w, causal=causal, mask_mod=None, device=torch.device("cpu"), block=block)
        counts, indices = mask.kv_num_blocks[0, 0], mask.kv_indices[0, 0]
        P = kv_len - q_len
        for qb in range(-(-q_len // block)):
            want = set()
            for qi in range(qb * block, min((qb + 1) * block, q_len)):
                t = qi + P
                keys = range(max(0, t - w + 1), (t + 1) if causal else min(kv_len, t + w))
                want |= {s // block for s in keys}
            assert set(indices[qb, :counts[qb]].tolist()) == want, (q_len, kv_len, w, causal, block, qb)


@pytest.mark.parametrize("P", [0, 2, 4])  # no past keys, fewer than w - 1, w - 1
def test_window_step_equals_the_last_query_of_the_window(P):
    """One query after P stored keys (a decoding step): the output of window_attention for that query, with the
    relative bias, and its gradients."""
    B, H, d, w = 2, 2, 3, 5
    q, k, v = _leaves((B, H, 1, d), (B, H, 1, d), (B, H, 1, d), device="cpu")
    pk, pv, bias = _leaves((B, H, P, d), (B, H, P, d), (H, 2 * w - 1), device="cpu")
    step = window_attention_step(q, k, v, w, prefix=(pk, pv), bias=bias)
    full = window_attention(q, k, v, w, causal=True, bias=bias, prefix=(pk, pv) if P else None)
    torch.testing.assert_close(step, full, rtol=1e-12, atol=1e-12)
    leaves = (q, k, v, pk, pv, bias) if P else (q, k, v, bias)
    for a, b in zip(torch.autograd.grad(step.sum(), leaves), torch.autograd.grad(full.sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
