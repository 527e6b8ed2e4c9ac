"""The one kernel choice (ops/dispatch.py) over LAVO's kernels (lavo/ops.py: LAVO_KERNELS) and the window's alone
(ops/window: WINDOW_KERNELS, what the ``local`` mechanism and window_attention's 'auto' get): the (window, read)
kernels for each request, device, dtype, length, dropout and switch, stated here as literal pairs; and the recurrent
mechanisms' ops (ops/gated_linear: GATED_LINEAR_KERNELS, ops/delta_rule: DELTA_RULE_KERNELS), PyTorch's chunked
form or flash-linear-attention's kernel, for each request, dtype, switch and whether fla imports. The CUDA rules
are stated on the CPU too, with the device test (``dispatch.on_cuda``, ``triton_utils.usable``) answering as a GPU
would; where a GPU is, they run on CUDA tensors as well. The Triton interpreter's cases run in
tests/attention/lavo/test_triton.py; fla's kernels, stood in for on the CPU, in tests/attention/ops/test_fla.py."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from lavo_zoo.attention import attention_class, build_attention
from lavo_zoo.attention.lavo.ops import LAVO_KERNELS
from lavo_zoo.attention.ops import KernelUnavailable, dispatch, fla
from lavo_zoo.attention.ops.delta_rule import DELTA_RULE_KERNELS
from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR_KERNELS
from lavo_zoo.attention.ops.window import WINDOW, WINDOW_KERNELS, flex
from lavo_zoo.errors import UsageError
from tests.attention.mechanism_testing import recurrent_names

CUDA = torch.cuda.is_available()
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
HAS_TRITON = importlib.util.find_spec("triton") is not None


@pytest.fixture(autouse=True)
def _switches_unset(monkeypatch):
    """Neither switch set by the environment, no earlier compile failure, unless a test says so."""
    monkeypatch.delenv("LAVO_ZOO_TRITON", raising=False)
    monkeypatch.delenv("LAVO_ZOO_FLEX", raising=False)
    monkeypatch.setattr(flex, "_failure", None)
    if HAS_TRITON:
        from lavo_zoo.attention.ops import triton_utils
        monkeypatch.setattr(triton_utils, "_failures", {})


def _q(length: int = 512, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.zeros(1, 2, length, 8, dtype=dtype, device=device)


def choose_kernels(q: torch.Tensor, request: str = "auto", *, dropout: float = 0.0, training: bool = False,
                   auto_triton: bool = True) -> tuple[str, ...]:
    """The names the dispatch chooses: LAVO's (window, read), or with ``auto_triton=False`` the window's alone."""
    if auto_triton:
        choice = LAVO_KERNELS.choose(q, request, dropout=dropout, training=training)
        return choice.window.name, choice.read.name
    return (WINDOW_KERNELS.choose(q, request, dropout=dropout, training=training).window.name,)


@pytest.mark.parametrize("backend, dropout, training, want", [
    ("auto", 0.0, True, ("recompute", "recompute")),
    ("auto", 0.1, False, ("recompute", "recompute")),   # dropout applies in training only
    ("auto", 0.1, True, ("recompute", "recompute")),    # the recompute kernels apply dropout themselves
    ("recompute", 0.0, True, ("recompute", "recompute")),
    ("recompute", 0.1, True, ("recompute", "recompute")),
    ("autograd", 0.0, False, ("autograd", "autograd")),
    ("autograd", 0.1, True, ("autograd", "autograd")),
    ("flex", 0.0, False, ("flex", "recompute")),        # forced: the read has no flex kernel
    ("flex", 0.1, True, ("recompute", "recompute")),    # flex_attention has no dropout
])
def test_cpu_choices(backend, dropout, training, want):
    assert choose_kernels(_q(), backend, dropout=dropout, training=training) == want
    assert choose_kernels(_q(), backend, dropout=dropout, training=training, auto_triton=False) == want[:1]


def test_dropout_kernels_are_all_but_flex():
    assert {k.name for op in LAVO_KERNELS.ops.values() for k in op.kernels if k.dropout} == {"triton", "recompute",
                                                                                           "autograd"}
    assert WINDOW.fallback.dropout and LAVO_KERNELS.ops["read"].fallback.dropout


@pytest.mark.skipif(INTERPRETING, reason="in Triton's interpreter the kernels run on CPU tensors")
def test_triton_requested_where_it_cannot_run_falls_back_to_recompute():
    assert choose_kernels(_q(), "triton") == ("recompute", "recompute")               # a CPU tensor
    assert choose_kernels(_q(dtype=torch.float64), "triton") == ("recompute", "recompute")
    assert not dispatch.triton_runs(_q())


def test_switches_and_fp64_turn_triton_off(monkeypatch):
    assert not dispatch.triton_runs(_q(dtype=torch.float64))
    monkeypatch.setenv("LAVO_ZOO_TRITON", "0")
    assert not dispatch.triton_runs(_q())
    assert choose_kernels(_q(), "triton") == ("recompute", "recompute")


def test_an_unknown_request_is_refused():
    with pytest.raises(ValueError, match="kernels must be one of auto, triton, flex, recompute, autograd, got 'fast'"):
        choose_kernels(_q(), "fast")


# The CUDA rules (triton_by_default states when 'auto' takes Triton): with it off, 'auto' on CUDA is the flex window
# and the recompute read; LAVO_ZOO_TRITON=1 makes it take Triton, kernels='triton' forces it.
CUDA_CASES = [
    # backend, length, dtype, auto_triton, switches, dropout in training, want
    ("auto", 512, torch.float32, True, {}, False, ("flex", "recompute")),             # the verified default
    ("auto", 512, torch.bfloat16, True, {}, False, ("flex", "recompute")),
    ("auto", 16, torch.float32, True, {}, False, ("recompute", "recompute")),         # short chunks: no flex compile
    ("auto", 512, torch.float32, True, {}, True, ("recompute", "recompute")),         # flex has no dropout
    ("auto", 512, torch.float32, True, {"LAVO_ZOO_TRITON": "1"}, False, ("triton", "triton")),
    ("auto", 16, torch.float32, True, {"LAVO_ZOO_TRITON": "1"}, False, ("triton", "triton")),  # any length
    ("auto", 512, torch.float32, True, {"LAVO_ZOO_TRITON": "1"}, True, ("triton", "triton")),  # dropout inside
    ("auto", 512, torch.float64, True, {"LAVO_ZOO_TRITON": "1"}, False, ("flex", "recompute")),  # no fp64 Triton
    ("auto", 512, torch.float32, False, {"LAVO_ZOO_TRITON": "1"}, False, ("flex", "recompute")),  # local keeps flex
    ("auto", 512, torch.float32, True, {"LAVO_ZOO_FLEX": "0"}, False, ("recompute", "recompute")),
    ("triton", 512, torch.float32, True, {}, False, ("triton", "triton")),          # selectable without the switch
    ("triton", 16, torch.float32, False, {}, True, ("triton", "triton")),
    ("triton", 512, torch.float64, True, {}, False, ("recompute", "recompute")),
    ("triton", 512, torch.float32, True, {"LAVO_ZOO_TRITON": "0"}, False, ("recompute", "recompute")),
    ("flex", 512, torch.float32, True, {}, True, ("recompute", "recompute")),
]


def _cuda_case_ids(case) -> str:
    backend, length, dtype, auto_triton, switches, dropout, _ = case
    return "-".join([backend, str(length), str(dtype).split(".")[-1], "triton" if auto_triton else "local",
                     *(f"{k}={v}" for k, v in switches.items()), "dropout" if dropout else "eval"])


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
@pytest.mark.parametrize("case", CUDA_CASES, ids=_cuda_case_ids)
def test_cuda_choices_stated_on_the_cpu(monkeypatch, case):
    """The CUDA rules with the device test answering 'CUDA' for these CPU tensors (the kernels do not run here)."""
    from lavo_zoo.attention.ops import triton_utils

    backend, length, dtype, auto_triton, switches, dropout, want = case
    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: t.dtype in triton_utils.DTYPES and t.numel() > 0)
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert choose_kernels(_q(length, dtype), backend, dropout=0.1 if dropout else 0.0, training=True,
                          auto_triton=auto_triton) == (want if auto_triton else want[:1])


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("case", CUDA_CASES, ids=_cuda_case_ids)
def test_cuda_choices(monkeypatch, case):
    backend, length, dtype, auto_triton, switches, dropout, want = case
    if "triton" in want and not HAS_TRITON:
        pytest.skip("Triton is not installed")
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert choose_kernels(_q(length, dtype, "cuda"), backend, dropout=0.1 if dropout else 0.0, training=True,
                          auto_triton=auto_triton) == (want if auto_triton else want[:1])


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
def test_a_triton_compile_failure_turns_triton_off(monkeypatch):
    from lavo_zoo.attention.ops import triton_utils

    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: True)
    monkeypatch.setenv("LAVO_ZOO_TRITON", "1")
    assert choose_kernels(_q()) == ("triton", "triton")
    monkeypatch.setattr(triton_utils, "_failures", {"window_fwd": "OutOfResources: shared memory"})
    assert not dispatch.triton_runs(_q())
    assert choose_kernels(_q()) == ("flex", "recompute") and choose_kernels(_q(), "triton") == ("recompute",
                                                                                                "recompute")


def test_a_flex_compile_failure_turns_flex_off(monkeypatch):
    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    assert choose_kernels(_q()) == ("flex", "recompute")
    monkeypatch.setattr(flex, "_failure", "RuntimeError: no tile configuration fits")
    assert choose_kernels(_q()) == ("recompute", "recompute")


# ------------------------------------------------------------------------------ the recurrent mechanisms' ops
RECURRENT = {"gated_linear": GATED_LINEAR_KERNELS, "delta_rule": DELTA_RULE_KERNELS}


def choose_recurrent(op: str, q: torch.Tensor, request: str = "auto") -> str:
    """The kernel the dispatch chooses for a recurrent op (its set has that one op)."""
    return getattr(RECURRENT[op].choose(q, request), op).name


@pytest.mark.parametrize("op", list(RECURRENT))
@pytest.mark.parametrize("request_", ["auto", "chunk", "fla"])
def test_recurrent_cpu_choices_are_pytorch(op, request_, monkeypatch):
    """On CPU tensors every request runs the PyTorch chunked form, whether fla imports or not."""
    for installed in (False, True):
        monkeypatch.setattr(fla, "available", lambda installed=installed: installed)
        for dtype in (torch.float32, torch.float16, torch.float64):
            assert choose_recurrent(op, _q(dtype=dtype), request_) == "chunk"


def test_recurrent_unknown_request_is_refused():
    for kernels in RECURRENT.values():
        assert kernels.requests == ("auto", "fla", "chunk")
        with pytest.raises(ValueError, match="kernels must be one of auto, fla, chunk, got 'triton'"):
            kernels.choose(_q(), "triton")


# fla's kernels are Triton kernels: 'auto' takes them under the dispatch's Triton rule (triton_by_default), a request
# anywhere they run; the delta rule's in half precision only.
RECURRENT_CUDA_CASES = [
    # op, request, dtype, switches, fla importable, want
    ("gated_linear", "auto", torch.float32, {}, True, "chunk"),                         # the verified default
    ("gated_linear", "auto", torch.bfloat16, {}, True, "chunk"),
    ("gated_linear", "auto", torch.float32, {"LAVO_ZOO_TRITON": "1"}, True, "fla"),
    ("gated_linear", "auto", torch.bfloat16, {"LAVO_ZOO_TRITON": "1"}, True, "fla"),
    ("gated_linear", "auto", torch.float16, {"LAVO_ZOO_TRITON": "1"}, True, "fla"),
    ("gated_linear", "auto", torch.float64, {"LAVO_ZOO_TRITON": "1"}, True, "chunk"),  # no fp64 Triton
    ("gated_linear", "auto", torch.float32, {"LAVO_ZOO_TRITON": "1"}, False, "chunk"),  # fla not installed
    ("gated_linear", "fla", torch.float32, {}, True, "fla"),                           # selectable without the switch
    ("gated_linear", "fla", torch.float32, {}, False, "chunk"),
    ("gated_linear", "fla", torch.float64, {}, True, "chunk"),
    ("gated_linear", "fla", torch.float32, {"LAVO_ZOO_TRITON": "0"}, True, "chunk"),   # the Triton kernels off
    ("gated_linear", "chunk", torch.float32, {"LAVO_ZOO_TRITON": "1"}, True, "chunk"),
    ("delta_rule", "auto", torch.bfloat16, {}, True, "chunk"),
    ("delta_rule", "auto", torch.bfloat16, {"LAVO_ZOO_TRITON": "1"}, True, "fla"),
    ("delta_rule", "auto", torch.float16, {"LAVO_ZOO_TRITON": "1"}, True, "fla"),
    ("delta_rule", "auto", torch.float32, {"LAVO_ZOO_TRITON": "1"}, True, "chunk"),    # fla's delta rule: half only
    ("delta_rule", "auto", torch.bfloat16, {"LAVO_ZOO_TRITON": "1"}, False, "chunk"),
    ("delta_rule", "fla", torch.bfloat16, {}, True, "fla"),
    ("delta_rule", "fla", torch.float32, {}, True, "chunk"),
    ("delta_rule", "fla", torch.bfloat16, {"LAVO_ZOO_TRITON": "0"}, True, "chunk"),
    ("delta_rule", "chunk", torch.bfloat16, {"LAVO_ZOO_TRITON": "1"}, True, "chunk"),
]


def _recurrent_case_ids(case) -> str:
    op, request_, dtype, switches, installed, _ = case
    return "-".join([op, request_, str(dtype).split(".")[-1], *(f"{k}={v}" for k, v in switches.items()),
                     "fla" if installed else "no-fla"])


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
@pytest.mark.parametrize("case", RECURRENT_CUDA_CASES, ids=_recurrent_case_ids)
def test_recurrent_cuda_choices_stated_on_the_cpu(monkeypatch, case):
    """The CUDA rules with the device test answering 'CUDA' for these CPU tensors and fla's import stated."""
    from lavo_zoo.attention.ops import triton_utils

    op, request_, dtype, switches, installed, want = case
    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: t.dtype in triton_utils.DTYPES and t.numel() > 0)
    monkeypatch.setattr(fla, "available", lambda: installed)
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert choose_recurrent(op, _q(dtype=dtype), request_) == want


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("case", RECURRENT_CUDA_CASES, ids=_recurrent_case_ids)
def test_recurrent_cuda_choices(monkeypatch, case):
    op, request_, dtype, switches, installed, want = case
    if installed != fla.available():
        pytest.skip("flash-linear-attention is " + ("not " if installed else "") + "installed here")
    if want == "fla" and not HAS_TRITON:
        pytest.skip("Triton is not installed")
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert choose_recurrent(op, _q(dtype=dtype, device="cuda"), request_) == want


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
def test_a_triton_compile_failure_turns_fla_off(monkeypatch):
    """One Triton rule for the project's kernels and fla's: a failure of either turns both off."""
    from lavo_zoo.attention.ops import triton_utils

    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: True)
    monkeypatch.setattr(fla, "available", lambda: True)
    assert choose_recurrent("gated_linear", _q(), "fla") == "fla"
    monkeypatch.setattr(triton_utils, "_failures", {"window_fwd": "OutOfResources: shared memory"})
    assert choose_recurrent("gated_linear", _q(), "fla") == "chunk"
    assert choose_recurrent("delta_rule", _q(dtype=torch.bfloat16), "fla") == "chunk"


