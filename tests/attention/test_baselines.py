"""Each baseline's fast form against its slow defining formula (lavo_zoo.attention.reference_baselines), in float64,
with small non-default sizes so that every chunk / window / segment boundary is crossed, plus method-specific facts
(Nystromformer with as many landmarks as tokens is softmax attention, FAVOR+ approaches softmax attention, ...)."""
from __future__ import annotations

import zlib

import pytest
import torch

from lavo_zoo.attention import (
    abc,
    attention_class,
    build_attention,
    cosformer,
    lara,
    longshort,
    nystromformer,
    performer,
    s4d,
    vanilla,
)
from lavo_zoo.attention.nystromformer import iterative_pinv
from lavo_zoo.attention.ops.naive import softmax_attention
from lavo_zoo.attention.performer import orthogonal_gaussian

REFERENCES = {m.__name__.rpartition(".")[2]: m.naive
              for m in (vanilla, abc, performer, cosformer, longshort, s4d, lara, nystromformer)}
s4d_kernel_reference = s4d.naive_kernel

D, H = 32, 4
ATOL, RTOL = 1e-10, 1e-8

# small options that force several chunks / segments / landmarks at T = 37
SMALL = {
    "vanilla": {},
    "abc": {"num_slots": 5, "chunk_size": 8},
    "performer": {"num_features": 12, "chunk_size": 8},
    "cosformer": {"chunk_size": 8, "max_length": 64},
    "longshort": {"window_size": 6, "num_landmarks": 5, "segment_rank": 2},
    "s4d": {"state_size": 8},
    "lara": {"num_landmarks": 6},
    "nystromformer": {"num_landmarks": 6, "pinv_iterations": 0},
}
CASES = [(n, p, opts) for n in REFERENCES for p in attention_class(n).patterns
         for opts in (SMALL[n], {})]  # small options, and the paper defaults
IDS = [f"{n}-{p}-{'small' if o else 'default'}" for n, p, o in CASES]


def _gen(request) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _build(name: str, pattern: str, **opts) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_attention(name, D, H, pattern, **opts).double().eval()


