"""The chunked recurrent ops (ops/gated_linear, ops/delta_rule) against their token-by-token recurrences, and the
short convolution and row packing (ops/short_conv): float64, fresh random inputs, chunk sizes that do and do not
divide the length, a carried state, gradients."""
from __future__ import annotations

import sys

import pytest
import torch

from lavo_zoo.attention import attention_class
from lavo_zoo.attention.ops.delta_rule import chunk_delta_rule
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.ops.gated_linear import chunk_gated_linear
from lavo_zoo.attention.ops.gated_linear.naive import naive_gated_linear
from lavo_zoo.attention.ops.padding import gather_rows, pack
from lavo_zoo.attention.ops.short_conv import ShortConv, naive_short_conv
from tests.attention.mechanism_testing import ATOL, RTOL, gen, randn, recurrent_names

B, H, T, K, V = 2, 3, 29, 5, 4


def _close_with_grads(fast, slow, inputs) -> None:
    out_f, out_s = fast(), slow()
    for a, b in zip(out_f, out_s):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)
    w = [torch.randn_like(o) for o in out_f]
    gf = torch.autograd.grad(sum((o * x).sum() for o, x in zip(out_f, w)), inputs)
    gs = torch.autograd.grad(sum((o * x).sum() for o, x in zip(out_s, w)), inputs)
    for a, b in zip(gf, gs):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("gate", ["none", "head", "channel"])
@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_gated_linear_chunks_match_recurrence(gate: str, chunk: int, request) -> None:
    g0 = gen(request)
    q, k, v = randn(g0, B, H, T, K), randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    S0 = randn(g0, B, H, K, V)
    g = {"none": None, "head": -3 * torch.rand(B, H, T, generator=g0, dtype=torch.float64),
         "channel": -3 * torch.rand(B, H, T, K, generator=g0, dtype=torch.float64)}[gate]
    inputs = [t.requires_grad_() for t in (q, k, v, S0) + (() if g is None else (g,))]
    _close_with_grads(lambda: chunk_gated_linear(q, k, v, g, S0, chunk), lambda: naive_gated_linear(q, k, v, g, S0),
                      inputs)


def _delta_gates(g0: torch.Generator, decay: str, strengths: str, scale: float = 2.0) -> dict:
    """The delta rule's gates: ``decay`` none / head / channel (log decays in [-scale, 0]), ``strengths`` head (one
    beta per head, also the write strength) or channel (erase per key channel, write per value channel)."""
    rand = lambda *shape: torch.rand(*shape, generator=g0, dtype=torch.float64)
    gates = {"beta": rand(B, H, T) if strengths == "head" else rand(B, H, T, K)}
    if decay != "none":
        gates["g"] = -scale * (rand(B, H, T) if decay == "head" else rand(B, H, T, K))
    if strengths == "channel":
        gates["write"] = rand(B, H, T, V)
    return gates


@pytest.mark.parametrize("strengths", ["head", "channel"])
@pytest.mark.parametrize("decay", ["none", "head", "channel"])
@pytest.mark.parametrize("chunk", [1, 8, 20, 64])
def test_delta_rule_chunks_match_recurrence(decay: str, strengths: str, chunk: int, request) -> None:
    """The chunked form against the recurrence, outputs, final state and every gradient, for each kind of decay
    (none: DeltaNet, per head: Gated DeltaNet, per key channel: KDA) and of strengths (per head, or GDN-2's erase per
    key channel and write per value channel), chunk sizes that do and do not divide T and the per-channel form's
    blocks (20 = 8 + 8 + 4), with an initial state."""
    g0 = gen(request)
    q, v = randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    k = torch.nn.functional.normalize(randn(g0, B, H, T, K), dim=-1)
    S0 = randn(g0, B, H, K, V)
    gates = _delta_gates(g0, decay, strengths)
    inputs = [t.requires_grad_() for t in (q, k, v, S0, *gates.values())]
    _close_with_grads(lambda: chunk_delta_rule(q, k, v, state=S0, chunk_size=chunk, **gates),
                      lambda: naive_delta_rule(q, k, v, state=S0, **gates), inputs)


