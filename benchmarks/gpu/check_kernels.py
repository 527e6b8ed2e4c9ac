"""Step (a) of the device check: LAVO's Triton kernels against float64 references, forward and every gradient.

Each case computes something on the Triton kernels in one precision and the same thing in float64 from the same
(already rounded) inputs and weights, and records two errors per output and gradient: rel = ||got - ref|| / ||ref||
and peak = max |got - ref| / max |ref| (a single wrong row shows in peak). Cases:

- ``layer``: ``build_attention('lavo', ..., kernels='triton')`` against the same layer in float64 on the blocked
  ``recompute`` kernels: the output, the input (and source) gradients and every parameter gradient; causal,
  noncausal and cross attention with padding (holes and end padding, a padded source); lengths 1 to 4096, head dims
  32 / 64 / 128, the recipes' own shapes (LRA: w = 256, d = 32; time series: cross with r = 16), TF32 on.
- ``window`` / ``read``: each kernel alone (the sliding window with EPE bias and key mask; the memory read with
  one row per window, per token or per sequence) against a dense float64 formula written out here.
- ``stream``: chunks of 1000, 17 and 1 tokens carrying the (undetached) state, with gradients, against one pass.
- ``decode``: a prefill, then one token at a time, against one pass. ``long``: bf16 and bf16 autocast at 64K
  tokens (GPT-2 layer shape) against fp32 on the same kernels.
- ``fla``: flash-linear-attention's kernels (the ``fla`` extra: the ``fla`` kernel of an op, declared in its folder
  ``ops/<op>/``) against the op's PyTorch chunked form in float64: the output, the final state and the gradients of
  every input and of the initial state. The calls are derived from the registry (:func:`fla_calls`): every op a
  registered mechanism runs on, each fla function the op's folder declares (``FLA_CALLS``: which gate arguments
  select it). fla's kernels multiply fp32 in TF32 (bound ``tf32``); an op whose fla kernel takes half precision only
  (its declared ``dtypes``) runs in fp16 and bf16. Device run only: fla's autotuned kernels do not run in Triton's
  interpreter, so the toy run has no ``fla`` case.

Precisions: ``fp32`` (IEEE products, torch's default), ``tf32`` (``torch.set_float32_matmul_precision('high')``),
``fp16`` / ``bf16`` (module and inputs cast), ``autocast`` (training's: fp32 weights, the forward under bf16
autocast, backward outside it). A case passes when every error is finite and at most the precision's bound
(:data:`BOUNDS`) or 3 times the error of the project's torch path in the same precision (the yardstick: what
rounding alone costs there), and the Triton kernels ran. Cases run in ``--jobs`` worker processes (Triton compiles
on the CPU: a dozen cases per process); each prints one line and the JSON holds every record.

At toy size (``LAVO_GPU_TOY=1``, with ``TRITON_INTERPRET=1``) the same cases run on the CPU in Triton's
interpreter at small shapes; bf16 cases are skipped there (the interpreter multiplies bf16 operands wrongly) and
autocast uses fp16. Usage: ``python benchmarks/gpu/check_kernels.py --json OUT.json [--jobs N]``; exit 1 if a case
failed.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpu_common import TOY, Timer, append_jsonl, device, environment, errors, write_json

BOUNDS = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2, "autocast": 5e-2}
YARDSTICK_FACTOR = 3.0
# sizes of the device run (False) and the toy run on the CPU (True): lengths of the fp32 and autocast sweeps, "few"
# of fp16 and bf16, "mid" of the rest; the layer's width D (heads = D / d), head dim d, window w, bases r; the recipe
# shapes (LRA: T, heads, d, w, r; time series: T, source, heads, d, r); "long": T, D, heads, r, w
SIZES = {
    False: {"lengths": (1, 15, 63, 65, 999, 4096), "few": (65, 4096), "mid": 999, "width": 256, "d": 64,
            "dims": (32, 128), "w": 16, "r": 32, "lra": (4000, 2, 32, 256, 32), "ts": (72, 96, 8, 64, 16),
            "kernel_lengths": (63, 999), "chunks": (1000, 17, 1), "decode": (1000, 40),
            "long": (65536, 768, 12, 64, 16)},
    True: {"lengths": (37, 1), "few": (37,), "mid": 37, "width": 32, "d": 16, "dims": (8, 32), "w": 4,
           "r": 8, "lra": (40, 2, 8, 16, 8), "ts": (12, 16, 2, 16, 4), "kernel_lengths": (15, 37),
           "chunks": (20, 5, 1), "decode": (40, 6), "long": (72, 32, 2, 16, 4)},
}
PATTERNS = ("causal", "noncausal", "cross")


def fla_calls() -> dict[str, dict[str, Any]]:
    """flash-linear-attention's calls of every op a registered mechanism runs on, derived from the registry: each
    layer's ``kernel_set``, each op's ``fla`` kernel and the ``FLA_CALLS`` of the module that defines it. Call label
    -> {"op": the Op, "function": fla's function, "gates": the op's gate arguments and their size per token
    ("head", "key": per key channel, "value": per value channel), "precisions": fp32 inputs (TF32 products in fla's
    kernels) and bf16, or fp16 and bf16 where the kernel declares half precision only}."""
    import importlib

    import torch

    from lavo_zoo.attention import ATTENTIONS, attention_class

    calls: dict[str, dict[str, Any]] = {}
    for name in ATTENTIONS.names():
        kernel_set = getattr(attention_class(name), "kernel_set", None)
        for op in ([] if kernel_set is None else kernel_set.ops.values()):
            kernel = next((k for k in op.kernels if k.name == "fla"), None)
            if kernel is None:
                continue
            precisions = ("tf32", "bf16") if kernel.dtypes is None or torch.float32 in kernel.dtypes else \
                ("bf16", "fp16")
            for label, (function, gates) in importlib.import_module(kernel.fn.__module__).FLA_CALLS.items():
                calls[label] = {"op": op, "function": function, "gates": gates, "precisions": precisions}
    return calls


# ------------------------------------------------------------------------------------------------- the cases
def build_cases(toy: bool) -> list[dict[str, Any]]:
    """Every case of the check, the long ones first (they take the longest; workers take cases round-robin)."""
    s = SIZES[toy]
    d, w, r, mid = s["d"], s["w"], s["r"], s["mid"]
    cases: list[dict[str, Any]] = [{"kind": "long", "T": s["long"][0], "shape": s["long"][1:]}]
    if not toy:  # each kernel alone where the second device run found a wrong gradient (d = 128) and at the
        # language model's r = 64, first, so that a step cut short still answers them (bf16: not in the interpreter)
        big, lm_r = s["dims"][-1], s["long"][3]
        for causal in (False, True):
            cases.append({"kind": "window", "causal": causal, "T": mid, "precision": "bf16", "d": big, "w": w})
        cases.append({"kind": "read", "rows": "sequence", "T": mid, "precision": "bf16", "d": big, "w": w, "r": r})
        cases.append({"kind": "read", "rows": "window", "T": mid, "precision": "bf16", "d": d, "w": w, "r": lm_r})

    def layer(pattern: str, T: int, precision: str, dim: int = d, **extra: Any) -> None:
        heads = extra.pop("heads", s["width"] // dim)
        cases.append({"kind": "layer", "pattern": pattern, "T": T, "precision": precision, "d": dim, "heads": heads,
                      "w": extra.pop("w", w), "r": extra.pop("r", min(r, dim)), **extra})

    for precision in ("fp32", "autocast"):
        for pattern in PATTERNS:
            for T in s["lengths"]:
                layer(pattern, T, precision)
    for precision in ("bf16", "fp16"):
        for pattern in PATTERNS:
            for T in s["few"]:
                layer(pattern, T, precision)
    for pattern in PATTERNS:
        layer(pattern, mid, "tf32")
        for dim in s["dims"]:
            layer(pattern, mid, "autocast", dim)
    for precision in ("fp32", "autocast"):
        T, heads, dim, lw, lr = s["lra"]
        layer("noncausal", T, precision, dim, heads=heads, w=lw, r=lr, shape="LRA")
        T, S, heads, dim, tr = s["ts"]
        layer("cross", T, precision, dim, heads=heads, r=tr, source=S, shape="time series")
        layer("causal", mid, precision, opts={"context_dissection": False})  # the running mean: one row per token
    for precision in ("fp32", "fp16", "bf16", "autocast"):
        for causal in (True, False):
            for T in s["kernel_lengths"]:
                cases.append({"kind": "window", "causal": causal, "T": T, "precision": precision, "d": d, "w": w})
        for rows in ("window", "token", "sequence"):
            cases.append({"kind": "read", "rows": rows, "T": mid, "precision": precision, "d": d, "w": w, "r": r})
    for precision in ("fp32", "autocast"):
        cases.append({"kind": "stream", "chunks": s["chunks"], "precision": precision, "d": d})
    cases.append({"kind": "decode", "T": s["decode"][0], "steps": s["decode"][1], "precision": "fp32", "d": d})
    if not toy:  # fla's kernels do not run in Triton's interpreter
        for op, call in fla_calls().items():
            for precision in call["precisions"]:
                for T in s["kernel_lengths"] + (4096,):
                    cases.append({"kind": "fla", "op": op, "T": T, "precision": precision, "d": d})
    if toy:
        cases = toy_subset(cases)
    for i, case in enumerate(cases):
        case["id"] = i
    return cases


def toy_subset(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At toy size (the interpreter takes seconds a case) the first case of each kind and precision and of each kind
    and variant (pattern, rows read, options): every code path of this script, not every size."""
    kept, seen = [], set()
    for case in cases:
        variant = (case["kind"], case.get("pattern", case.get("rows", case.get("causal"))), str(case.get("opts")))
        precision = (case["kind"], case.get("precision"))
        if variant not in seen or precision not in seen:
            kept.append(case)
            seen.update((variant, precision))
    return kept


