"""LRA's efficiency table: training steps/s and peak memory of the LRA Text model (Skyformer's 2 x 64 encoder,
byte vocabulary, 2 classes) at 1K-4K tokens for every registry attention that supports the noncausal pattern,
relative to softmax (sdpa). One training step = forward, backward and AdamW update of a batch of random bytes.

Each (attention, length) runs in fresh subprocesses (:func:`lavo_zoo.bench.run_isolated`: one timed with the
default allocator, one for peak memory); timing and peak memory come from :mod:`lavo_zoo.bench` (median of
``--repeats`` steps after ``--warmup``; CUDA: max_memory_allocated above the start; CPU: the resident-set
high-water mark above the start, reset once the model, optimiser state and batch exist).

    python benchmarks/lra_efficiency.py --device cpu --batch 1 --json benchmarks/results/lra_efficiency_cpu.json
    python benchmarks/lra_efficiency.py --device cuda --batch 32 --json benchmarks/results/lra_efficiency_gpu.json
    python benchmarks/lra_efficiency.py --lengths 4096 --attentions sdpa,lavo --rounds 5   # a VM whose speed drifts
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from lavo_zoo.bench import run_isolated
from lavo_zoo.engine.env import describe_machine, machine

OPTIONS = {"lavo": {"num_bases": 32, "window_size": 256}}  # the paper's LRA setting; other mechanisms: defaults


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from lavo_zoo.attention import AttentionSpec
    from lavo_zoo.bench import _time
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
    return _time(step, {"warmup": spec["warmup"], "repeats": spec["repeats"]}, device)


def noncausal_attentions() -> list[str]:
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


def main() -> None:
    if "--worker" in sys.argv:
        spec = json.loads(sys.stdin.read())
        try:
            print(json.dumps(measure(spec)))
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: recorded, the sweep goes on
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--lengths", default="1024,2048,3072,4096")
    p.add_argument("--attentions", default="", help="comma-separated (default: every noncausal mechanism)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole sweep this many times, every mechanism next to softmax at each length; the "
                        "table gives medians and the range of the per-round ratios (for machines whose speed drifts)")
    p.add_argument("--json", default="")
    args = p.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    names = args.attentions.split(",") if args.attentions else noncausal_attentions()
    names = sorted(names, key=lambda name: name != "sdpa")  # softmax first: the others are relative to it
    host = machine(args.device)  # ratios depend on the machine as well as the code: recorded with them
    print(f"# {describe_machine(host)}", file=sys.stderr, flush=True)
    results = []
    for rnd, name, n in sweep(names, lengths, args.rounds):
        spec = {"attention": name, "length": n, "batch": args.batch, "device": args.device,
                "warmup": args.warmup, "repeats": args.repeats}
        r = run_isolated(spec, args.timeout, [sys.executable, __file__, "--worker"])
        record = {**spec, "round": rnd, **({"error": r["error"]} if "error" in r else {
            "steps_per_s": 1 / sorted(r["times_s"])[len(r["times_s"]) // 2],
            "peak_mib": r["peak_memory_bytes"] / 2**20, "memory_method": r["memory_method"]})}
        results.append(record)
        print(json.dumps(record), file=sys.stderr, flush=True)
    print(table(results, lengths))
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": host, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