@pytest.mark.parametrize("decay", ["head", "channel"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_delta_rule_chunks_stay_finite_where_the_recurrence_is(decay: str, dtype: torch.dtype, request) -> None:
    """Log decays of any size (down to -1e30 and -inf, which clear the state), values of any scale: the chunked form
    in fp32 and fp64 is finite wherever the token-by-token recurrence (fp64) is, and equals it. Without the floor a
    decay of -inf gives inf - inf; with per-channel factors split at one point per chunk instead of per block, a
    factor over 1 overflows."""
    g0 = gen(request)
    q, k = randn(g0, 1, 2, 70, K), torch.nn.functional.normalize(randn(g0, 1, 2, 70, K), dim=-1)
    beta = torch.rand(1, 2, 70, generator=g0, dtype=torch.float64)
    shape = (1, 2, 70) if decay == "head" else (1, 2, 70, K)
    for g_scale, v_scale in ((30.0, 1.0), (1e4, 1e20), (1e30, 1e-20), (float("inf"), 1e10)):
        v = randn(g0, 1, 2, 70, V) * v_scale
        g = -g_scale * torch.rand(*shape, generator=g0, dtype=torch.float64)
        g = torch.where(torch.rand(*shape, generator=g0, dtype=torch.float64) < 0.7, -torch.rand(*shape,
                        generator=g0, dtype=torch.float64), g)  # most decays mild, some huge
        want, want_S = naive_delta_rule(q, k, v, beta, g)
        assert torch.isfinite(want).all() and torch.isfinite(want_S).all()
        got, got_S = chunk_delta_rule(*(t.to(dtype) for t in (q, k, v, beta, g)), chunk_size=64)
        assert torch.isfinite(got).all() and torch.isfinite(got_S).all(), (g_scale, v_scale)
        tol = 1e-10 if dtype == torch.float64 else 2e-4  # fp32: sums of huge log decays lose their small ones
        torch.testing.assert_close(got.double() / v_scale, want / v_scale, atol=tol, rtol=tol)


def test_delta_rule_gates_tied_reduce_to_one_per_head(request) -> None:
    """Gated DeltaNet-2's gates tied (erase strengths equal over the key channels, write strengths equal to them over
    the value channels) are KDA's one strength per head; KDA's decay equal over the key channels is Gated DeltaNet's
    one per head: the chunked forms agree, outputs, state and the gradients (summed over the tied channels)."""
    g0 = gen(request)
    q, v, S0 = randn(g0, B, H, T, K), randn(g0, B, H, T, V), randn(g0, B, H, K, V)
    k = torch.nn.functional.normalize(randn(g0, B, H, T, K), dim=-1)
    beta, g = torch.rand(B, H, T, generator=g0, dtype=torch.float64), -torch.rand(B, H, T, generator=g0,
                                                                                  dtype=torch.float64)
    leaves = [t.requires_grad_() for t in (q, k, v, S0, beta, g)]
    w = [randn(g0, B, H, T, V), randn(g0, B, H, K, V)]

    def loss(o, S):
        return (o * w[0]).sum() + (S * w[1]).sum()

    per_head = chunk_delta_rule(q, k, v, beta, g, S0, 8)
    per_key_decay = chunk_delta_rule(q, k, v, beta, g[..., None].expand(B, H, T, K), S0, 8)          # KDA's gate
    per_channel = chunk_delta_rule(q, k, v, beta[..., None].expand(B, H, T, K), g[..., None].expand(B, H, T, K),
                                   S0, 8, write=beta[..., None].expand(B, H, T, V))                  # GDN-2's gates
    want = torch.autograd.grad(loss(*per_head), leaves)
    for got in (per_key_decay, per_channel):
        torch.testing.assert_close(got, per_head, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(torch.autograd.grad(loss(*got), leaves), want, atol=ATOL, rtol=RTOL)


def test_delta_rule_gates_of_other_shapes_are_refused() -> None:
    q = torch.zeros(1, 2, 5, 4)
    v = torch.zeros(1, 2, 5, 3)
    with pytest.raises(ValueError, match=r"beta must have shape \[1, 2, 5\] or \[1, 2, 5, 4\]"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5, 3))
    with pytest.raises(ValueError, match=r"g must have shape"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5), torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"write must have shape \[1, 2, 5, 3\]"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5), write=torch.zeros(1, 2, 5, 4))
    with pytest.raises(ValueError, match="needs write"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5, 4))