def describe(case: dict[str, Any]) -> str:
    kind = case["kind"]
    if kind == "layer":
        extra = f" {case['shape']}" if "shape" in case else ""
        extra += "".join(f" {k}={v}" for k, v in case.get("opts", {}).items())
        return (f"layer  {case['pattern']:<9} T={case['T']:<5} d={case['d']:<3} r={case['r']:<2} w={case['w']:<3} "
                f"{case['precision']}{extra}")
    if kind == "window":
        return (f"window {'causal' if case['causal'] else 'noncausal':<9} T={case['T']:<5} d={case['d']:<3} "
                f"w={case['w']:<3} {case['precision']}")
    if kind == "read":
        return f"read   rows per {case['rows']:<8} T={case['T']:<5} d={case['d']:<3} r={case['r']} {case['precision']}"
    if kind == "stream":
        return f"stream chunks {'+'.join(map(str, case['chunks']))} {case['precision']} (gradients through the state)"
    if kind == "decode":
        return f"decode {case['T'] - case['steps']} prefilled + {case['steps']} one at a time {case['precision']}"
    if kind == "fla":
        return f"fla    {case['op']:<16} T={case['T']:<5} d={case['d']:<3} {case['precision']}"
    return f"long   T={case['T']} D={case['shape'][0]} bf16 and bf16 autocast against fp32"