@pytest.mark.parametrize("name", recurrent_names())
def test_one_choice_per_recurrent_forward_and_the_report(name, monkeypatch):
    """A recurrent layer's op is chosen once per call that runs it (causal: the chunk; noncausal and cross: the
    source's state, unless the layer declares it a plain sum: ``source_op``), from its ``kernels`` option;
    ``kernels_used`` says what ran."""
    kernel_set = attention_class(name).kernel_set
    chosen = []
    choose = kernel_set.choose
    monkeypatch.setattr(kernel_set, "choose", lambda *a, **k: chosen.append(kernel_set.name) or choose(*a, **k))
    x = torch.randn(2, 9, 16)
    for pattern in ("causal", "noncausal", "cross"):
        attn = build_attention(name, 16, 2, pattern, kernels="fla")
        assert attn.kernels == "fla" and attn.kernels_used == "chunk"  # before a call: what it would take (CPU)
        chosen.clear()
        attn(x, context=x if pattern == "cross" else None)
        runs_op = pattern == "causal" or attention_class(name).source_op
        assert chosen == ([kernel_set.name] if runs_op else []), pattern
        assert attn.kernels_used == "chunk"
    attn = build_attention(name, 16, 2, "causal")
    chosen.clear()
    _, state = attn(torch.randn(2, 1, 16), return_state=True)
    attn(torch.randn(2, 1, 16), state=state, return_state=True)  # a decoding step
    assert chosen == [kernel_set.name] * 2
    assert dispatch.kernels_used(attn) == "chunk"
    with pytest.raises(UsageError, match=f"attention '{name}': kernels must be one of auto, fla, chunk, got 'x'"):
        build_attention(name, 16, 2, "causal", kernels="x")