def test_delta_rule_overwrites_a_key() -> None:
    """Writing v2 under a key that holds v1 (beta = 1) retrieves v2 alone; a linear attention would return v1 + v2."""
    k = torch.zeros(1, 1, 2, 3, dtype=torch.float64)
    k[..., 0] = 1.0
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    o, S = chunk_delta_rule(k, k, v, torch.ones(1, 1, 2, dtype=torch.float64))
    torch.testing.assert_close(o[0, 0, 1], v[0, 0, 1])
    torch.testing.assert_close(S[0, 0, 0], v[0, 0, 1])


def test_channel_gate_survives_strong_decay(request) -> None:
    """Log decays of -5 per token and channel over 32-token chunks (exp(+-80) around the chunk's middle) stay finite
    in fp32 and match the recurrence."""
    g0 = gen(request)
    q, k, v = (randn(g0, 1, 1, 64, n).float() for n in (4, 4, 3))
    g = torch.full((1, 1, 64, 4), -5.0)
    o, _ = chunk_gated_linear(q, k, v, g, None, 32)
    ref, _ = naive_gated_linear(q.double(), k.double(), v.double(), g.double())
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", [0, 1, 4])
def test_short_conv_matches_definition_and_streams(kernel: int, request) -> None:
    g0 = gen(request)
    torch.manual_seed(0)
    conv = ShortConv(6, kernel, activation=True, bias=True).double()
    x = randn(g0, 2, 11, 6)
    y, _ = conv(x)
    torch.testing.assert_close(y, naive_short_conv(conv, x), atol=ATOL, rtol=RTOL)
    y1, cache = conv(x[:, :4])
    y2, _ = conv(x[:, 4:], cache)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match="conv_size"):
        ShortConv(6, -1)


def test_pack_moves_real_tokens_first_in_order() -> None:
    mask = torch.tensor([[False, True, False, True, True], [True, True, True, True, True]])
    x = torch.arange(10).view(2, 5)
    order, inverse, packed = pack(mask)
    assert gather_rows(x, order)[0, :3].tolist() == [1, 3, 4]
    assert packed.tolist() == [[True, True, True, False, False], [True] * 5]
    assert torch.equal(gather_rows(gather_rows(x, order), inverse), x)


# ------------------------------------------------------------------------ flash-linear-attention's kernels (ops/fla)
# fla's kernels need CUDA; here a stand-in package implements fla 0.6's documented API ([B, T, H, ...] layout, its
# default scale 1/sqrt(K), initial_state [B, H, K, V], the gated delta rule's (q, k, v, g, beta) order) by the
# token-by-token recurrences, and the device test answers 'CUDA' for CPU tensors: what runs is the adapter of
# ops/fla.py (layouts, argument order, scale, dtypes) inside the dispatch. The kernels themselves are compared with
# the PyTorch forms on a GPU by benchmarks/gpu/check_kernels.py's fla cases.
def _from_fla(t):
    return t.transpose(1, 2).double()  # fla's [B, T, H, ...] -> [B, H, T, ...], computed in float64 here


def _state(S):
    return None if S is None else S.double()


def _to_fla(o, S, q, final: bool):
    return o.transpose(1, 2).to(q.dtype), (S.float() if final else None)  # as fla: o in q's dtype, states fp32


