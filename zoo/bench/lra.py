"""``lavo-zoo bench lra``: LRA's efficiency table: training steps/s and peak memory of the LRA Text model
(Skyformer's 2 x 64 encoder, byte vocabulary, 2 classes) at 1K-4K tokens for every registry attention that
supports the noncausal pattern, relative to softmax (sdpa). One training step = forward, backward and AdamW
update of a batch of random bytes.

Each (attention, length) runs in fresh subprocesses (:func:`lavo_zoo.bench.timing.run_isolated`: one timed with
the default allocator, one for peak memory): the median of ``--repeats`` steps after ``--warmup``; CUDA:
max_memory_allocated above the start; CPU: the resident-set high-water mark above the start, reset once the model,
optimiser state and batch exist.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import click

from lavo_zoo.bench.timing import parse_ints, run_isolated, time_runs, write_json, writes_records
from lavo_zoo.options import device_option, json_records_option

OPTIONS = {"lavo": {"num_bases": 32, "window_size": 256}}  # the paper's LRA setting; other mechanisms: defaults


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One record of ``lavo-zoo bench lra``: the LRA Text model with ``spec``'s attention at its length (a fresh process
    runs it): training steps/s and peak memory."""
    import torch

    from lavo_zoo.attention import AttentionSpec
    from lavo_zoo.recipes.lra.model import LRAClassifier, ModelConfig

    torch.manual_seed(0)
    device = torch.device(spec["device"])
    L, B = spec["length"], spec["batch"]
    cfg = ModelConfig(attention=AttentionSpec(spec["attention"], OPTIONS.get(spec["attention"], {})),
                      vocab_size=257, num_classes=2, max_positions=L)
    model = LRAClassifier(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(1, 257, (B, L), device=device)
    mask = torch.ones(B, L, dtype=torch.bool, device=device)
    labels = torch.randint(0, 2, (B,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(tokens, mask), labels).backward()
        opt.step()

    step()  # optimiser state exists before the peak is reset
    return time_runs(step, spec["warmup"], spec["repeats"], device)


def noncausal_attentions() -> list[str]:
    """Every registered mechanism with the noncausal pattern, softmax (``sdpa``, the reference) first."""
    from lavo_zoo.attention import list_attentions

    names = [a.name for a in list_attentions() if "noncausal" in a.patterns]
    return ["sdpa"] + [n for n in names if n != "sdpa"]


def sweep(names: list[str], lengths: list[int], rounds: int) -> list[tuple[int, str, int]]:
    """(round, attention, length) in the order they run. One round: by mechanism, then length. Several: within each
    round, per length, every mechanism right after softmax (names start with sdpa), so each ratio compares runs
    minutes apart."""
    if rounds == 1:
        return [(0, name, n) for name in names for n in lengths]
    return [(k, name, n) for k in range(rounds) for n in lengths for name in names]


def table(results: list[dict[str, Any]], lengths: list[int]) -> str:
    """Markdown: steps/s (x softmax) and peak MiB (x softmax) per attention and length. With several rounds, the
    medians over rounds, each ratio the median of the per-round ratios (a mechanism against the softmax run next to
    it in time, so that a machine whose speed drifts is compared with itself) and their range in brackets."""
    by: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for r in results:
        by.setdefault((r["attention"], r["length"]), {})[r.get("round", 0)] = r
    rounds = {r.get("round", 0) for r in results}

    def cell(name: str, n: int, key: str, fmt: str) -> str:
        runs, base = by.get((name, n), {}), by.get(("sdpa", n), {})
        values = [r[key] for r in runs.values() if key in r]
        if not values:
            return "failed" if runs else "-"
        ratios = [runs[k][key] / base[k][key] for k in runs if key in runs[k] and base.get(k, {}).get(key)]
        text = format(statistics.median(values), fmt)
        if ratios:
            text += f" ({statistics.median(ratios):.2f}x"
            text += f", {min(ratios):.2f}-{max(ratios):.2f})" if len(rounds) > 1 else ")"
        return text

    head = "| attention | " + " | ".join(f"{n // 1024}K steps/s" for n in lengths) + " | " + \
        " | ".join(f"{n // 1024}K peak MiB" for n in lengths) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(lengths))]
    for name in dict.fromkeys(r["attention"] for r in results):
        lines.append(f"| {name} | " + " | ".join(cell(name, n, "steps_per_s", ".3g") for n in lengths) + " | " +
                     " | ".join(cell(name, n, "peak_mib", ".0f") for n in lengths) + " |")
    return "\n".join(lines)


@click.command("lra", epilog="""\b
Examples:
  lavo-zoo bench lra --device cpu --batch 1 --json benchmarks/results/lra_efficiency_cpu.json
  lavo-zoo bench lra --device cuda --batch 32 --json benchmarks/results/lra_efficiency_gpu.json
  lavo-zoo bench lra --lengths 4096 --attentions sdpa,lavo --rounds 5     # a machine whose speed drifts""")
@device_option
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--lengths", default="1024,2048,3072,4096", show_default=True)
@click.option("--attentions", default="", help="Comma-separated (default: every noncausal mechanism).")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--timeout", type=float, default=600, show_default=True, help="Seconds per measurement.")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run the whole sweep this many times, every mechanism next to softmax at each length; the table "
                   "gives medians and the range of the per-round ratios (for machines whose speed drifts).")
@json_records_option
@writes_records
def lra_cmd(device: str | None, batch: int, lengths: str, attentions: str, warmup: int, repeats: int,
            timeout: float, rounds: int, json_file: Path | None) -> None:
    """Training steps/s and peak memory of the LRA Text model at each length for every noncausal attention,
    relative to softmax (sdpa)."""
    from lavo_zoo.engine.env import describe_machine, machine, pick_device

    device = str(pick_device(device))
    length_list = parse_ints(lengths, "--lengths")
    names = [n for n in attentions.split(",") if n] or noncausal_attentions()
    names = sorted(names, key=lambda name: name != "sdpa")  # softmax first: the others are relative to it
    host = machine(device)  # ratios depend on the machine as well as the code: recorded with them
    click.echo(f"# {describe_machine(host)}", err=True)
    results = []
    for rnd, name, n in sweep(names, length_list, rounds):
        spec = {"attention": name, "length": n, "batch": batch, "device": device, "warmup": warmup,
                "repeats": repeats}
        r = run_isolated("lavo_zoo.bench.lra:measure", spec, timeout)
        record = {**spec, "round": rnd, **({"error": r["error"]} if "error" in r else {
            "steps_per_s": 1 / sorted(r["times_s"])[len(r["times_s"]) // 2],
            "peak_mib": r["peak_memory_bytes"] / 2**20, "memory_method": r["memory_method"]})}
        results.append(record)
        click.echo(json.dumps(record), err=True)
    click.echo(table(results, length_list))
    if json_file is not None:
        write_json(json_file, {"machine": host, "results": results})
