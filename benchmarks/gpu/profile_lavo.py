"""Where one LAVO layer's fwd+bwd time goes: torch.profiler on the layer of the GPU targets (D = 768, 12 heads,
r = 64, w = 16, batch 1, fp32 weights under bf16 autocast as in training) at 8K and 128K tokens, each kernel
configuration beside FlashAttention (sdpa), and a table of the top kernels by device time per run.

Usage (a GPU; ``--device cpu`` with small sizes runs the same at toy size, the tables then by CPU time)::

    python benchmarks/gpu/profile_lavo.py --out "$OUT/profile"
    python benchmarks/gpu/profile_lavo.py --device cpu --lengths 64 --embed-dim 16 --heads 2 --num-bases 4 \\
        --window 4 --out /tmp/profile

Each run (an attention, its kernels, a length) is warmed up (Triton compiles and autotunes there), timed (median of
``--repeats``), then profiled for one fwd+bwd. Written to ``--out``: ``profile.md`` (per run: the kernels LAVO ran,
the median time, peak memory, the PyTorch operations one step dispatches (views and casts too: each costs host
time), the kernel launches and the share of the median step the device is busy (far below 1: the host's launching
sets the time, not the kernels), and the top ``--top`` kernels by self device time with calls, total and share),
``profile.json`` (the same records), and with ``--trace`` a Chrome trace per run. ``--attentions`` lists the runs as
``name[:kernels]``: ``lavo:triton`` (the Triton kernels), ``lavo:auto`` (the CUDA default: the flex window and the
recompute read), ``sdpa``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.ops.dispatch import kernels_used
from lavo_zoo.bench.counting import counting
from lavo_zoo.bench.timing import time_runs
from lavo_zoo.engine.precision import autocast

DEFAULT_ATTENTIONS = "lavo:triton,lavo:auto,sdpa"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for profile.md, profile.json (and traces)")
    p.add_argument("--device", default="cuda", help="cuda (the profile that counts) or cpu (toy size, a smoke run)")
    p.add_argument("--lengths", default="8192,131072", help="comma-separated sequence lengths")
    p.add_argument("--attentions", default=DEFAULT_ATTENTIONS, help="comma-separated name[:kernels] runs")
    p.add_argument("--embed-dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--num-bases", type=int, default=64)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--autocast", choices=["bfloat16", "float16", "none"], default=None,
                   help="autocast dtype (default: bfloat16 on CUDA, none on CPU)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--top", type=int, default=25, help="kernels per table")
    p.add_argument("--trace", action="store_true", help="also write a Chrome trace per run")
    return p.parse_args(argv)


def _layer(name: str, kernels: str | None, args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    options: dict[str, Any] = {}
    if name == "lavo":
        options = {"num_bases": args.num_bases, "window_size": args.window, "kernels": kernels or "auto"}
    elif name == "local":
        options = {"window_size": args.window}
    elif kernels:
        raise SystemExit(f"--attentions: only lavo takes kernels, got '{name}:{kernels}'")
    return build_attention(name, args.embed_dim, args.heads, "causal", **options).to(device).train()


def _self_time(event: Any, on_device: bool) -> float:
    """An averaged profiler event's self time in microseconds, on the device or on the CPU."""
    if on_device:
        return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)
    return event.self_cpu_time_total


def _top_kernels(prof: Any, on_device: bool, top: int) -> tuple[list[dict[str, Any]], float, int]:
    """The ``top`` events by self time (CUDA kernels on a GPU, operators on a CPU), the total of all and their
    number of calls (kernel launches on a GPU)."""
    events = [e for e in prof.key_averages() if _self_time(e, on_device) > 0]
    if on_device:  # the kernels themselves (CPU-side operators have no self device time of their own)
        events = [e for e in events if getattr(e, "device_type", None) != torch.autograd.DeviceType.CPU]
    total = sum(_self_time(e, on_device) for e in events)
    events.sort(key=lambda e: _self_time(e, on_device), reverse=True)
    rows = [{"kernel": e.key, "calls": e.count, "self_ms": _self_time(e, on_device) / 1e3,
             "share": _self_time(e, on_device) / total if total else 0.0} for e in events[:top]]
    return rows, total / 1e3, sum(e.count for e in events)