def _fake_fla(calls: list[str]) -> dict:
    import types

    def scaled(q, scale):
        return q * (q.shape[-1] ** -0.5 if scale is None else scale)

    def gated_linear(name):
        def kernel(q, k, v, g=None, scale=None, initial_state=None, output_final_state=False, **kwargs):
            calls.append(name)
            o, S = naive_gated_linear(_from_fla(scaled(q, scale)), _from_fla(k), _from_fla(v),
                                      None if g is None else _from_fla(g), _state(initial_state))
            return _to_fla(o, S, q, output_final_state)
        return kernel

    def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, **kwargs):
        calls.append("chunk_delta_rule")
        o, S = naive_delta_rule(_from_fla(scaled(q, scale)), _from_fla(k), _from_fla(v), _from_fla(beta), None,
                                _state(initial_state))
        return _to_fla(o, S, q, output_final_state)

    def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, **kwargs):
        calls.append("chunk_gated_delta_rule")
        o, S = naive_delta_rule(_from_fla(scaled(q, scale)), _from_fla(k), _from_fla(v), _from_fla(beta),
                                _from_fla(g), _state(initial_state))
        return _to_fla(o, S, q, output_final_state)

    def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, **kwargs):
        calls.append("chunk_kda")  # g: log decays per key channel [B, T, H, K] (use_gate_in_kernel off), beta [B, T, H]
        assert g.shape == q.shape and beta.shape == q.shape[:3] and not kwargs.get("use_gate_in_kernel")
        assert initial_state is None or initial_state.dtype == torch.float32
        o, S = naive_delta_rule(_from_fla(scaled(q, scale)), _from_fla(k), _from_fla(v), _from_fla(beta),
                                _from_fla(g), _state(initial_state))
        return _to_fla(o, S, q, output_final_state)

    def chunk_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False, **kwargs):
        calls.append("chunk_gdn2")  # g, b per key channel [B, T, H, K], w per value channel [B, T, H, V]
        assert g.shape == b.shape == q.shape and w.shape == v.shape
        assert initial_state is None or initial_state.dtype == torch.float32
        o, S = naive_delta_rule(_from_fla(scaled(q, scale)), _from_fla(k), _from_fla(v), _from_fla(b), _from_fla(g),
                                _state(initial_state), write=_from_fla(w))
        return _to_fla(o, S, q, output_final_state)

    modules = {name: types.ModuleType(name) for name in ("fla", "fla.ops", "fla.ops.gla", "fla.ops.simple_gla",
                                                         "fla.ops.delta_rule", "fla.ops.gated_delta_rule",
                                                         "fla.ops.kda", "fla.ops.gdn2")}
    modules["fla.ops.gla"].chunk_gla = gated_linear("chunk_gla")
    modules["fla.ops.simple_gla"].chunk_simple_gla = gated_linear("chunk_simple_gla")
    modules["fla.ops.delta_rule"].chunk_delta_rule = chunk_delta_rule
    modules["fla.ops.gated_delta_rule"].chunk_gated_delta_rule = chunk_gated_delta_rule
    modules["fla.ops.kda"].chunk_kda = chunk_kda
    modules["fla.ops.gdn2"].chunk_gdn2 = chunk_gdn2
    return modules


def test_the_stand_in_implements_every_call_the_ops_declare() -> None:
    """Every fla function the op of a registered mechanism declares (``FLA_CALLS`` of its folder's ``fla.py``) has a
    stand-in here, so that the layer tests on fla run each of them: a new op's call without one fails here."""
    import importlib

    stand_ins = {f"{module}.{name}" for module, m in _fake_fla([]).items() for name in vars(m)
                 if name.startswith("chunk_")}
    for name in recurrent_names():
        for op in attention_class(name).kernel_set.ops.values():
            fla_module = importlib.import_module(op.kernel("fla").fn.__module__)
            for label, (function, _) in fla_module.FLA_CALLS.items():
                assert any(s.endswith(f".{function}") for s in stand_ins), (
                    f"{name}: its op's fla call '{label}' ({function}) has no stand-in in _fake_fla")