# ------------------------------------------------------------------------------------------------ precisions
def half(precision: str) -> Any:
    """The low-precision dtype a precision computes in (fp16 for autocast at toy size: no bf16 interpreter)."""
    import torch

    if precision == "autocast":
        return torch.float16 if TOY else torch.bfloat16
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)


def weights_dtype(precision: str) -> Any:
    import torch

    return half(precision) if precision in ("fp16", "bf16") else torch.float32


@contextlib.contextmanager
def computing_in(precision: str, dev: Any, forward: bool = True):
    """TF32 products for the whole case; autocast around the forward only (training runs backward outside it)."""
    import torch

    before = torch.get_float32_matmul_precision()
    try:
        if precision == "tf32":
            torch.set_float32_matmul_precision("high")
        if precision == "autocast" and forward:
            with torch.autocast(dev.type, dtype=half(precision)):
                yield
        else:
            yield
    finally:
        torch.set_float32_matmul_precision(before)


def round_like(t: Any, precision: str) -> Any:
    """t rounded to the precision's low dtype and back: the upstream gradient every run is given."""
    return t.to(half(precision)).to(t.dtype)


# --------------------------------------------------------------------------------------- kernels and formulas
# The project's entries used here, in one place: the Triton kernels and the torch path (the yardstick) of each op.
def window_op(q, k, v, w, causal, bias, key_mask, kernel):
    from lavo_zoo.attention.ops.dispatch import triton_runs
    from lavo_zoo.attention.ops.window import window_attention

    if kernel == "triton" and not triton_runs(q):
        raise RuntimeError("the Triton window kernel does not apply to these inputs")
    return window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=key_mask, kernel=kernel)


