"""LAVO's stateless op (lavo/ops.py) against its per-position form (lavo/naive.py) on fresh random tensors, float64:
the read with its options and any memory row per query; the whole memory branch (causal with and without context
dissection, noncausal; every way of joining the branches; padded), outputs and the gradients of every input; the
streaming state in and out (chunks == one pass, the final state == the plain sums, a decoding step == a one-token
chunk). Both PyTorch read kernels; the Triton one runs in test_triton.py. Shapes: B=2, H=2, d=8, r=4, w=5."""
from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from lavo_zoo.attention.lavo import naive, ops

F64 = torch.float64
B, H, T, d, r, w = 2, 2, 23, 8, 4, 5
KERNELS = ["recompute", "autograd"]
CASES = [  # memory_branch options; every value of each option at least once
    {},
    {"combine": "half", "empty_memory": "half"},
    {"combine": "half", "memory_norm": "rms", "log_temperature": True},
    {"combine": "gain", "log_temperature": True},
    {"combine": "sum", "gain": 3.0, "memory_norm": "rms"},
    {"context_dissection": False},
    {"context_dissection": False, "combine": "half"},
    {"causal": False, "combine": "half"},
    {"causal": False, "combine": "gain", "memory_norm": "rms", "log_temperature": True},
]


@pytest.fixture
def gen(request) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _leaf(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64).requires_grad_()


def _bases(gen: torch.Generator) -> torch.Tensor:
    """[H, r, d] orthonormal rows per head, a leaf."""
    return torch.linalg.qr(torch.randn(H, d, r, generator=gen, dtype=F64)).Q.mT.contiguous().requires_grad_()


def _options(gen: torch.Generator, case: dict) -> tuple[dict, list[torch.Tensor]]:
    """memory_branch's keyword options for a case (learned tensors drawn at random) and the learned leaves."""
    opts = {k: v for k, v in case.items() if k != "log_temperature"}
    leaves = []
    if case.get("log_temperature"):
        opts["log_temperature"] = _leaf(gen, H)
        leaves.append(opts["log_temperature"])
    if case.get("combine") == "gain":
        opts["gain"] = _leaf(gen, H)
        leaves.append(opts["gain"])
    return opts, leaves


