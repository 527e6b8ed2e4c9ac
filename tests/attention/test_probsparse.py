"""ProbSparse attention: exactly full attention when the factor covers every query, reproducible and causal."""
import math

import pytest
import torch

from lavo_zoo.attention import build_attention


def _full(attn, x: torch.Tensor, source: torch.Tensor, causal: bool) -> torch.Tensor:
    """Plain softmax attention with ``attn``'s own projections."""
    q, k, v = (t.unflatten(-1, (attn.num_heads, attn.head_dim)).transpose(1, 2)
               for t in (attn.q_proj(x), attn.k_proj(source), attn.v_proj(source)))
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).flatten(2))


@pytest.mark.parametrize("pattern", ["noncausal", "causal", "cross"])
def test_equals_full_attention_when_factor_covers_every_key(pattern: str) -> None:
    torch.manual_seed(0)
    attn = build_attention("probsparse", 32, 4, pattern, factor=50).double()
    x, context = torch.randn(3, 41, 32, dtype=torch.float64), torch.randn(3, 29, 32, dtype=torch.float64)
    for mode in (attn.train(), attn.eval()):
        y = mode(x, context=context) if pattern == "cross" else mode(x)
        ref = _full(attn, x, context if pattern == "cross" else x, causal=pattern == "causal")
        torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-12)


def test_lazy_queries_output_the_mean_value() -> None:
    torch.manual_seed(0)
    attn = build_attention("probsparse", 16, 2, "noncausal", factor=1).double().eval()  # u = ceil(ln 64) = 5
    x = torch.randn(1, 64, 16, dtype=torch.float64)
    y = attn(x)
    lazy = attn.out_proj(attn.v_proj(x).mean(1))  # [1, D]: mean(V) per head, merged and projected
    is_lazy = torch.isclose(y, lazy[:, None], atol=1e-12).all(-1)  # [1, 64]
    assert int(is_lazy.sum()) >= 64 - 2 * 5  # each head activates 5 queries


@pytest.mark.parametrize("pattern", ["noncausal", "causal"])
def test_eval_is_reproducible_and_padding_invariant(pattern: str) -> None:
    torch.manual_seed(0)
    attn = build_attention("probsparse", 32, 4, pattern, factor=2).eval()
    x = torch.randn(2, 60, 32)
    y = attn(x)
    torch.testing.assert_close(attn(x), y, rtol=0, atol=0)
    padded = torch.cat([x, torch.randn(2, 9, 32)], dim=1)
    mask = torch.ones(2, 69, dtype=torch.bool)
    mask[:, 60:] = False
    torch.testing.assert_close(attn(padded, mask)[:, :60], y, rtol=1e-5, atol=1e-6)


def test_causal_variant_never_looks_ahead() -> None:
    torch.manual_seed(0)
    attn = build_attention("probsparse", 32, 4, "causal", factor=2).eval()
    x = torch.randn(2, 80, 32)
    changed = x.clone()
    changed[:, 50:] = torch.randn(2, 30, 32) * 5
    torch.testing.assert_close(attn(changed)[:, :50], attn(x)[:, :50], rtol=0, atol=0)


def test_training_gradients_are_finite() -> None:
    torch.manual_seed(0)
    for pattern in ("noncausal", "causal"):
        attn = build_attention("probsparse", 32, 4, pattern).train()
        x = torch.randn(2, 100, 32, requires_grad=True)
        attn(x).square().mean().backward()
        assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
        assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


def _causal_active_loop(score: torch.Tensor, n_top: int) -> torch.Tensor:
    """Slow reference: query t is active when fewer than n_top of scores 0..t-1 are strictly larger."""
    B, H, L = score.shape
    out = torch.zeros(B, H, L, dtype=torch.bool)
    for t in range(L):
        out[..., t] = (score[..., :t] > score[..., t:t + 1]).sum(-1) < n_top
    return out


@pytest.mark.parametrize("n_top, block", [(1, 7), (5, 4), (5, 256), (40, 16)])
def test_blocked_causal_selection_matches_the_per_query_definition(n_top: int, block: int) -> None:
    from lavo_zoo.attention.probsparse import _causal_active
    score = torch.randn(2, 3, 97)
    score[0, 0, 50:60] = score[0, 0, 10]  # ties: an equal earlier score does not count against a query
    torch.testing.assert_close(_causal_active(score, n_top, block), _causal_active_loop(score, n_top), rtol=0, atol=0)


@pytest.mark.parametrize("keys", [70, 700])  # both forms: matmul (Lk <= 64 U) and gathered keys
def test_sparsity_measurement_matches_brute_force(keys: int) -> None:
    from lavo_zoo.attention.probsparse import ProbSparseAttention
    q, k = torch.randn(2, 3, 50, 8, dtype=torch.float64), torch.randn(2, 3, keys, 8, dtype=torch.float64)
    idx = torch.randint(keys, (50, 9))
    got = ProbSparseAttention._sparsity(q, k, idx)
    ref = torch.empty(2, 3, 50, dtype=torch.float64)
    for i in range(50):
        s = torch.stack([(q[:, :, i] * k[:, :, j]).sum(-1) for j in idx[i].tolist()], -1)  # [2, 3, U]
        ref[:, :, i] = s.max(-1).values - s.mean(-1)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