@pytest.fixture
def fla_on_cuda(monkeypatch):
    """The stand-in fla, importable and 'on CUDA' (the dispatch's device test says yes); returns the fla functions
    called, in order. Needs Triton (the launch runs under triton_utils.compiling)."""
    pytest.importorskip("triton")
    from lavo_zoo.attention.ops import dispatch, fla, triton_utils

    calls: list[str] = []
    for name, module in _fake_fla(calls).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(fla, "available", lambda: True)
    monkeypatch.setattr(fla, "gated_backward_refused", lambda device: False)  # a GPU whose fla has every backward
    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: True)
    monkeypatch.setattr(triton_utils, "_failures", {})
    monkeypatch.delenv("LAVO_ZOO_TRITON", raising=False)
    return calls


@pytest.mark.parametrize("gate", ["none", "head", "channel"])
def test_fla_gated_linear_is_the_op(gate: str, fla_on_cuda, request) -> None:
    """Requested, fla's kernel runs (chunk_simple_gla, or chunk_gla for a gate per key channel) and gives the op's
    outputs and final state."""
    from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR

    g0 = gen(request)
    q, k, v, S0 = randn(g0, B, H, T, K), randn(g0, B, H, T, K), randn(g0, B, H, T, V), randn(g0, B, H, K, V)
    g = {"none": None, "head": -3 * torch.rand(B, H, T, generator=g0, dtype=torch.float64),
         "channel": -3 * torch.rand(B, H, T, K, generator=g0, dtype=torch.float64)}[gate]
    inputs = [None if t is None else t.float() for t in (q, k, v, g, S0)]  # fla's kernels run fp16 / bf16 / fp32
    run = GATED_LINEAR.bind("fla")
    o, S = run(*inputs, 8)
    assert run.name == "fla" and fla_on_cuda == ["chunk_gla" if gate == "channel" else "chunk_simple_gla"]
    assert o.dtype == S.dtype == torch.float32
    want_o, want_S = chunk_gated_linear(*[None if t is None else t.double() for t in inputs], 8)
    torch.testing.assert_close((o.double(), S.double()), (want_o, want_S), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decay, strengths, function", [
    ("none", "head", "chunk_delta_rule"), ("head", "head", "chunk_gated_delta_rule"), ("channel", "head", "chunk_kda"),
    ("channel", "channel", "chunk_gdn2"), ("head", "channel", "chunk_gdn2"), ("none", "channel", "chunk_gdn2")])
def test_fla_delta_rule_is_the_op(decay: str, strengths: str, function: str, fla_on_cuda, request) -> None:
    """Requested, fla's kernel for the call's gates runs (DeltaNet's, Gated DeltaNet's, KDA's, GDN-2's, which takes
    per-head gates broadcast and no decay as 0) and gives the op's outputs and final state."""
    from lavo_zoo.attention.ops.delta_rule import DELTA_RULE

    g0 = gen(request)
    q, v = randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    k = torch.nn.functional.normalize(randn(g0, B, H, T, K), dim=-1)
    S0 = randn(g0, B, H, K, V)
    gates = _delta_gates(g0, decay, strengths)
    gates = {n: t.float() if n == "g" else t.half() for n, t in gates.items()}  # fla: half only
    inputs = [t.half() for t in (q, k, v)]
    run = DELTA_RULE.bind("fla")
    o, S = run(*inputs, state=S0.float(), chunk_size=8, **gates)
    assert run.name == "fla" and fla_on_cuda == [function]
    assert o.dtype == S.dtype == torch.float32
    want_o, want_S = chunk_delta_rule(*[t.double() for t in inputs], state=S0, chunk_size=8,
                                      **{n: t.double() for n, t in gates.items()})
    torch.testing.assert_close((o.double(), S.double()), (want_o, want_S), atol=2e-3, rtol=2e-3)  # o in fp16