def _grads(out: torch.Tensor, weights: torch.Tensor, leaves: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad((out * weights).sum(), leaves, materialize_grads=True)


def _close(got, want, names) -> None:
    for name, a, b in zip(names, got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}")


# ------------------------------------------------------------------------------------------------------ the read
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("offset, group, rows, norm", [(0, 1, T, "mean"), (3, 5, 6, "rms"), (0, 1, 1, "rms")])
def test_read_equals_the_per_query_read(gen, kernel, offset, group, rows, norm):
    """Query t reads row (offset + t) // group (one row: every query), with the temperature and the rms memory."""
    q, mem, bases, log_t = _leaf(gen, B, H, T, d), _leaf(gen, B, H, rows, d), _bases(gen), _leaf(gen, H)
    out = ops.read(q, mem, bases, kernel, offset=offset, group=group, log_temperature=log_t, memory_norm=norm,
                   chunk=4)
    row = [0 if rows == 1 else (offset + t) // group for t in range(T)]
    ref = torch.stack([naive.read(q[:, :, t], mem[:, :, row[t]], bases, log_t, norm) for t in range(T)], 2)
    weights = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    leaves = [q, mem, bases, log_t]
    _close([out, *_grads(out, weights, leaves)], [ref, *_grads(ref, weights, leaves)],
           ["out", "dq", "dmem", "dbases", "dlog_temperature"])


def test_read_refuses_an_unknown_kernel(gen):
    with pytest.raises(ValueError, match="kernels 'recompute', 'autograd' and 'triton', got 'flex'"):
        ops.read(_leaf(gen, B, H, T, d), _leaf(gen, B, H, 1, d), _bases(gen), "flex")


# --------------------------------------------------------------------------------------------- the memory branch
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_memory_branch_equals_the_per_position_form(gen, case, padded, kernel):
    opts, learned = _options(gen, case)
    q, local, feats, bases = _leaf(gen, B, H, T, d), _leaf(gen, B, H, T, d), _leaf(gen, B, H, T, d), _bases(gen)
    mask = None
    if padded:
        mask = torch.rand(B, T, generator=gen) > 0.3
        mask[:, 0] = True
    out, state = ops.memory_branch(q, local, feats, bases, w, padding_mask=mask, kernel=kernel, chunk=4, **opts)
    ref = naive.memory_branch(q, local, feats, bases, w, padding_mask=mask, **opts)
    assert state is None                                       # not asked for
    weights = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    leaves = [q, local, feats, bases, *learned]
    _close([out, *_grads(out, weights, leaves)], [ref, *_grads(ref, weights, leaves)],
           ["out", "dq", "dlocal", "dfeats", "dbases", "dlearned", "dlearned2"])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", [c for c in CASES if c.get("causal", True)],
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_streaming_state_in_and_out(gen, case, kernel):
    """Uneven chunks (one token, a chunk ending on a window boundary, chunks across several) carrying the state give
    the one-pass output and gradients; the final state holds the features' sums over the complete windows and
    over the rest (all of them, and zeros, without context dissection)."""
    opts, learned = _options(gen, case)
    q, local, feats, bases = _leaf(gen, B, H, T, d), _leaf(gen, B, H, T, d), _leaf(gen, B, H, T, d), _bases(gen)
    weights = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    leaves = [q, local, feats, bases, *learned]
    full = naive.memory_branch(q, local, feats, bases, w, **opts)
    state, outs, start = None, [], 0
    for n in (1, 4, 7, 2, 9):                                  # ends at 1, 5 (a boundary), 12, 14, 23
        part = slice(start, start + n)
        out, state = ops.memory_branch(q[:, :, part], local[:, :, part], feats[:, :, part], bases, w, kernel=kernel,
                                       chunk=3, initial_state=state, output_final_state=True, **opts)
        outs.append(out)
        start += n
        assert state.position == start
    streamed = torch.cat(outs, 2)
    _close([streamed, *_grads(streamed, weights, leaves)], [full, *_grads(full, weights, leaves)],
           ["out", "dq", "dlocal", "dfeats", "dbases", "dlearned", "dlearned2"])
    f = feats.detach()
    complete = T // w * w if case.get("context_dissection", True) else T
    torch.testing.assert_close(state.sum_complete, f[:, :, :complete].sum(2))
    torch.testing.assert_close(state.sum_partial, f[:, :, complete:].sum(2))


@pytest.mark.parametrize("case", [c for c in CASES if c.get("causal", True) and c.get("context_dissection", True)],
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_a_decoding_step_equals_a_one_token_chunk(gen, case):
    """memory_step after states at every phase of the window (the memory empty, a window completing) gives
    memory_branch's output and state for the same token."""
    opts, _ = _options(gen, case)
    q, local, feats, bases = _leaf(gen, B, H, 13, d), _leaf(gen, B, H, 13, d), _leaf(gen, B, H, 13, d), _bases(gen)
    state = None
    for t in range(13):
        one = slice(t, t + 1)
        want, after = ops.memory_branch(q[:, :, one], local[:, :, one], feats[:, :, one], bases, w,
                                        initial_state=state, output_final_state=True, **opts)
        if state is not None:
            got, stepped = ops.memory_step(q[:, :, one], local[:, :, one], feats[:, :, one], bases, w, state, **opts)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            assert stepped.position == after.position == t + 1
            torch.testing.assert_close(stepped.sum_complete, after.sum_complete, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(stepped.sum_partial, after.sum_partial, rtol=1e-12, atol=1e-12)
        state = after


def test_window_sums_of_a_chunk_starting_inside_a_window(gen):
    """Sums over windows of w steps whose first starts a steps before the chunk: the chunk's first w - a steps,
    then whole windows, then the tail."""
    feats = torch.randn(B, H, T, d, generator=gen, dtype=F64)
    for a in range(w):
        edges = [0] + list(range(w - a if a else w, T, w)) + [T]
        want = torch.stack([feats[:, :, lo:hi].sum(2) for lo, hi in itertools.pairwise(edges)], 2)
        torch.testing.assert_close(ops.window_sums(feats, a, w), want)