# ------------------------------------------------------------------------------------------- the dispatch itself
def _toy_set(calls: list[str], fails: bool = False, min_queries: int = 0):
    """A mechanism's kernels as a plugin declares them: a compiled kernel 'auto' takes (from ``min_queries``
    queries; it may fail to build here) beside the PyTorch fallback, and a shortcut op without a fallback."""
    def fused(q, scale):
        calls.append("fused")
        if fails:
            raise KernelUnavailable("fused: no tile configuration fits")
        return q * scale

    def chunk(q, scale):
        calls.append("chunk")
        return q * scale

    fallback = dispatch.Kernel("chunk", chunk)
    attend = dispatch.Op("attend", (dispatch.Kernel("fused", fused, auto=lambda q: q.shape[2] >= min_queries,
                                                    compiled=True, dropout=False, min_queries=min_queries),
                                    fallback), fallback=fallback)
    shortcut = dispatch.Op("step", (dispatch.Kernel("fused", fused, auto=lambda q: True, compiled=True,
                                                    applies=lambda q, scale: q.shape[2] == 1),), fallback=None)
    return dispatch.KernelSet("toy", attend=attend, step=shortcut)


def test_a_mechanism_plugs_in_and_gets_the_choice_the_fallback_and_the_report():
    calls = []
    kernels = _toy_set(calls)
    assert kernels.requests == ("auto", "fused", "chunk")
    q = torch.randn(1, 2, 5, 4)
    run = kernels.choose(q)
    assert (run.attend.name, run.step.name) == ("fused", "fused")
    torch.testing.assert_close(run.attend(q, 2.0), 2 * q)
    assert calls == ["fused"] and run.report() == "fused"            # the step was not called: not reported
    assert run.step(q, 2.0) is None and calls == ["fused"]            # a call the shortcut does not cover: None
    assert kernels.choose(q, "chunk").names == {"attend": "chunk", "step": None}  # a name the shortcut lacks
    assert kernels.choose(q, dropout=0.1, training=True).attend.name == "chunk"   # no dropout in 'fused'
    assert kernels.choose(q, dropout=0.1, training=False).attend.name == "fused"  # dropout applies in training
    with pytest.raises(ValueError, match="kernels must be one of auto, fused, chunk, got 'flex'"):
        kernels.choose(q, "flex")


