"""LAVO's binding memory (``memory='binding'``; docs/lavo.md, "The binding memory"): per basis, the mean of the
features weighted by the keys' projections on it, an r x d matrix per head, read by the softmax over the bases.
The layer against its naive reference (lavo/naive.py: the memory built basis by basis from its definition, float64),
outputs and every gradient, in every pattern, with right, inner and left padding; the op against its per-position
form; the two PyTorch read kernels against each other (dropout included); streaming in chunks of any size, token by
token, from a prefill and by the static step, all equal to the one-pass call (gradients through the state too); the
state and the cross cache constant, with the bytes the docs give; the Triton kernels' declared limit (the read, the
step and the fused layer fall back to PyTorch, and the report says so); what the memory holds (a value stored under a
key comes back at that key, which the paper's mean cannot give); clear errors. Shapes: D=16, H=2 (d=8), r=4, w=4."""
from __future__ import annotations

import zlib

import pytest
import torch

from lavo_zoo.attention import build_attention, tensor_bytes
from lavo_zoo.attention.lavo import LavoState, naive, ops
from lavo_zoo.attention.lavo.binding import read_binding, read_binding_autograd
from lavo_zoo.attention.lavo.naive import naive as naive_layer
from lavo_zoo.attention.lavo.read import dropout_slots
from lavo_zoo.attention.ops import dispatch
from tests.attention.mechanism_testing import assert_matches_reference

F64 = torch.float64
BASE = {"num_bases": 4, "window_size": 4, "memory": "binding"}
CONFIGS = [  # the binding memory with every option it meets at least once per pattern
    ("causal", {}),
    ("causal", {"combine": "half", "read_temperature": 0.0, "memory_norm": "mean"}),  # the paper's reading
    ("causal", {"context_dissection": False}),
    ("causal", {"memory_source": "value", "combine": "gain", "read_temperature": 2.0}),
    ("causal", {"memory_source": "input", "position_encoding": False, "bases_trainable": False}),
    ("noncausal", {}),
    ("noncausal", {"combine": "sum", "read_temperature": 2.0, "memory_norm": "rms", "memory_source": "value"}),
    ("cross", {}),
    ("cross", {"memory_source": "input", "read_temperature": 2.0, "memory_norm": "rms"}),
]
CAUSAL = [opts for pattern, opts in CONFIGS if pattern == "causal"]


def _id(c: tuple) -> str:
    return c[0] + "-" + ("-".join(f"{k}={v}" for k, v in c[1].items()) or "default")


def _make(helpers, pattern: str, **opts):
    attn = helpers.make("lavo", pattern, **{**BASE, **opts})
    if attn.learned_gain is not None:  # away from its init of ones, so that a missing or misplaced gain shows
        with torch.no_grad():
            attn.learned_gain.normal_()
    return attn


# ------------------------------------------------------------------------------------------------ the layer
@pytest.mark.parametrize("T", [3, 11])  # T < w, not a multiple of w
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_layer_equals_its_naive_reference(helpers, config, padded, T):
    """Outputs and the gradients of the input, the source and every parameter (bases, EPE, temperature, gain, the
    four projections), with random right and inner padding."""
    pattern, opts = config
    helpers.compare(_make(helpers, pattern, **opts), naive_layer, T, padded)


