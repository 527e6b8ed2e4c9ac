"""flash-linear-attention's kernels behind the recurrent ops (ops/fla.py, and each op's fla.py: ops/gated_linear,
ops/delta_rule), on a stand-in of fla's API on the CPU: the stand-in implements every call the ops declare, fla's
kernel gives the op's outputs and final state, what fla does not cover runs on the PyTorch form, a kernel that
cannot be compiled falls back once, fla missing or broken is not available, where fla refuses a gated backward."""
from __future__ import annotations

import sys

import pytest
import torch

from lavo_zoo.attention import attention_class
from lavo_zoo.attention.ops.delta_rule import chunk_delta_rule
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.ops.gated_linear import chunk_gated_linear
from lavo_zoo.attention.ops.gated_linear.naive import naive_gated_linear
from tests.attention.mechanism_testing import gen, randn, recurrent_names
from tests.attention.ops.helpers import B, H, K, T, V, _delta_gates


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