def test_a_kernel_takes_only_the_dtypes_it_declares():
    """A kernel's declared ``dtypes`` (fla's delta rule: half precision) bound every choice and every call: a request
    or 'auto' takes the fallback for other queries, and a call handed other queries after the choice reruns there."""
    calls = []
    half = dispatch.Kernel("half", lambda q: calls.append("half") or q, auto=lambda q: True, dtypes=(torch.float16,))
    fallback = dispatch.Kernel("chunk", lambda q: calls.append("chunk") or q)
    op = dispatch.Op("op", (half, fallback), fallback=fallback)
    q16, q32 = torch.zeros(1, 2, 3, 4, dtype=torch.float16), torch.zeros(1, 2, 3, 4)
    assert half.takes(q16) and not half.takes(q32)
    assert op.choose(q16).name == op.choose(q16, "half").name == "half"
    assert op.choose(q32).name == op.choose(q32, "half").name == "chunk"
    run = op.bind("half")
    run(q32)
    assert run.name == "chunk" and calls == ["chunk"]


def test_a_kernel_that_cannot_be_built_reruns_on_the_fallback_and_the_report_says_so():
    calls = []
    run = _toy_set(calls, fails=True).choose(torch.randn(1, 2, 5, 4))
    q = torch.randn(1, 2, 5, 4)
    torch.testing.assert_close(run.attend(q, 3.0), 3 * q)
    assert calls == ["fused", "chunk"] and run.attend.name == "chunk" and run.report() == "chunk"
    assert run.step(q[:, :, :1], 3.0) is None and calls == ["fused", "chunk", "fused"]  # no fallback: the caller's