@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
@pytest.mark.parametrize("kernels", ["recompute", "autograd"])
def test_a_left_padded_row_equals_the_row_alone_and_the_reference(helpers, kernels, pattern):
    """3 padded positions in front: the row's outputs are those of the row alone, and the padded batch equals the
    naive reference (outputs and gradients); queries in chunks of 8 across 45 tokens."""
    attn = _make(helpers, pattern, kernels=kernels)
    attn.chunk_size = 8
    T, pad = 45, 3
    x = torch.randn(2, pad + T, 16, dtype=F64)
    mask = torch.ones(2, pad + T, dtype=torch.bool)
    mask[1, :pad] = False
    torch.testing.assert_close(attn(x, mask)[1, pad:], attn(x[1:, pad:])[0], rtol=1e-9, atol=1e-10)
    assert_matches_reference(attn, naive_layer, x.requires_grad_(True), mask, rows=mask, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_recompute_equals_autograd_kernels_across_chunks(helpers, config):
    """T = 45 in chunks of 8 queries, padded: the recompute read (hand-written backward) == the autograd read, outputs
    and every gradient."""
    pattern, opts = config
    attn = _make(helpers, pattern, **opts)
    B, T = 2, 45
    x = torch.randn(B, T, 16, dtype=F64, requires_grad=True)
    mask = torch.rand(B, T) > 0.3
    mask[:, 0] = True
    kw = {}
    if pattern == "cross":
        kw = {"context": torch.randn(B, 30, 16, dtype=F64, requires_grad=True),
              "context_mask": torch.arange(30)[None].expand(B, 30) < 25}
    g = torch.randn(B, T, 16, dtype=F64)
    leaves = [x, *kw.values()][:1 + ("context" in kw)] + list(attn.parameters())
    results = []
    for kernels in ("recompute", "autograd"):
        attn.kernels, attn.chunk_size = kernels, 8
        y = attn(x, mask, **kw)
        results.append((y, torch.autograd.grad((y * g).sum(), leaves, materialize_grads=True)))
        assert attn.kernels_used == kernels
    (y, grads), (y2, grads2) = results
    torch.testing.assert_close(y, y2, rtol=1e-9, atol=1e-10)
    for a, b in zip(grads, grads2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("opts", CAUSAL, ids=str)
def test_streaming_in_any_chunks_and_token_by_token_equals_full(helpers, opts):
    attn = _make(helpers, "causal", **opts)
    x = torch.randn(2, 23, 16, dtype=F64)
    y = attn(x)
    torch.testing.assert_close(helpers.stream(attn, x, [1, 3, 2, 7, 1, 5, 4]), y)
    torch.testing.assert_close(helpers.stream(attn, x, [4, 4, 8, 7]), y)  # chunks ending on window boundaries
    torch.testing.assert_close(helpers.stream(attn, x, [1] * 23), y)      # the decoding step, token by token


@pytest.mark.parametrize("opts", CAUSAL, ids=str)
def test_gradients_flow_through_the_streaming_state(helpers, opts):
    attn = _make(helpers, "causal", **opts)
    attn.chunk_size = 3
    x = torch.randn(2, 23, 16, dtype=F64, requires_grad=True)
    g = torch.randn(2, 23, 16, dtype=F64)
    full = torch.autograd.grad((attn(x) * g).sum(), [x, *attn.parameters()], materialize_grads=True)
    streamed = helpers.stream(attn, x, [5, 2, 7, 1, 8])
    for a, b in zip(torch.autograd.grad((streamed * g).sum(), [x, *attn.parameters()], materialize_grads=True),
                    full):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("prefill", [2, 9])  # shorter than the window, and past two windows
def test_decoding_from_a_prefill_and_by_the_static_step_equals_full(helpers, prefill):
    """Token by token after a prefill, by the PyTorch step (a new state each token) and by the static step (one
    state of fixed shapes written in place), the full call's outputs."""
    attn = _make(helpers, "causal")
    x = torch.randn(2, 17, 16, dtype=F64)
    y = attn(x)
    y_pre, state = attn(x[:, :prefill], return_state=True)
    static = state.static(attn.window_size)
    steps, static_steps = [], []
    for t in range(prefill, 17):
        y_t, state = attn(x[:, t:t + 1], state=state, return_state=True)
        steps.append(y_t)
        y_s, same = attn(x[:, t:t + 1], state=static, return_state=True)
        assert same is static
        static_steps.append(y_s)
    torch.testing.assert_close(torch.cat([y_pre, *steps], 1), y)
    torch.testing.assert_close(torch.cat(static_steps, 1), y[:, prefill:])
    torch.testing.assert_close(static.sum_complete, state.sum_complete)
    torch.testing.assert_close(static.sum_partial, state.sum_partial)


def test_the_state_is_constant_and_r_by_d_per_head(helpers):
    """The causal state: the window's last w - 1 keys and values and two [r, d] sums per head, whatever the length;
    its bytes are 2 (w - 1) D + 2 r D per sequence (float64 here: 8 bytes a number), and the sums are the items
    c_t f_t^T summed (over the complete windows, and over the rest)."""
    attn = _make(helpers, "causal", memory_source="value")
    B, D, r, w = 2, 16, 4, 4
    state, sizes, seen = None, [], []
    for n in (1, 5, 40, 2):
        x = torch.randn(B, n, D, dtype=F64)
        seen.append(x)
        _, state = attn(x, state=state, return_state=True)
        sizes.append(tensor_bytes(state))
    assert isinstance(state, LavoState) and state.position == 48
    assert state.sum_complete.shape == state.sum_partial.shape == (B, 2, r, 8)
    assert sizes == [B * (2 * 1 * D + 2 * r * D) * 8] + [B * (2 * (w - 1) * D + 2 * r * D) * 8] * 3
    x = torch.cat(seen, 1)
    k, v = (attn._heads(proj(x)) for proj in (attn.k_proj, attn.v_proj))          # [B, H, 48, d]
    items = torch.einsum("bhtr,bhtd->bhrd", k @ attn.bases.mT, v)
    torch.testing.assert_close(state.sum_complete, items.detach())                # 48 tokens: 12 complete windows
    torch.testing.assert_close(state.sum_partial, torch.zeros_like(state.sum_partial))
    mean_state = build_attention("lavo", D, 2, "causal", num_bases=r, window_size=w).to(F64)(
        x, return_state=True)[1]
    assert tensor_bytes(mean_state) == B * (2 * (w - 1) * D + 2 * D) * 8          # the paper's: 2 D sums


def test_the_cross_cache_is_constant_and_decodes_as_the_full_call(helpers):
    """A source's cache is its [H, r, d] matrix whatever the source's length (H r d numbers a sequence), and the
    target's queries read it, step by step, as the full cross attention does."""
    attn = _make(helpers, "cross")
    x = torch.randn(2, 5, 16, dtype=F64)
    for S in (3, 9, 40):
        src = torch.randn(2, S, 16, dtype=F64)
        mask = torch.arange(S)[None].expand(2, S) < S - 1
        cache = attn.cross_cache(src, mask)
        assert cache.memory.shape == (2, 2, 1, 4, 8) and tensor_bytes(cache) == 2 * 2 * 4 * 8 * 8
        steps = torch.cat([attn.cross_step(x[:, t:t + 1], cache) for t in range(5)], 1)
        torch.testing.assert_close(steps, attn(x, context=src, context_mask=mask))
        torch.testing.assert_close(attn.cross_step(x, cache), naive_layer(attn, x, context=src, context_mask=mask))


# ------------------------------------------------------------------------------------------------ the op
B, H, T, d, r, w = 2, 2, 23, 8, 4, 5
OP_CASES = [
    {},
    {"combine": "half", "empty_memory": "half"},
    {"combine": "gain", "log_temperature": True, "memory_norm": "rms"},
    {"context_dissection": False, "memory_norm": "rms"},
    {"causal": False, "combine": "half"},
    {"causal": False, "combine": "sum", "log_temperature": True, "memory_norm": "rms"},
]


@pytest.fixture
def gen(request) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _leaf(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64).requires_grad_()


def _bases(gen: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(H, d, r, generator=gen, dtype=F64)).Q.mT.contiguous().requires_grad_()


def _options(gen: torch.Generator, case: dict) -> tuple[dict, list[torch.Tensor]]:
    opts = {k: v for k, v in case.items() if k != "log_temperature"}
    leaves = []
    if case.get("log_temperature"):
        opts["log_temperature"] = _leaf(gen, H)
        leaves.append(opts["log_temperature"])
    if case.get("combine") == "gain":
        opts["gain"] = _leaf(gen, H)
        leaves.append(opts["gain"])
    return opts, leaves


def _close(got, want, names) -> None:
    for name, a, b in zip(names, got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}")


def _grads(out, weights, leaves):
    return torch.autograd.grad((out * weights).sum(), leaves, materialize_grads=True)


NAMES = ["out", "dq", "dlocal", "dfeats", "dkeys", "dbases", "dlearned", "dlearned2"]


@pytest.mark.parametrize("kernel", ["recompute", "autograd"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_memory_branch_equals_the_per_position_form(gen, case, padded, kernel):
    opts, learned = _options(gen, case)
    q, local, feats, keys = (_leaf(gen, B, H, T, d) for _ in range(4))
    bases = _bases(gen)
    mask = None
    if padded:
        mask = torch.rand(B, T, generator=gen) > 0.3
        mask[:, 0] = True
    out, _ = ops.memory_branch(q, local, feats, bases, w, padding_mask=mask, kernel=kernel, chunk=4, keys=keys,
                               **opts)
    ref = naive.memory_branch(q, local, feats, bases, w, padding_mask=mask, keys=keys, **opts)
    weights = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    leaves = [q, local, feats, keys, bases, *learned]
    _close([out, *_grads(out, weights, leaves)], [ref, *_grads(ref, weights, leaves)], NAMES)


@pytest.mark.parametrize("case", [c for c in OP_CASES if c.get("causal", True)],
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_streaming_state_in_and_out(gen, case):
    """Uneven chunks carrying the state give the one-pass output and gradients; the final state holds the items
    c_t f_t^T summed over the complete windows and over the rest (all of them, and zeros, without dissection); a
    decoding step (memory_step) after each state gives the one-token chunk's output and state."""
    opts, learned = _options(gen, case)
    q, local, feats, keys = (_leaf(gen, B, H, T, d) for _ in range(4))
    bases = _bases(gen)
    weights = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    leaves = [q, local, feats, keys, bases, *learned]
    full = naive.memory_branch(q, local, feats, bases, w, keys=keys, **opts)
    state, outs, start = None, [], 0
    for n in (1, 4, 7, 2, 9):                                  # ends at 1, 5 (a boundary), 12, 14, 23
        part = slice(start, start + n)
        out, after = ops.memory_branch(q[:, :, part], local[:, :, part], feats[:, :, part], bases, w, chunk=3,
                                       initial_state=state, output_final_state=True, keys=keys[:, :, part], **opts)
        outs.append(out)
        state = after
        start += n
    streamed = torch.cat(outs, 2)
    _close([streamed, *_grads(streamed, weights, leaves)], [full, *_grads(full, weights, leaves)], NAMES)
    items = torch.einsum("bhtr,bhtd->bhtrd", keys.detach() @ bases.detach().mT, feats.detach())
    complete = T // w * w if case.get("context_dissection", True) else T
    torch.testing.assert_close(state.sum_complete, items[:, :, :complete].sum(2))
    torch.testing.assert_close(state.sum_partial, items[:, :, complete:].sum(2))
    if not case.get("context_dissection", True):
        return
    state = None
    for t in range(13):                                        # memory_step at every phase of the window
        one = slice(t, t + 1)
        want, after = ops.memory_branch(q[:, :, one], local[:, :, one], feats[:, :, one], bases, w,
                                        initial_state=state, output_final_state=True, keys=keys[:, :, one], **opts)
        if state is not None:
            got, stepped = ops.memory_step(q[:, :, one], local[:, :, one], feats[:, :, one], bases, w, state,
                                           key=keys[:, :, one], **opts)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(stepped.sum_complete, after.sum_complete, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(stepped.sum_partial, after.sum_partial, rtol=1e-12, atol=1e-12)
        state = after


@pytest.mark.parametrize("offset, group, rows", [(0, 1, T), (3, 5, 6), (7, 5, 7), (0, 1, 1)])
def test_the_read_kernels_with_any_row_per_query_and_dropout(gen, offset, group, rows):
    """Query t reads row (offset + t) // group (one row: every query): both kernels == the per-query naive read
    (outputs and gradients of q, the rows and the bases); with dropout, the recompute kernel == the autograd one
    under the call's mask, forward and backward."""
    q, mem, bases = _leaf(gen, B, H, T, d), _leaf(gen, B, H, rows, r, d), _bases(gen)
    row = [0 if rows == 1 else (offset + t) // group for t in range(T)]
    ref = torch.stack([naive.binding_read(q[:, :, t], mem[:, :, row[t]], bases) for t in range(T)], 2)
    weights = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    leaves = [q, mem, bases]
    want = [ref, *_grads(ref, weights, leaves)]
    for out in (read_binding(q, mem, bases, offset, group, chunk=4),
                read_binding_autograd(q, mem, bases, offset, group)):
        _close([out, *_grads(out, weights, leaves)], want, ["out", "dq", "dmem", "dbases"])
    seed, p = 1234, 0.3
    keep = dropout_slots(seed, B, H, T, r, p, chunk=T, dtype=F64)                  # the call's mask, materialised
    assert 0 < (keep == 0).float().mean() < 0.6
    dropped = read_binding(q, mem, bases, offset, group, chunk=4, dropout=p, seed=seed)
    masked = read_binding_autograd(q, mem, bases, offset, group, keep=keep)
    _close([dropped, *_grads(dropped, weights, leaves)], [masked, *_grads(masked, weights, leaves)],
           ["out", "dq", "dmem", "dbases"])
    assert not torch.allclose(dropped, want[0])


def test_the_binding_memory_returns_the_value_stored_under_a_key(gen):
    """Keys along distinct bases (c_t one-hot) and a query along one of them, sharply (temperature 50): the binding
    memory reads back the value written under that key (here: of 4 pairs, each value the only one under its basis),
    at every position of the pair; the paper's memory of the same tokens reads back one mixture whatever the query,
    far from any one value."""
    bases = torch.eye(d, dtype=F64)[None, :r].expand(H, r, d).contiguous()         # b_i = e_i
    n = 4
    keys = torch.zeros(1, H, n, d, dtype=F64)
    keys[:, :, torch.arange(n), torch.arange(n)] = 1.0                             # key of pair s: b_s
    values = torch.randn(1, H, n, d, generator=gen, dtype=F64)
    valid = torch.ones(1, 1, n, dtype=F64)
    log_t = torch.full((H,), 50.0, dtype=F64).log()
    binding = ops.mean_memory(values, valid, ops.key_weights(keys, bases))          # [1, H, 1, r, d]
    mean = ops.mean_memory(values, valid)                                           # [1, H, 1, d]
    for s in range(n):
        q = 3.0 * bases[None, :, s, None]                                           # [1, H, 1, d] along key s
        got = ops.read(q, binding, bases, "recompute", binding=True, log_temperature=log_t, memory_norm="rms")
        want = values[:, :, s:s + 1] / values[:, :, s:s + 1].square().mean(-1, keepdim=True).sqrt()
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
        paper = ops.read(q, mean, bases, "recompute", log_temperature=log_t, memory_norm="rms")
        cos = torch.nn.functional.cosine_similarity(paper, values[:, :, s:s + 1], dim=-1)
        assert (cos < 0.9).all()


# ---------------------------------------------------------------------------------- kernels, options, errors
def test_the_triton_kernels_declare_they_do_not_read_it_and_the_report_says_so(gen, monkeypatch):
    """With the Triton kernels chosen (the CUDA rule stated on the CPU, LAVO_ZOO_TRITON=1), a call on the binding
    memory runs the read on the recompute kernel, the decoding step on the PyTorch step, and the fused layer not at
    all (the layer composes the call); the report names what ran. One place declares it: ``ops.paper_memory``, the
    Triton kernels' ``applies``."""
    pytest.importorskip("triton")
    from lavo_zoo.attention.ops import triton_utils

    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: True)
    monkeypatch.setattr(triton_utils, "_failures", {})
    monkeypatch.setenv("LAVO_ZOO_TRITON", "1")
    q, mem, bases = _leaf(gen, B, H, T, d), _leaf(gen, B, H, 1, r, d), _bases(gen)
    run = ops.LAVO_KERNELS.choose(q.float())
    assert (run.window.name, run.read.name, run.step.name, run.layer.name) == ("triton",) * 4
    out = run.read(q, mem, bases, 0, 1, binding=True)
    torch.testing.assert_close(out, read_binding_autograd(q, mem, bases))
    assert run.read.name == "recompute" and run.layer(q, bases, w, binding=True) is None
    assert run.report() == "recompute"
    for kernel in (ops.TRITON_READ, ops.STEP.kernel("triton"), ops.LAYER.kernel("triton")):
        assert kernel.applies is ops.paper_memory or kernel.applies is ops._step_applies
    assert ops.paper_memory() and not ops.paper_memory(binding=True)


def test_options_and_errors():
    attn = build_attention("lavo", 32, 4, "causal", num_bases=4, window_size=4, memory="binding")
    assert attn.memory == "binding" and build_attention("lavo", 32, 4, "causal").memory == "mean"  # the paper's
    assert "memory=binding" in repr(attn)
    cross = build_attention("lavo", 32, 4, "cross", num_bases=4, memory="binding")
    assert cross.k_proj is not None and build_attention("lavo", 32, 4, "cross").k_proj is None  # keys only to bind
    with pytest.raises(ValueError, match="memory must be one of mean, binding, got 'matrix'"):
        build_attention("lavo", 32, 4, "causal", memory="matrix")
    mean = build_attention("lavo", 32, 4, "causal", num_bases=4, window_size=4)
    _, state = mean(torch.randn(1, 6, 32), return_state=True)
    with pytest.raises(ValueError, match=r"state holds the paper's mean memory's sums of \[8\] per head; this layer "
                                         r"\(memory='binding', r = 4\) keeps \[4, 8\]"):
        attn(torch.randn(1, 2, 32), state=state, return_state=True)
    with pytest.raises(ValueError, match=r"cache holds a memory of shape \[4, 1, 8\] per sequence, this layer's "
                                         r"\(memory='binding'\) is \[4, 1, 4, 8\]"):
        cross.cross_step(torch.randn(1, 2, 32), build_attention("lavo", 32, 4, "cross").cross_cache(
            torch.randn(1, 5, 32)))