def test_calls_fla_does_not_cover_run_on_the_pytorch_form(fla_on_cuda, monkeypatch, request) -> None:
    """fla 0.6's refusals are calls the dispatch gives the PyTorch form: odd head dims in half precision (one gate
    per head or none: Based's 153 features), delta-rule key dims above 256, a per-head gate's backward where fla
    refuses it (Hopper under Triton 3.4 to 3.7.0 without tilelang; not KDA's per-channel decay, whose backward
    kernels are its own)."""
    from lavo_zoo.attention.ops import fla
    from lavo_zoo.attention.ops.delta_rule import DELTA_RULE
    from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR

    g0 = gen(request)
    odd = [randn(g0, 1, 2, 5, n).bfloat16() for n in (153, 153, 17)]
    run = GATED_LINEAR.bind("fla")
    run(*odd)
    assert run.name == "chunk" and fla_on_cuda == []
    run = GATED_LINEAR.bind("fla")
    run(*odd, -torch.rand(1, 2, 5, 153).bfloat16())  # a gate per key channel: chunk_gla takes odd dims
    assert run.name == "fla" and fla_on_cuda == ["chunk_gla"]
    wide = [randn(g0, 1, 2, 5, 300).half() for _ in range(3)] + [torch.rand(1, 2, 5).half()]
    run = DELTA_RULE.bind("fla")
    run(*wide)
    assert run.name == "chunk" and fla_on_cuda == ["chunk_gla"]
    monkeypatch.setattr(fla, "gated_backward_refused", lambda device: True)
    for op, dtype, extra in ((GATED_LINEAR, torch.float32, ()), (DELTA_RULE, torch.float16, (torch.rand(1, 2, 5),))):
        q, k, v = (randn(g0, 1, 2, 5, 4).to(dtype).requires_grad_() for _ in range(3))
        args = (q, k, v, *extra, -torch.rand(1, 2, 5))
        run = op.bind("fla")
        run(*args)
        assert run.name == "chunk"
        with torch.no_grad():  # no backward: fla runs
            run = op.bind("fla")
            run(*args)
            assert run.name == "fla"
    q, k, v = (randn(g0, 1, 2, 5, 4).half().requires_grad_() for _ in range(3))
    run = DELTA_RULE.bind("fla")
    run(q, k, v, torch.rand(1, 2, 5), -torch.rand(1, 2, 5, 4))  # KDA's backward is its own: not refused there
    assert run.name == "fla" and fla_on_cuda[-1] == "chunk_kda"


def test_a_fla_kernel_that_cannot_be_compiled_falls_back_once(fla_on_cuda, monkeypatch, request) -> None:
    """A compile failure inside fla's launch warns once, reruns the call on the PyTorch form, and turns the Triton
    kernels (fla's included) off for the process: the next call does not try fla."""
    import types

    from lavo_zoo.attention.ops import dispatch, triton_utils
    from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR

    def failing(*args, **kwargs):
        fla_on_cuda.append("chunk_simple_gla")
        raise RuntimeError("ptxas fatal: too many resources requested for launch")

    module = types.ModuleType("fla.ops.simple_gla")
    module.chunk_simple_gla = failing
    monkeypatch.setitem(sys.modules, "fla.ops.simple_gla", module)
    g0 = gen(request)
    q, k, v = randn(g0, B, H, T, K).float(), randn(g0, B, H, T, K).float(), randn(g0, B, H, T, V).float()
    run = GATED_LINEAR.bind("fla")
    with pytest.warns(RuntimeWarning, match="fla.chunk_simple_gla could not be compiled"):
        o, S = run(q, k, v)
    assert run.name == "chunk" and fla_on_cuda == ["chunk_simple_gla"]
    want_o, want_S = chunk_gated_linear(q, k, v)
    torch.testing.assert_close((o, S), (want_o, want_S), atol=0, rtol=0)
    assert "fla.chunk_simple_gla" in triton_utils.failures() and not dispatch.triton_runs(q)
    run = GATED_LINEAR.bind("fla")
    run(q, k, v)
    assert run.name == "chunk" and fla_on_cuda == ["chunk_simple_gla"]  # not tried again