def test_a_layer_reports_what_a_long_sequence_would_get_before_its_first_call():
    """The preview is long enough for every kernel's min_queries (the flex window's 256 on CUDA)."""
    kernels = _toy_set([], min_queries=64)
    assert kernels.preview("auto", torch.zeros(1), heads=2, head_dim=4).attend.name == "fused"
    assert kernels.choose(torch.zeros(1, 2, 63, 4)).attend.name == "chunk"
    lavo = build_attention("lavo", 16, 2, "causal")
    assert dispatch.kernels_used(lavo) == lavo.kernels_used == "recompute"
    assert dispatch.kernels_used(build_attention("sdpa", 16, 2, "causal")) is None  # no kernels to choose


def test_one_choice_per_lavo_forward(monkeypatch):
    """The layer chooses once per call (the window op takes the kernel it was handed, no second choice)."""
    chosen = []
    for kernel_set in (LAVO_KERNELS, WINDOW_KERNELS):
        choose = kernel_set.choose
        monkeypatch.setattr(kernel_set, "choose", lambda *a, _c=choose, _s=kernel_set, **k: chosen.append(_s.name)
                            or _c(*a, **k))
    for pattern in ("causal", "noncausal", "cross"):
        attn = build_attention("lavo", 16, 2, pattern, num_bases=4, window_size=4)
        x = torch.randn(2, 9, 16)
        chosen.clear()
        attn(x, context=x if pattern == "cross" else None)
        assert chosen == ["lavo"], pattern
    attn = build_attention("lavo", 16, 2, "causal", num_bases=4, window_size=4)
    chosen.clear()
    _, state = attn(torch.randn(2, 1, 16), return_state=True)
    attn(torch.randn(2, 1, 16), state=state, return_state=True)  # a decoding step
    assert chosen == ["lavo", "lavo"]
