"""The CUDA flex path of the sliding window (ops/window/flex.py): its block mask, mask_mod and score_mod match the
blocked kernel (flex_attention's eager forward on the CPU), it compiles once for many lengths and never runs dense."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.window import window_attention
from lavo_zoo.attention.ops.window.flex import flex_window_attention


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

