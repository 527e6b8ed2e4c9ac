"""Correctness of LAVO's Triton kernels on a CUDA device (``benchmarks/run_gpu.sh`` runs it before the timings).

The layer with ``backend='triton'`` (compiled kernels, fp32 and bf16) against the same layer on the blocked
``recompute`` kernels in float64 on the same device: relative errors (norm of the difference / norm of the
reference) of the output, the input gradients and the worst parameter gradient, for causal / noncausal / cross
attention with padding and T not a multiple of the window or the kernels' blocks; a decoding run (prefill, then one
token at a time through the state) against the one-pass call; bf16 fwd+bwd at 64K tokens finite. Exits 1 if any
check exceeds its bound. Usage: ``python benchmarks/check_triton_gpu.py``; ``TRITON_INTERPRET=1 python
benchmarks/check_triton_gpu.py --smoke`` runs the same checks at small sizes on the CPU in Triton's interpreter
(fp32 only, no 64K run), to check the script itself.
"""
from __future__ import annotations

import copy
import sys

import torch

from lavo_zoo.attention import build_attention

D, H, R, W = 256, 4, 32, 16
DEVICE = "cpu" if "--smoke" in sys.argv else "cuda"
BOUNDS = {torch.float32: 1e-4, torch.bfloat16: 5e-2}  # relative error; fp32 products are IEEE (not TF32) here


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def _layer(pattern: str, **opts) -> torch.nn.Module:
    attn = build_attention("lavo", D, H, pattern, num_bases=R, window_size=W, backend="triton", **opts).to(DEVICE)
    if attn.epe is not None:
        with torch.no_grad():
            attn.epe.normal_()
    return attn


def layer_errors(pattern: str, T: int, dtype: torch.dtype, **opts) -> dict[str, float]:
    """Relative errors of the Triton layer in ``dtype`` against the float64 recompute layer."""
    torch.manual_seed(0)
    attn = _layer(pattern, **opts)
    ref = copy.deepcopy(attn).double()
    ref.backend = "recompute"
    attn = attn.to(dtype)
    B = 2
    x = torch.randn(B, T, D, device=DEVICE)
    mask = torch.rand(B, T, device=DEVICE) > 0.1
    mask[:, 0] = True
    mask[1, T - T // 5:] = False  # end padding
    src = torch.randn(B, T // 2 + 3, D, device=DEVICE) if pattern == "cross" else None
    g = torch.randn(B, T, D, device=DEVICE) * mask[..., None]
    results = []
    for module, dt in ((attn, dtype), (ref, torch.float64)):
        xs = x.to(dt).requires_grad_()
        kw = {"context": src.to(dt).requires_grad_()} if src is not None else {}
        y = module(xs, mask, **kw)
        leaves = [xs, *kw.values(), *module.parameters()]
        grads = torch.autograd.grad((y * g.to(dt)).sum(), leaves, materialize_grads=True)
        results.append((y, grads))
    assert attn.mode == "triton", attn.mode
    (y, grads), (y2, grads2) = results
    n_in = 2 if src is not None else 1
    names = [n for n, _ in attn.named_parameters()]
    params = dict(zip(names, zip(grads[n_in:], grads2[n_in:])))
    flat = [torch.cat([t.flatten().double() for t in ts]) for ts in zip(*params.values())]
    errors = {"out": _rel(y, y2), "d_inputs": max(_rel(a, b) for a, b in zip(grads[:n_in], grads2[:n_in])),
              "d_params": _rel(*flat)}  # all parameter gradients as one vector (some are ~0 by symmetry)
    for name in ("bases", "epe"):
        if name in params:
            errors[f"d_{name}"] = _rel(*params[name])
    return errors


def decoding_error(T: int = 1000, steps: int = 40) -> dict[str, float]:
    """Prefill T - steps tokens, decode ``steps`` tokens one at a time through the state, against one pass (fp32)."""
    torch.manual_seed(0)
    attn = _layer("causal").eval()
    x = torch.randn(1, T, D, device=DEVICE)
    with torch.no_grad():
        full = attn(x)
        y, state = attn(x[:, :T - steps], return_state=True)
        ys = [y]
        for t in range(T - steps, T):
            y, state = attn(x[:, t:t + 1], state=state, return_state=True)
            ys.append(y)
    return {"out": _rel(torch.cat(ys, 1), full), "state_keys": state.keys.shape[2]}


def long_bf16() -> dict[str, float]:
    """bf16 fwd+bwd at 64K tokens (GPT-2 head shape): finite output and gradients."""
    torch.manual_seed(0)
    attn = build_attention("lavo", 768, 12, "causal", num_bases=64, window_size=16).to(DEVICE).to(torch.bfloat16)
    x = torch.randn(1, 65536, 768, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    y = attn(x)
    (gx,) = torch.autograd.grad(y.float().square().mean(), x)
    return {"finite": float(bool(torch.isfinite(y).all() and torch.isfinite(gx).all())), "mode": attn.mode}


def main() -> int:
    smoke = DEVICE == "cpu"
    if not smoke and not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    print(f"# {'CPU, Triton interpreter' if smoke else torch.cuda.get_device_name()}, torch {torch.__version__}")
    failed = 0
    cases = [("causal", 1000, {}), ("causal", 4096, {}), ("causal", 999, {"context_dissection": False}),
             ("noncausal", 1000, {}), ("cross", 1000, {})]
    for pattern, T, opts in cases[:1] + cases[2:] if smoke else cases:
        T = 70 if smoke else T
        for dtype in (torch.float32,) if smoke else (torch.float32, torch.bfloat16):
            errors = layer_errors(pattern, T, dtype, **opts)
            ok = max(errors.values()) <= BOUNDS[dtype]
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {pattern:<9} T={T:<5} {str(dtype)[6:]:<8} {opts or ''} "
                  + "  ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    dec = decoding_error(80, 10) if smoke else decoding_error()
    ok = dec["out"] <= 1e-5
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} decoding one token at a time == one pass: out {dec['out']:.2e}, "
          f"state keys {dec['state_keys']}")
    if not smoke:
        long = long_bf16()
        ok = long["finite"] == 1.0 and long["mode"] == "triton"
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} bf16 fwd+bwd at 64K: finite {bool(long['finite'])}, kernels {long['mode']}")
    print(f"# {failed} check(s) failed" if failed else "# all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
