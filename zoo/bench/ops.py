"""``lavo-zoo bench ops``: how many PyTorch operations and kernel launches one training step (fwd+bwd) or one
decoding step of an attention layer dispatches, per path: sdpa, LAVO on its CPU default (the recompute kernels) and
LAVO on its Triton kernels. On a GPU each operation costs the host several microseconds to dispatch and launch, so
at 8K tokens, where the kernels themselves are short, the count sets the step's time (benchmarks/RESULTS.md).

Counted by :func:`lavo_zoo.bench.counting.counting`: every operation torch dispatches, views, casts and autograd's
included; a Triton kernel's launch counts once and nothing it does inside (Triton's CPU interpreter, which runs the
kernels on a machine without a GPU, dispatches torch operations of its own). Each path runs in a fresh process, the
Triton path on a CPU with ``TRITON_INTERPRET=1``. The Triton path's count and sdpa's do not depend on the sequence
length; the recompute kernels loop over chunks of queries, so theirs grows with it.

The test suite pins these counts (``tests/bench/test_ops.py``, ``tests/attention/lavo/test_triton.py``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from lavo_zoo.bench.timing import parse_ints, run_fresh, write_json, writes_records
from lavo_zoo.options import json_records_option

PATHS = "sdpa,lavo:auto,lavo:triton"  # name[:kernels]


def _layer(name: str, kernels: str | None, spec: dict[str, Any]):
    from lavo_zoo.attention import build_attention

    options: dict[str, Any] = {}
    if name == "lavo":
        options = {"num_bases": spec["num_bases"], "window_size": spec["window"], "kernels": kernels or "auto"}
    elif kernels:
        raise click.UsageError(f"--paths: only lavo takes kernels, got '{name}:{kernels}'")
    return build_attention(name, spec["embed_dim"], spec["heads"], "causal", **options)


def count_path(spec: dict[str, Any]) -> dict[str, Any]:
    """One path's count (run it in a fresh process): the operations and launches of the second of two identical
    steps (the first compiles and autotunes on a GPU). ``spec``: path ('name[:kernels]'), mode ('fwdbwd' or 'decode'),
    length (tokens of the step, or of the prefix before the decoded token), embed_dim, heads, num_bases, window,
    autocast ('bfloat16', 'float16' or 'none'), device; warmup (default True): False counts the first step (the
    tests, in Triton's interpreter, where nothing compiles)."""
    import torch

    from lavo_zoo.attention.ops.dispatch import kernels_used
    from lavo_zoo.bench.counting import counting
    from lavo_zoo.engine.precision import autocast

    name, _, kernels = spec["path"].partition(":")
    device = torch.device(spec["device"])
    torch.manual_seed(0)
    attn = _layer(name, kernels or None, spec).to(device)
    T, D = spec["length"], spec["embed_dim"]
    dtype = None if spec["autocast"] == "none" else getattr(torch, spec["autocast"])
    if spec["mode"] == "decode":
        attn.eval()
        with torch.no_grad():
            _, state = attn.step(torch.randn(1, T, D, device=device))
        token = torch.randn(1, 1, D, device=device)

        def step() -> None:
            with torch.no_grad():
                attn.step(token, state)
    else:
        attn.train()
        x = torch.randn(1, T, D, device=device, requires_grad=True)
        grad = torch.randn(1, T, D, device=device)

        def step() -> None:
            with autocast(dtype, device):
                y = attn(x)
            torch.autograd.backward(y, grad.to(y.dtype))
            x.grad = None
            attn.zero_grad(set_to_none=True)
    if spec.get("warmup", True):
        step()
    with counting() as counter:
        step()
    return {"path": spec["path"], "kernels": kernels_used(attn), "ops": counter.total,
            "launches": len(counter.launches), "total": counter.total + len(counter.launches),
            "by_op": dict(counter.ops.most_common()), "kernel_launches": counter.launches}


def count_isolated(spec: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """:func:`count_path` in a fresh process; a Triton path on a machine without a GPU in Triton's interpreter
    (``TRITON_INTERPRET=1``: its kernels run on the CPU, slowly, which the count does not see)."""
    env = dict(os.environ)
    if spec["path"].endswith(":triton") and spec["device"] == "cpu":
        env.update(TRITON_INTERPRET="1", LAVO_ZOO_TRITON="")
    return run_fresh("lavo_zoo.bench.ops:count_path", spec, timeout=timeout, env=env)


@click.command("ops", epilog="""\b
Examples:
  lavo-zoo bench ops
  lavo-zoo bench ops --mode decode --length 100 --autocast none
  lavo-zoo bench ops --paths sdpa,lavo:triton --json runs/ops.json""")
@click.option("--paths", default=PATHS, show_default=True,
              help="Comma-separated name[:kernels]: sdpa, lavo:auto (CPU: recompute), lavo:triton, any mechanism.")
@click.option("--mode", type=click.Choice(["fwdbwd", "decode"]), default="fwdbwd", show_default=True,
              help="One training step, or one decoding step (no autograd) after a prefix of --length tokens.")
@click.option("--length", default="64", show_default=True,
              help="Tokens (comma-separated for several); the Triton path's and sdpa's counts do not depend on it.")
@click.option("--embed-dim", type=click.IntRange(min=1), default=768, show_default=True)
@click.option("--heads", type=click.IntRange(min=1), default=12, show_default=True)
@click.option("--num-bases", type=click.IntRange(min=1), default=64, show_default=True, help="LAVO's r.")
@click.option("--window", type=click.IntRange(min=1), default=16, show_default=True, help="LAVO's w.")
@click.option("--autocast", type=click.Choice(["bfloat16", "float16", "none"]), default="bfloat16",
              show_default=True, help="fwdbwd under autocast with fp32 weights (training's precision), or not.")
@click.option("--device", default="cpu", show_default=True, help="cpu, or cuda for the compiled kernels.")
@click.option("--timeout", type=click.FloatRange(min=1), default=900, show_default=True,
              help="Seconds per path (Triton's interpreter is slow on a long --length).")
@json_records_option
@writes_records
def ops_cmd(paths: str, mode: str, length: str, embed_dim: int, heads: int, num_bases: int, window: int,
            autocast: str, device: str, timeout: float, json_file: Path | None) -> None:
    """Count the PyTorch operations and kernel launches of one step of an attention layer, per path (the
    benchmark layer of the GPU targets by default: D 768, 12 heads, LAVO r 64, w 16, batch 1)."""
    from lavo_zoo.engine.env import describe_machine, machine, pick_device
    from lavo_zoo.errors import UsageError, ZooError

    device = str(pick_device(device))  # before any path runs: a device this machine lacks is a usage error
    names = [p.strip() for p in paths.split(",") if p.strip()]
    if not names:
        raise UsageError(f"--paths {paths!r} names no path; give comma-separated name[:kernels], e.g. {PATHS}")
    lengths = parse_ints(length, "--length")
    records = []
    click.echo(f"# {mode}: D={embed_dim} H={heads} LAVO r={num_bases} w={window}, batch 1, autocast {autocast}, "
               f"{device}; operations dispatched (views, casts and autograd's included) + kernel launches")
    click.echo(f"# {describe_machine(machine())}")
    click.echo("| path | kernels | tokens | operations | launches | total |\n|---|---|---:|---:|---:|---:|")
    for T in lengths:
        for path in names:
            spec = {"path": path, "mode": mode, "length": T, "embed_dim": embed_dim, "heads": heads,
                    "num_bases": num_bases, "window": window, "autocast": autocast, "device": device}
            record = count_isolated(spec, timeout)
            if "error" in record:
                raise ZooError(f"{path}: {record['error']}")
            record["length"] = T
            records.append(record)
            click.echo(f"| {path} | {record['kernels'] or '-'} | {T} | {record['ops']} | {record['launches']} | "
                       f"{record['total']} |")
    if json_file is not None:
        write_json(json_file, {"machine": machine(), "mode": mode, "autocast": autocast, "records": records})