def test_an_error_that_is_not_a_compile_failure_propagates(fla_on_cuda, monkeypatch) -> None:
    """A bug in the call (here fla's assertion on mismatched dtypes) is not hidden by the fallback."""
    import types

    from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR

    def asserting(*args, **kwargs):
        raise AssertionError("q, k, g must have the same shape.")

    module = types.ModuleType("fla.ops.gla")
    module.chunk_gla = asserting
    monkeypatch.setitem(sys.modules, "fla.ops.gla", module)
    q = torch.zeros(1, 2, 5, 4)
    with pytest.raises(AssertionError, match="same shape"):
        GATED_LINEAR.bind("fla")(q, q, q, torch.zeros(1, 2, 5, 4))


@pytest.mark.parametrize("error, warns", [
    (ModuleNotFoundError("No module named 'fla'", name="fla"), False),                      # not installed
    (ModuleNotFoundError("No module named 'einops'", name="einops"), True),                 # its dependency missing
    (ImportError("libcudart.so.12: cannot open shared object file"), True),                  # built for another CUDA
])
def test_fla_missing_or_broken_is_not_available(error: Exception, warns: bool, monkeypatch) -> None:
    """Not installed: not available, silently; installed but failing to import: not available, one warning."""
    import importlib
    import warnings

    from lavo_zoo.attention.ops import fla

    def import_module(name, *args, **kwargs):
        raise error

    monkeypatch.setattr(importlib, "import_module", import_module)
    fla.available.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not fla.available()
        assert [str(w.message).startswith("flash-linear-attention is installed but does not import")
                for w in caught] == ([True] if warns else [])
    finally:
        fla.available.cache_clear()


def _fla_kernel(name: str):
    """The ``fla`` kernel of the one op of recurrent mechanism ``name`` (from its layer's ``kernel_set``)."""
    (op,) = attention_class(name).kernel_set.ops.values()
    return op.kernel("fla")


@pytest.mark.parametrize("name", recurrent_names())
@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
def test_a_layer_on_fla_gives_its_pytorch_output(name: str, pattern: str, fla_on_cuda, request) -> None:
    """Each mechanism with kernels='fla' (fla's stand-in) gives what kernels='chunk' gives and reports 'fla' where
    its op ran on it: the layer hands the op its inputs in the op's order (in fp32 where the op's fla kernel takes it,
    else in half precision, as its declared ``dtypes`` say)."""
    from lavo_zoo.attention import build_attention

    dtypes = _fla_kernel(name).dtypes
    dtype = torch.float32 if dtypes is None or torch.float32 in dtypes else dtypes[0]
    torch.manual_seed(0)
    fast = build_attention(name, 32, 4, pattern, kernels="fla").to(dtype).eval()
    slow = build_attention(name, 32, 4, pattern, kernels="chunk").to(dtype).eval()
    slow.load_state_dict(fast.state_dict())
    x = randn(gen(request), 2, 21, 32).to(dtype)
    got, want = fast(x), slow(x)
    runs_op = pattern == "causal" or attention_class(name).source_op  # else a plain sum
    assert bool(fla_on_cuda) == runs_op and slow.kernels_used == "chunk"
    if runs_op:
        assert fast.kernels_used == "fla"
    tol = 2e-2 if dtype == torch.float16 else 1e-4
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("major, triton_version, tilelang, refused", [
    (9, "3.6.0", False, True),     # Hopper under the Triton torch 2.11 brings: fla 0.6 raises in the backward
    (9, "3.6.0", True, False),     # ... unless tilelang takes that kernel
    (9, "3.7.1", False, False),
    (9, "3.3.1", False, False),
    (8, "3.6.0", False, False),    # Ampere
    (10, "3.6.0", False, False),   # Blackwell
])
def test_where_fla_refuses_a_gated_backward(major, triton_version, tilelang, refused, monkeypatch) -> None:
    import importlib.util

    triton = pytest.importorskip("triton")
    from lavo_zoo.attention.ops import fla

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    monkeypatch.setattr(triton, "__version__", triton_version)
    find_spec = importlib.util.find_spec
    def find(name, *args):
        return (object() if tilelang else None) if name == "tilelang" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find)
    fla.gated_backward_refused.cache_clear()
    try:
        assert fla.gated_backward_refused(torch.device("cpu")) == refused
    finally:
        fla.gated_backward_refused.cache_clear()
