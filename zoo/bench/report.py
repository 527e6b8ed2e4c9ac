"""``lavo-zoo bench report``: the tables of benchmarks/RESULTS.md from the JSON files that ``lavo-zoo bench
attention --json`` writes: the performance-goal table of the CPU measurements (benchmarks/run_cpu.sh), or with
``--zoo`` time / peak memory per attention and length.
"""
from __future__ import annotations

import json
from pathlib import Path

import click


def _records(path: Path) -> dict[tuple[str, int], dict]:
    return {(r["attention"], r["length"]): r for r in json.loads(path.read_text())["results"]}


def _short_long(path: Path) -> tuple[dict, dict]:
    """LAVO's records at the shortest and the longest length of one file."""
    r = _records(path)
    lengths = sorted(n for a, n in r if a == "lavo")
    return r["lavo", lengths[0]], r["lavo", lengths[-1]]


def goal_table(folder: Path) -> None:
    """Print the goals table of benchmarks/RESULTS.md (measurement, ratio, goal, the figures behind it) from the
    benchmark JSON in ``folder``."""
    mib = 2**20
    rows = []
    r = _records(folder / "fwdbwd_16k.json")
    lavo, sdpa = r["lavo", 16384], r["sdpa", 16384]
    rows.append(("causal fwd+bwd 16K: sdpa time / LAVO time", sdpa["time_s"] / lavo["time_s"], ">= 4",
                 (f"LAVO {lavo['time_s']:.2f} s, {lavo['peak_memory_bytes'] / mib:.0f} MiB; "
                  f"sdpa {sdpa['time_s']:.2f} s, {sdpa['peak_memory_bytes'] / mib:.0f} MiB")))
    a, b = _short_long(folder / "scaling.json")
    rows.append(("LAVO fwd+bwd time(32K) / time(16K)", b["time_s"] / a["time_s"], "<= 2.3",
                 f"{a['time_s']:.2f} s -> {b['time_s']:.2f} s"))
    rows.append(("LAVO fwd+bwd peak memory(32K) / (16K)", b["peak_memory_bytes"] / a["peak_memory_bytes"], "<= 2.3",
                 f"{a['peak_memory_bytes'] / mib:.0f} MiB -> {b['peak_memory_bytes'] / mib:.0f} MiB"))
    a, b = _short_long(folder / "stream_1m.json")
    rows.append(("LAVO stream peak memory: whole stream / one chunk", b["peak_memory_bytes"] / a["peak_memory_bytes"],
                 "<= 1.25", (f"{a['peak_memory_bytes'] / mib:.0f} MiB vs {b['peak_memory_bytes'] / mib:.0f} MiB; "
                             f"{b['length']:,} tokens in {b['time_s']:.0f} s ({b['tokens_per_s']:.0f} tok/s); "
                             f"state {b['state_bytes'] / 2**10:.0f} KiB")))
    a, b = _short_long(folder / "decode.json")
    rows.append(("LAVO decode time/token at 65,536 / at 1,024", b["time_s"] / a["time_s"], "<= 1.25",
                 f"{a['time_s'] * 1e3:.2f} ms vs {b['time_s'] * 1e3:.2f} ms; state {b['state_bytes'] / 2**10:.0f} KiB"))
    click.echo("| goal | measured | target | met | figures |\n|---|---|---|---|---|")
    for name, value, target, detail in rows:
        op, bound = target.split()
        met = value >= float(bound) if op == ">=" else value <= float(bound)
        click.echo(f"| {name} | {value:.2f} | {target} | {'yes' if met else 'NO'} | {detail} |")


def zoo_table(files: list[Path]) -> None:
    """One row per (attention, pattern), one column per length: median time / peak memory (or why it is absent)."""
    cells: dict[tuple[str, str], dict[int, str]] = {}
    lengths: set[int] = set()
    for path in files:
        data = json.loads(path.read_text())
        pattern = data["settings"]["pattern"]
        for r in data["results"]:
            if r.get("bisection"):  # the efficiency search's extra lengths: the table keeps the sweep's columns
                continue
            lengths.add(r["length"])
            text = (f"{r['time_s']:.2f} s / {r['peak_memory_bytes'] / 2**20:.0f} MiB" if r.get("time_s") is not None
                    else r.get("error", "failed"))
            cells.setdefault((r["attention"], pattern), {})[r["length"]] = text
    cols = sorted(lengths)
    heads = [f"T={n // 1024}K" if n % 1024 == 0 else f"T={n}" for n in cols]
    click.echo("| attention | pattern | " + " | ".join(heads) + " |")
    click.echo("|---|---|" + "---|" * len(cols))
    for (name, pattern), row in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        click.echo(f"| {name} | {pattern} | " + " | ".join(row.get(n, "not run") for n in cols) + " |")


@click.command("report", epilog="""\b
Examples:
  lavo-zoo bench report benchmarks/results
  lavo-zoo bench report --zoo benchmarks/results/zoo_causal.json benchmarks/results/zoo_noncausal.json""")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--zoo", is_flag=True, help="PATHS are `bench attention --json` files: one table of all of them.")
def report_cmd(paths: tuple[Path, ...], zoo: bool) -> None:
    """Print the goal table of the CPU measurements in folder PATH (default benchmarks/results), or with --zoo the
    time / peak memory table of the given JSON files."""
    if zoo:
        zoo_table(list(paths))
    else:
        goal_table(paths[0] if paths else Path("benchmarks/results"))