@pytest.mark.parametrize("name,pattern,opts", CASES, ids=IDS)
def test_fast_form_matches_reference(name: str, pattern: str, opts: dict, request) -> None:
    if name == "nystromformer" and not opts:
        opts = {"pinv_iterations": 0}  # the reference uses the exact pseudo-inverse
    g = _gen(request)
    attn = _build(name, pattern, **opts)
    ref = REFERENCES[name]
    B, T, S = 2, 37, 19
    x = _randn(g, B, T, D)
    pm = torch.arange(T)[None] < torch.tensor([[T], [26]])  # [B, T]
    kw, kwm = {}, {}
    if pattern == "cross":
        ctx = _randn(g, B, S, D)
        kw = {"context": ctx}
        kwm = {"context": ctx, "context_mask": torch.arange(S)[None] < torch.tensor([[11], [S]])}
    torch.testing.assert_close(attn(x, **kw), ref(attn, x, **kw), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(attn(x, pm, **kwm)[pm], ref(attn, x, pm, **kwm)[pm], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["abc", "performer"])
def test_causal_is_cumulative_not_the_cab_defect(name: str, request) -> None:
    """The paper's benchmark library ran causal ABC without accumulation and causal Performer as noncausal: the
    causal output must differ from the noncausal one and equal it at the last position (where all keys are seen)."""
    g = _gen(request)
    causal, noncausal = _build(name, "causal", **SMALL[name]), _build(name, "noncausal", **SMALL[name])
    noncausal.load_state_dict(causal.state_dict())
    x = _randn(g, 2, 29, D)
    yc, yn = causal(x), noncausal(x)
    torch.testing.assert_close(yc[:, -1], yn[:, -1], atol=ATOL, rtol=RTOL)
    assert not torch.allclose(yc[:, :-1], yn[:, :-1], atol=1e-3)


@pytest.mark.parametrize("name", ["abc", "performer", "cosformer", "s4d"])
def test_streaming_state_is_bounded(name: str, request) -> None:
    """The recurrent state does not grow with the number of tokens fed."""
    g = _gen(request)
    attn = _build(name, "causal", **SMALL[name])
    _, s1 = attn(_randn(g, 2, 3, D), return_state=True)
    _, s2 = attn(_randn(g, 2, 50, D), state=s1, return_state=True)
    shapes = lambda s: {k: tuple(t.shape) for k, t in vars(s).items() if torch.is_tensor(t)}
    assert shapes(s1) == shapes(s2) and shapes(s1)


def test_s4d_streaming_matches_recurrence(request) -> None:
    """S4D chunked streaming (FFT convolution + carried state) equals the token-by-token recurrence."""
    g = _gen(request)
    attn = _build("s4d", "causal", **SMALL["s4d"])
    x = _randn(g, 2, 23, D)
    y1, h = attn(x[:, :9], return_state=True)
    y2, h2 = attn(x[:, 9:], state=h, return_state=True)
    y_ref, h_ref = REFERENCES["s4d"](attn, x, return_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y_ref, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(h2.h, h_ref, atol=ATOL, rtol=RTOL)
    # decoding: single recurrent steps from an empty state, then from the carried one
    ys, state = [], None
    for t in range(5):
        y, state = attn(x[:, t:t + 1], state=state, return_state=True)
        ys.append(y)
    y_ref, h_ref = REFERENCES["s4d"](attn, x[:, :5], return_state=True)
    torch.testing.assert_close(torch.cat(ys, 1), y_ref, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(state.h, h_ref, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("L", [1, 2, 5, 16, 17, 50])
def test_s4d_factorised_kernel_matches_vandermonde(L: int) -> None:
    """K from A^(a c + j) = A^(a c) A^j equals the direct Vandermonde sum; the decayed state sum likewise."""
    attn = _build("s4d", "noncausal", state_size=8)
    dtA, cb = attn.discretize()
    torch.testing.assert_close(attn.kernel(dtA, cb, L), s4d_kernel_reference(dtA, cb, L), atol=ATOL, rtol=RTOL)
    u = torch.randn(2, D, L, dtype=torch.float64)
    pos = torch.arange(L).to(dtA.dtype)
    direct = torch.einsum("bdl,dnl->bdn", u.to(dtA.dtype), torch.exp(dtA[0][..., None] * pos))
    torch.testing.assert_close(attn.decayed_sum(u, dtA[0]), direct, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("pattern", ["noncausal", "cross"])
def test_nystromformer_with_all_landmarks_is_softmax_attention(pattern: str, request) -> None:
    g = _gen(request)
    attn = _build("nystromformer", pattern, num_landmarks=64, pinv_iterations=0)
    x = _randn(g, 2, 13, D)
    ctx = _randn(g, 2, 13, D) if pattern == "cross" else None
    src = x if ctx is None else ctx
    heads = lambda t: t.view(2, 13, H, D // H).transpose(1, 2)
    o = softmax_attention(heads(attn.q_proj(x)), heads(attn.k_proj(src)), heads(attn.v_proj(src)))
    expected = attn.out_proj(o.transpose(1, 2).reshape(2, 13, D))
    torch.testing.assert_close(attn(x, context=ctx) if ctx is not None else attn(x), expected,
                               atol=1e-8, rtol=1e-6)


def test_iterative_pinv_converges(request) -> None:
    g = _gen(request)
    a = torch.softmax(_randn(g, 3, 7, 5), -1)  # rectangular, as in cross attention
    torch.testing.assert_close(iterative_pinv(a, 30), torch.linalg.pinv(a), atol=1e-9, rtol=1e-7)
    assert iterative_pinv(a, 0).shape == (3, 5, 7)


def test_performer_features_are_orthogonal_blocks() -> None:
    torch.manual_seed(0)
    w = orthogonal_gaussian(20, 8, torch.float64)  # blocks of 8, 8, 4 rows
    for a in range(0, 20, 8):
        blk = w[a:a + 8]
        gram = blk @ blk.T
        torch.testing.assert_close(gram - torch.diag(torch.diagonal(gram)), torch.zeros_like(gram), atol=1e-10,
                                   rtol=0)


def test_performer_approaches_softmax_attention(request) -> None:
    """FAVOR+ is an estimator of softmax attention: with many features it is close to the exact output."""
    g = _gen(request)
    attn = _build("performer", "noncausal", num_features=4096)
    x = 0.5 * _randn(g, 1, 16, D)
    heads = lambda t: t.view(1, 16, H, D // H).transpose(1, 2)
    q, k, v = heads(attn.q_proj(x)), heads(attn.k_proj(x)), heads(attn.v_proj(x))
    exact = attn.out_proj(softmax_attention(q, k, v).transpose(1, 2).reshape(1, 16, D))
    err = (attn(x) - exact).norm() / (exact - attn.out_proj.bias).norm()
    assert err < 0.1, f"relative error {err:.3f}"


def test_cosformer_causal_refuses_positions_past_its_horizon(request) -> None:
    g = _gen(request)
    attn = _build("cosformer", "causal", max_length=10)
    attn(_randn(g, 1, 10, D))
    with pytest.raises(ValueError, match="max_length"):
        attn(_randn(g, 1, 11, D))
    _, state = attn(_randn(g, 1, 6, D), return_state=True)
    with pytest.raises(ValueError, match="max_length"):
        attn(_randn(g, 1, 5, D), state=state)


def test_lara_is_random_in_training_and_fixed_in_eval(request) -> None:
    g = _gen(request)
    attn = _build("lara", "noncausal", num_landmarks=6)
    x = _randn(g, 2, 20, D)
    torch.testing.assert_close(attn(x), attn(x), atol=0, rtol=0)
    attn.train()
    assert not torch.allclose(attn(x), attn(x))


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: 64 slots / features / landmarks / state size, window 16."""
    assert build_attention("abc", D, H, "causal").num_slots == 64
    assert build_attention("performer", D, H, "causal").num_features == 64
    ls = build_attention("longshort", D, H, "noncausal")
    assert (ls.window_size, ls.num_landmarks) == (16, 64)
    assert build_attention("s4d", D, H, "causal").state_size == 64
    assert build_attention("lara", D, H, "noncausal").num_landmarks == 64
    assert build_attention("nystromformer", D, H, "noncausal").num_landmarks == 64