def profile_run(name: str, kernels: str | None, T: int, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, time and profile one fwd+bwd of one layer at length T; the record of the run."""
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    amp = args.autocast or ("bfloat16" if cuda else "none")
    torch.manual_seed(0)
    attn = _layer(name, kernels, args, device)
    x = torch.randn(1, T, args.embed_dim, device=device, requires_grad=True)
    g = torch.randn(1, T, args.embed_dim, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtype = getattr(torch, amp) if amp != "none" else None

    def step() -> None:
        with autocast(dtype, device):
            y = attn(x)
        torch.autograd.backward(y, g.to(y.dtype))
        x.grad = None
        attn.zero_grad(set_to_none=True)

    timed = time_runs(step, args.warmup, args.repeats, device)
    with counting() as ops:   # the operations dispatched (views and casts too), a Triton launch once
        step()
    times, peak = timed["times_s"], timed["peak_memory_bytes"] if cuda else None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, acc_events=True) as prof:
        step()
        sync()
    label = f"{name}:{kernels}" if kernels else name
    if args.trace:
        prof.export_chrome_trace(str(args.out / f"trace_{label.replace(':', '_')}_{T}.json"))
    rows, total_ms, calls = _top_kernels(prof, cuda, args.top)
    median_ms = statistics.median(times) * 1e3
    return {"attention": label, "length": T, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "autocast": amp, "kernels": kernels_used(attn), "median_ms": median_ms,
            "peak_memory_mib": None if peak is None else peak / 2**20, "profiled_ms": total_ms, "calls": calls,
            "ops": ops.total, "triton_launches": len(ops.launches),
            "busy": total_ms / median_ms if cuda and median_ms else None,
            "timed_by": "device" if cuda else "cpu", "top": rows}


def _markdown(records: list[dict[str, Any]]) -> str:
    lines = ["# LAVO layer profile (fwd+bwd)", ""]
    for r in records:
        memory = "" if r["peak_memory_mib"] is None else f", peak {r['peak_memory_mib']:.0f} MiB"
        kernels = f" [{r['kernels']}]" if r["kernels"] else ""
        launched = f" and {r['triton_launches']} Triton launches" if r.get("triton_launches") else ""
        busy = f"; {r['ops']} PyTorch operations dispatched{launched}" + ("" if r["busy"] is None else (
            f", {r['calls']} kernel launches, the device busy for {100 * r['busy']:.0f}% of the median step (well "
            "under 100% means the host's launching, not the kernels, sets the time)"))
        lines += [f"## {r['attention']}{kernels}, T = {r['length']}, {r['device']}, autocast {r['autocast']}", "",
                  (f"median {r['median_ms']:.3f} ms{memory}; the profiled step's kernels: {r['profiled_ms']:.3f} "
                   f"ms of self {r['timed_by']} time in all, the top {len(r['top'])} below{busy}"), "",
                  "| kernel | calls | self ms | share |", "|---|---:|---:|---:|"]
        lines += [f"| `{row['kernel'][:100]}` | {row['calls']} | {row['self_ms']:.3f} | {100 * row['share']:.1f}% |"
                  for row in r["top"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = _parse(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (use --device cpu for a toy-size run)")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [(a.split(":")[0], a.split(":")[1] if ":" in a else None) for a in args.attentions.split(",") if a]
    records = []
    for T in (int(t) for t in args.lengths.split(",")):
        for name, kernels in runs:
            records.append(profile_run(name, kernels, T, args))
            r = records[-1]
            print(f"{r['attention']:>12} T={T:<7} [{r['kernels']}] {r['median_ms']:.3f} ms", flush=True)
            (args.out / "profile.json").write_text(json.dumps(records, indent=1))   # kept as the runs go
            (args.out / "profile.md").write_text(_markdown(records))
    return records


if __name__ == "__main__":
    main(sys.argv[1:])