def read_op(q, mem, bases, offset, group, kernel):
    from lavo_zoo.attention.lavo.read import read_memory
    from lavo_zoo.attention.ops.dispatch import triton_runs

    if kernel == "triton":
        if not triton_runs(q):
            raise RuntimeError("the Triton read kernel does not apply to these inputs")
        from lavo_zoo.attention.lavo.triton import read_memory_triton
        return read_memory_triton(q, mem, bases, offset, group)
    return read_memory(q, mem, bases, offset, group)


def window_formula(q, k, v, w: int, causal: bool, bias, key_mask):
    """Dense float64 window attention: scores q k^T / sqrt(d) + bias[h, s - t + w - 1] over the keys s of query t's
    window ([t-w+1, t] causal, [t-w+1, t+w-1] noncausal) that are real."""
    import torch

    T, d = q.shape[2], q.shape[3]
    t = torch.arange(T, device=q.device)
    rel = t[None, :] - t[:, None]                                               # [T(query), T(key)] s - t
    allowed = (rel > -w) & ((rel <= 0) if causal else (rel < w))
    allowed = allowed[None, None] & key_mask[:, None, None, :]                  # [B, 1, T, T]
    scores = q.double() @ k.double().mT / math.sqrt(d)
    if bias is not None:
        scores = scores + bias.double()[:, (rel + w - 1).clamp(0, 2 * w - 2)]   # [H, T, T]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, -1).nan_to_num(0.0) @ v.double()


def read_formula(q, mem, bases, offset: int, group: int):
    """Float64 memory read: query t reads row (offset + t) // group of mem (the one row when there is one) through
    the bases B: h = B m, p = softmax(h * (B q) / sqrt(d)), out = B^T (p h)."""
    import torch

    T, d = q.shape[2], q.shape[3]
    b = bases.double()
    h = mem.double() @ b.mT                                                     # [B, H, n, r]
    if mem.shape[2] > 1:
        h = h[:, :, (torch.arange(T, device=q.device) + offset) // group]      # [B, H, T, r]
    p = torch.softmax(h * (q.double() @ b.mT) / math.sqrt(d), -1)
    return (p * h) @ b


# -------------------------------------------------------------------------------------------------- checks
def grads_of(y, g, leaves):
    import torch

    return torch.autograd.grad((y.double() * g.double()).sum(), leaves, materialize_grads=True)


def compare(names: list[str], got: list[Any], want: list[Any]) -> dict[str, dict[str, float]]:
    return {n: errors(a, b) for n, a, b in zip(names, got, want)}


def _lavo(D: int, heads: int, pattern: str, r: int, w: int, opts: dict[str, Any], dev: Any):
    import torch

    from lavo_zoo.attention import build_attention

    attn = build_attention("lavo", D, heads, pattern, num_bases=r, window_size=w, kernels="triton", **opts).to(dev)
    if attn.epe is not None:
        with torch.no_grad():
            attn.epe.normal_()  # zero at initialisation: a wrong offset into it would go unseen
    return attn


def _inputs(B: int, T: int, D: int, S: int | None, dev: Any):
    """x [B, T, D], a padding mask (holes, end padding in the second sequence), a source and its mask, and the
    upstream gradient (zero on padded rows)."""
    import torch

    x = torch.randn(B, T, D, device=dev)
    mask = torch.rand(B, T, device=dev) > 0.1
    mask[:, 0] = True
    mask[1, T - T // 5:] = False  # end padding (none below 5 tokens)
    src = src_mask = None
    if S is not None:
        src = torch.randn(B, S, D, device=dev)
        src_mask = torch.arange(S, device=dev)[None].expand(B, S) < torch.tensor([[S], [max(1, S - S // 3)]],
                                                                                  device=dev)
    g = torch.randn(B, T, D, device=dev) * mask[..., None]
    return x, mask, src, src_mask, g


def _layer_run(module, x, mask, src, src_mask, g, precision, dev):
    """(output, gradients of x [, source] and every parameter) of one layer call in ``precision``."""
    kw = {}
    leaves = [x.detach().requires_grad_()]
    if src is not None:
        kw = {"context": src.detach().requires_grad_(), "context_mask": src_mask}
        leaves.append(kw["context"])
    with computing_in(precision, dev):
        y = module(leaves[0], mask, **kw)
    with computing_in(precision, dev, forward=False):
        grads = grads_of(y, g, leaves + list(module.parameters()))
    return y, grads, len(leaves)


def _named(module, y, grads, n_in):
    import torch

    names = ["out", "d_x", "d_source"][:1 + n_in]
    values = [y, *grads[:n_in]]
    params = dict(zip([n for n, _ in module.named_parameters()], grads[n_in:]))
    names.append("d_params")  # every parameter gradient as one vector (some are ~0 by symmetry alone)
    values.append(torch.cat([t.flatten().double() for t in params.values()]))
    for name in ("bases", "epe", "log_read_temperature"):
        if name in params:
            names.append(f"d_{name}")
            values.append(params[name])
    return names, values


def check_layer(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    precision, T, heads, dim = case["precision"], case["T"], case["heads"], case["d"]
    D = heads * dim
    attn = _lavo(D, heads, case["pattern"], case["r"], case["w"], case.get("opts", {}), dev).to(
        weights_dtype(precision))
    ref = copy.deepcopy(attn).double()
    ref.kernels = "recompute"
    S = case.get("source", T // 2 + 3) if case["pattern"] == "cross" else None
    x, mask, src, src_mask, g = _inputs(2, T, D, S, dev)
    g = round_like(g, precision)  # the upstream gradient as the low-precision run receives it, for every run
    x = x.to(weights_dtype(precision))
    src = src.to(weights_dtype(precision)) if src is not None else None
    y, grads, n_in = _layer_run(attn, x, mask, src, src_mask, g, precision, dev)
    mode = attn.kernels_used
    y2, grads2, _ = _layer_run(ref, x.double(), mask, None if src is None else src.double(), src_mask, g, "fp64",
                               dev)
    names, got = _named(attn, y, grads, n_in)
    _, want = _named(ref, y2, grads2, n_in)
    record = {"errors": compare(names, got, want), "mode": mode}
    if precision != "fp32":
        yard = copy.deepcopy(attn)
        yard.kernels = "recompute"
        y3, grads3, _ = _layer_run(yard, x, mask, src, src_mask, g, precision, dev)
        record["yardstick"] = compare(names, _named(yard, y3, grads3, n_in)[1], want)
    return record


def check_window(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    import torch

    precision, T, d, w = case["precision"], case["T"], case["d"], case["w"]
    B, H = 2, 4
    low = half(precision)
    q, k, v = (torch.randn(B, H, T, d, device=dev).to(low if precision != "tf32" else torch.float32)
               for _ in range(3))  # autocast: the layer's projections give half q, k, v
    bias = torch.randn(H, 2 * w - 1, device=dev).to(weights_dtype(precision))  # the EPE, a parameter
    mask = torch.rand(B, T, device=dev) > 0.3
    mask[:, 0] = True
    rows = mask[:, None, :, None]
    g = round_like(torch.randn(B, H, T, d, device=dev), precision) * rows

    def run(kernel: str, *inputs):
        leaves = [t.detach().requires_grad_() for t in inputs]
        with computing_in(precision, dev):
            out = window_op(*leaves[:3], w, case["causal"], leaves[3], mask, kernel)
        with computing_in(precision, dev, forward=False):
            return [out * rows, *grads_of(out * rows, g, leaves)]

    names = ["out", "d_q", "d_k", "d_v", "d_bias"]
    got = run("triton", q, k, v, bias)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v, bias)]
    ref = window_formula(*leaves[:3], w, case["causal"], leaves[3], mask) * rows
    want = [ref, *grads_of(ref, g, leaves)]
    record = {"errors": compare(names, got, want), "mode": "triton"}
    if precision != "fp32":
        record["yardstick"] = compare(names, run("recompute", q, k, v, bias), want)
    return record


def check_read(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    import torch

    precision, T, d, r, w = case["precision"], case["T"], case["d"], case["r"], case["w"]
    B, H = 2, 4
    offset, group, n = {"window": (3, w, math.ceil((3 + T) / w)), "token": (0, 1, T), "sequence": (0, 1, 1)}[
        case["rows"]]
    q = torch.randn(B, H, T, d, device=dev).to(half(precision) if precision != "tf32" else torch.float32)
    mem = torch.randn(B, H, n, d, device=dev).to(weights_dtype(precision))  # fp32 sums under autocast
    bases = torch.linalg.qr(torch.randn(H, d, r, device=dev)).Q.mT.contiguous().to(weights_dtype(precision))
    g = round_like(torch.randn(B, H, T, d, device=dev), precision)

    def run(kernel: str):
        leaves = [t.detach().requires_grad_() for t in (q, mem, bases)]
        with computing_in(precision, dev):
            out = read_op(*leaves, offset, group, kernel)
        with computing_in(precision, dev, forward=False):
            return [out, *grads_of(out, g, leaves)]

    names = ["out", "d_q", "d_mem", "d_bases"]
    leaves = [t.detach().double().requires_grad_() for t in (q, mem, bases)]
    ref = read_formula(*leaves, offset, group)
    want = [ref, *grads_of(ref, g, leaves)]
    record = {"errors": compare(names, run("triton"), want), "mode": "triton"}
    if precision != "fp32":
        record["yardstick"] = compare(names, run("recompute"), want)
    return record


def check_stream(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    """Chunks carrying the undetached state: the outputs and the gradients of x and every parameter as one pass."""
    import torch

    precision, d = case["precision"], case["d"]
    heads = SIZES[TOY]["width"] // d
    attn = _lavo(heads * d, heads, "causal", min(SIZES[TOY]["r"], d), SIZES[TOY]["w"], {}, dev)
    ref = copy.deepcopy(attn).double()
    ref.kernels = "recompute"
    T = sum(case["chunks"])
    x = torch.randn(1, T, heads * d, device=dev)
    g = round_like(torch.randn(1, T, heads * d, device=dev), precision)
    leaf = x.detach().requires_grad_()
    state, ys, modes = None, [], []
    start = 0
    for n in case["chunks"]:
        with computing_in(precision, dev):
            y, state = attn(leaf[:, start:start + n], state=state, return_state=True)
        ys.append(y)
        modes.append(attn.kernels_used)
        start += n
    y = torch.cat(ys, 1)
    grads = grads_of(y, g, [leaf, *attn.parameters()])
    leaf2 = x.detach().double().requires_grad_()
    y2 = ref(leaf2)
    grads2 = grads_of(y2, g, [leaf2, *ref.parameters()])
    names, got = _named(attn, y, grads, 1)
    _, want = _named(ref, y2, grads2, 1)
    # the last chunk (one token after a state) takes the direct decoding path by design, not the kernels
    return {"errors": compare(names, got, want), "mode": modes[0], "modes": modes}


def check_decode(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    import torch

    d, T, steps = case["d"], case["T"], case["steps"]
    heads = SIZES[TOY]["width"] // d
    attn = _lavo(heads * d, heads, "causal", min(SIZES[TOY]["r"], d), SIZES[TOY]["w"], {}, dev).eval()
    ref = copy.deepcopy(attn).double()
    ref.kernels = "recompute"
    x = torch.randn(1, T, heads * d, device=dev)
    with torch.no_grad():
        y, state = attn(x[:, :T - steps], return_state=True)
        mode = attn.kernels_used
        ys = [y]
        for t in range(T - steps, T):
            y, state = attn(x[:, t:t + 1], state=state, return_state=True)
            ys.append(y)
        want = ref(x.double())
    return {"errors": {"out": errors(torch.cat(ys, 1), want)}, "mode": mode}


def check_long(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    """bf16 (module and input cast) and bf16 autocast against fp32 at 64K tokens, fwd + bwd, all on the kernels."""
    import torch

    from lavo_zoo.engine.precision import autocast

    T, (D, heads, r, w) = case["T"], case["shape"]
    attn = _lavo(D, heads, "causal", r, w, {}, dev)
    x = torch.randn(1, T, D, device=dev)
    g = torch.randn(1, T, D, device=dev)
    low = half("bf16") if not TOY else torch.float16
    g = g.to(low).float()
    runs, modes = {}, {}
    for precision in ("fp32", "pure", "autocast"):
        module = attn if precision != "pure" else copy.deepcopy(attn).to(low)
        leaf = x.detach().to(low if precision == "pure" else torch.float32).requires_grad_()
        with autocast(low if precision == "autocast" else None, dev):
            y = module(leaf)
        runs[precision] = [y, *grads_of(y, g, [leaf, *module.parameters()])]
        modes[precision] = module.kernels_used
        del y
    names = ["out", "d_x", "d_params"]
    out: dict[str, Any] = {}
    for precision in ("pure", "autocast"):
        got, want = runs[precision], runs["fp32"]
        flat = [torch.cat([t.flatten().double() for t in run[2:]]) for run in (got, want)]
        out.update({f"{precision}.{n}": e for n, e in zip(names, [errors(got[0], want[0]), errors(got[1], want[1]),
                                                                   errors(*flat)])})
    return {"errors": out, "mode": "triton" if set(modes.values()) == {"triton"} else str(modes),
            "precision": "bf16" if not TOY else "fp16"}


def check_fla(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    """One of fla's calls (:func:`fla_calls`) against the op's PyTorch chunked form in float64 (the same rounded
    inputs): output, final state, the gradients of q, k, v, the gates and the initial state; the PyTorch form in the
    case's precision is the yardstick. The fla kernel is the dispatch's (``kernels='fla'``: the op's ``fla`` kernel,
    bound as a layer's call binds it); ``mode`` is 'triton' when it ran (it falls back to the PyTorch form where it
    cannot, e.g. a compile failure). Skipped where fla refuses the case's backward (a per-head gate on Hopper under
    Triton 3.4 to 3.7.0 without tilelang)."""
    import torch
    import torch.nn.functional as F

    from lavo_zoo.attention.ops import fla, triton_utils

    call = fla_calls()[case["op"]]
    op, gates = call["op"], call["gates"]
    T, d, precision = case["T"], case["d"], case["precision"]
    if gates.get("g") == "head" and fla.gated_backward_refused(torch.device(dev)):
        return {"skipped": "flash-linear-attention refuses a per-head gate's backward on this GPU and Triton "
                           "(wrong results there; install tilelang or Triton >= 3.7.1): the layers take the PyTorch "
                           "form for it"}
    low = weights_dtype(precision)
    B, H = 2, 4
    q, k, v = (torch.randn(B, H, T, d, device=dev) for _ in range(3))
    k = F.normalize(k, dim=-1)  # the delta rule's keys are unit vectors; any keys suit a linear attention

    def gate(arg: str, size: str):
        shape = (B, H, T) if size == "head" else (B, H, T, d)
        if arg != "g":
            return torch.rand(*shape, device=dev)                            # strengths in [0, 1]
        if size == "head":
            return -0.1 * torch.rand(*shape, device=dev)                     # one log decay per head
        return F.logsigmoid(torch.randn(*shape, device=dev)) / 16            # one per key channel (GLA's gate)

    named = {arg: gate(arg, size) for arg, size in gates.items()}
    state = 0.1 * torch.randn(B, H, d, d, device=dev)
    inputs = [t.to(low).to(torch.float32) for t in (q, k, v, *named.values())] + [state]

    def run(kernel, dtype):
        leaves = [t.to(dtype).detach().requires_grad_() for t in inputs[:-1]] + [
            inputs[-1].to(torch.float64 if dtype == torch.float64 else torch.float32).detach().requires_grad_()]
        qq, kk, vv, *gg, s0 = leaves
        o, final = kernel(qq, kk, vv, **dict(zip(named, gg)), state=s0)
        w_o = torch.randn_like(o, dtype=torch.float64, device=dev)
        w_s = torch.randn_like(final, dtype=torch.float64, device=dev)
        loss = (o.double() * w_o).sum() + (final.double() * w_s).sum()
        return [o, final, *torch.autograd.grad(loss, leaves, materialize_grads=True)]

    torch.manual_seed(7)
    names = ["out", "state", "d_q", "d_k", "d_v"] + [f"d_{n}" for n in named] + ["d_state"]
    chosen = op.bind("fla")
    with computing_in(precision, dev):
        got = run(chosen, low)
    ran = chosen.name == "fla"
    torch_form = op.fallback.fn
    torch.manual_seed(7)
    want = run(torch_form, torch.float64)
    torch.manual_seed(7)
    with computing_in(precision, dev):
        yard = run(torch_form, low)
    why = triton_utils.failures() or ("flash-linear-attention does not import" if not fla.available() else
                                      "a call fla does not cover")
    return {"errors": compare(names, got, want), "yardstick": compare(names, yard, want),
            "mode": "triton" if ran else f"{chosen.name} ({why})", "function": call["function"]}


CHECKS = {"fla": check_fla, "layer": check_layer, "window": check_window, "read": check_read, "stream": check_stream,
          "decode": check_decode, "long": check_long}


def verdict(case: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """Each error's limit (the precision's bound, or 3 x the yardstick's error) and whether the case passed."""
    bound = BOUNDS[record.get("precision", case.get("precision", "fp32"))]
    yard = record.get("yardstick", {})
    worst, ok = 0.0, record.get("mode") == "triton"
    for name, err in record["errors"].items():
        for metric, value in err.items():
            limit = max(bound, YARDSTICK_FACTOR * yard.get(name, {}).get(metric, 0.0))
            ok = ok and math.isfinite(value) and value <= limit
            worst = max(worst, value / limit if math.isfinite(value) else math.inf)
    return {**record, "bound": bound, "worst_over_limit": worst, "status": "ok" if ok else "FAIL"}


def run_case(case: dict[str, Any], dev: Any) -> dict[str, Any]:
    import torch

    if TOY and (case.get("precision") == "bf16"):
        return {**case, "status": "skipped", "reason": "Triton's interpreter multiplies bf16 operands wrongly"}
    torch.manual_seed(1000 + case["id"])
    try:
        with Timer() as timer:
            record = CHECKS[case["kind"]](case, dev)
            if "skipped" in record:  # the check says why the case does not apply here
                return {**case, "status": "skipped", "reason": record["skipped"]}
            record = verdict(case, record)
    except Exception as e:  # noqa: BLE001 - recorded; the other cases go on
        return {**case, "status": "error", "error": f"{type(e).__name__}: {str(e)[:500]}"}
    return {**case, **record, "seconds": timer.seconds}


def line(record: dict[str, Any]) -> str:
    status = {"ok": "ok  ", "FAIL": "FAIL", "error": "ERR ", "skipped": "skip"}[record["status"]]
    text = f"{status} {describe(record)}"
    if record["status"] in ("ok", "FAIL"):
        worst = max(record["errors"].items(), key=lambda kv: max(kv[1].values()))
        text += f"  worst {worst[0]} rel {worst[1]['rel']:.1e} peak {worst[1]['peak']:.1e} (bound {record['bound']:g})"
        if record.get("mode") != "triton":
            text += f"  kernels {record.get('mode')}"
    elif record["status"] == "error":
        text += f"  {record['error'][:200]}"
    else:
        text += f"  ({record['reason']})"
    return text


# ---------------------------------------------------------------------------------------------------- driver
def worker(index: int, jobs: int, out: Path) -> None:
    """Run cases index, index + jobs, ... and append one JSON line each to ``out``."""
    dev = device()
    for case in build_cases(TOY)[index::jobs]:
        record = run_case(case, dev)
        append_jsonl(out, record)
        print(line(record), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="Where to write the records.")
    parser.add_argument("--jobs", type=int, default=1 if TOY else min(16, os.cpu_count() or 8),
                        help="Worker processes (default: one per CPU core, at most 16: each compiles its kernels "
                        "on one core, which takes most of a case's time).")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--part", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.jobs, args.part)
        return 0
    dev = device()
    cases = build_cases(TOY)
    print(f"# {len(cases)} kernel checks on {environment()['device']} in {args.jobs} processes"
          + (" (toy size, Triton's interpreter)" if TOY else ""), flush=True)
    parts = [args.json.with_name(f"{args.json.stem}.part{i}.jsonl") for i in range(args.jobs)]
    for part in parts:
        part.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, __file__, "--json", str(args.json), "--jobs", str(args.jobs),
                               "--worker", str(i), "--part", str(part)], env=os.environ.copy())
             for i, part in enumerate(parts)]
    codes = [p.wait() for p in procs]
    done = {}
    for part in parts:
        if part.exists():
            for text in part.read_text().splitlines():
                record = json.loads(text)
                done[record["id"]] = record
            part.unlink()
    records = [done.get(c["id"], {**c, "status": "error", "error": "not run: its worker process died (exit codes "
                                   f"{codes})"}) for c in cases]
    counts = {s: sum(r["status"] == s for r in records) for s in ("ok", "FAIL", "error", "skipped")}
    write_json(args.json, {"environment": environment(), "device": str(dev), "bounds": BOUNDS,
                           "yardstick_factor": YARDSTICK_FACTOR, "counts": counts, "cases": records})
    for record in records:
        if record["status"] in ("FAIL", "error"):
            print(line(record))
    print(f"# kernels: {counts['ok']} ok, {counts['FAIL']} failed, {counts['error']} errors, {counts['skipped']} "
          f"skipped of {len(records)}; wrote {args.json}")
    return 1 if counts["FAIL"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
