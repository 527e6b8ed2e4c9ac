"""``lavo-zoo bench attention``: one attention layer's median time after warm-up, peak memory and tokens/s against
length.

Timing: ``time.perf_counter`` around each run, ``torch.cuda.synchronize()`` before reading the clock on CUDA; the
median of ``--repeats`` runs after ``--warmup`` untimed ones.
Precision: ``--dtype bfloat16`` / ``float16`` is training's mixed precision by default (``--precision autocast``:
fp32 weights and inputs, the runs under ``torch.autocast`` to that dtype, backward outside it, as ``lavo-zoo train``
runs on CUDA); ``--precision pure`` casts the module and its inputs to the dtype instead.
Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` above what was allocated before the runs. On CPU every
measurement runs in fresh subprocesses (``--isolate``, the default there): one times the runs with the default
allocator; another, once the model, inputs and any streaming prefill exist, resets the kernel's resident-set
high-water mark (``/proc/self/clear_refs``) and reports VmHWM - VmRSS: the real peak of every allocation torch made
during one run. That one tells glibc to return large frees at once (``MALLOC_MMAP_THRESHOLD_``) so that reused heap
pages do not hide allocations; it is not timed, since that setting slows every allocation. Where clear_refs is not
available, ru_maxrss - RSS at the start is used (it then also counts set-up peaks).

Efficiency lengths (:mod:`lavo_zoo.bench.efficiency`, on unless ``--no-efficiency``): after the sweep, for every
mechanism but ``sdpa`` (added to the sweep when not listed), the shortest length at which it beats ``sdpa`` in time
and in peak memory, bisected between the swept lengths with further measurements of the same kind. The bisection
records are kept in the JSON beside the sweep's, marked ``"bisection": true``.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lavo_zoo.bench.efficiency import BASELINE, DEFAULT_STEP, DEFAULT_TOLERANCE, efficiency_search
from lavo_zoo.bench.timing import parse_ints, run_isolated, time_runs, write_json, writes_records
from lavo_zoo.config import parse_override
from lavo_zoo.errors import ConfigError, UsageError, ZooError
from lavo_zoo.options import device_option, json_records_option
from lavo_zoo.outputs import save_figure

MODES = ("fwd", "fwdbwd", "decode", "stream")
PATTERNS = ("causal", "noncausal", "cross")  # cross: queries and source of the same length (fwd and fwdbwd)
DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("autocast", "pure")  # how a half --dtype is applied: training's autocast, or the module cast to it
KERNEL_SWITCHES = ("LAVO_ZOO_TRITON", "LAVO_ZOO_FLEX")  # environment switches that force kernel fallbacks
DECODE_STEPS = 16  # tokens per timed decode run; the reported time is per token


# ------------------------------------------------------------------------------------------------- measurement
def _state_bytes(state: Any) -> int:
    """Bytes of the storage the state's tensors keep alive (a view of a larger tensor counts in full)."""
    import torch
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in vars(state).values() if isinstance(t, torch.Tensor)}
    return sum(storages.values())


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one (attention, length, mode) measurement described by ``spec``; returns the result record."""
    import torch

    from lavo_zoo.attention import build_attention
    from lavo_zoo.attention.ops.dispatch import kernels_used

    torch.manual_seed(0)
    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    attn = build_attention(spec["attention"], spec["embed_dim"], spec["heads"], spec["pattern"], **spec["options"])
    amp = None  # the autocast dtype: a half --dtype under training's autocast keeps fp32 weights and inputs
    if dtype != torch.float32 and spec.get("precision", "autocast") == "autocast":
        dtype, amp = torch.float32, dtype
    attn = attn.to(device=device, dtype=dtype)
    run, tokens, extra = _workload(attn, spec, device, dtype, amp)
    record = time_runs(run, spec["warmup"], spec["repeats"], device)
    median = statistics.median(record["times_s"])
    per = DECODE_STEPS if spec["mode"] == "decode" else 1  # decode: time per token
    used = kernels_used(attn)  # LAVO: which kernels ran
    kernels = {"kernels": used} if used is not None else {}
    return {"time_s": median / per, **record, **extra, "tokens_per_s": tokens / median,
            "threads": torch.get_num_threads(), **kernels}


def _workload(attn: Any, spec: dict[str, Any], device: Any, dtype: Any, amp: Any = None
              ) -> tuple[Callable[[], None], int, dict[str, Any]]:
    """The function one timed run calls, the tokens it processes, and a dict it may fill (state size). Weights and
    inputs are in ``dtype``; ``amp``: the autocast dtype the forward runs under (None: none)."""
    import torch

    from lavo_zoo.engine.precision import autocast

    B, T, D, mode = spec["batch"], spec["length"], spec["embed_dim"], spec["mode"]
    extra: dict[str, Any] = {}
    if mode in ("fwd", "fwdbwd"):
        attn.train(mode == "fwdbwd")
        x = torch.randn(B, T, D, device=device, dtype=dtype, requires_grad=mode == "fwdbwd")
        g = torch.randn(B, T, D, device=device, dtype=dtype)
        source = (torch.randn(B, T, D, device=device, dtype=dtype, requires_grad=mode == "fwdbwd")
                  if spec["pattern"] == "cross" else None)  # cross attention over a source of the same length
        inputs = {"context": source} if source is not None else {}

        def run() -> None:
            if mode == "fwd":
                with torch.no_grad(), autocast(amp, device):
                    attn(x, **inputs)
                return
            attn.zero_grad(set_to_none=True)
            x.grad = None
            if source is not None:
                source.grad = None
            with autocast(amp, device):
                y = attn(x, **inputs)
            y.backward(g.to(y.dtype))  # outside autocast, as training runs backward
        return run, B * T, extra
    attn.eval()
    chunk = spec["chunk_size"]
    if mode == "stream":  # T tokens in chunks from an empty state
        x = torch.randn(B, min(chunk, T), D, device=device, dtype=dtype)

        def run() -> None:
            state = None
            with torch.no_grad(), autocast(amp, device):
                for start in range(0, T, chunk):  # each chunk's output is dropped at once (consumed downstream)
                    state = attn(x[:, :min(chunk, T - start)], state=state, return_state=True)[1]
            extra["state_bytes"] = _state_bytes(state)
        return run, B * T, extra
    box = [None]  # decode: prefill to position T, then each run decodes DECODE_STEPS single tokens
    with torch.no_grad(), autocast(amp, device):
        for start in range(0, T, chunk):
            x = torch.randn(B, min(chunk, T - start), D, device=device, dtype=dtype)
            box[0] = attn(x, state=box[0], return_state=True)[1]
    extra["state_bytes"] = _state_bytes(box[0])
    step = torch.randn(B, 1, D, device=device, dtype=dtype)

    def run() -> None:
        with torch.no_grad(), autocast(amp, device):
            for _ in range(DECODE_STEPS):
                box[0] = attn(step, state=box[0], return_state=True)[1]
    return run, B * DECODE_STEPS, extra


# ------------------------------------------------------------------------------------------------- CLI helpers
def _parse_options(items: tuple[str, ...], names: list[str]) -> dict[str, dict[str, Any]]:
    """``-o key=value`` (every attention that has the option) or ``-o name.key=value`` -> per-attention options."""
    from lavo_zoo.attention import attention_info

    known = {n: attention_info(n).options for n in names}
    per: dict[str, dict[str, Any]] = {n: {} for n in names}
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-o/--option takes [ATTENTION.]KEY=VALUE, got '{item}'")
        try:
            _, value = parse_override(item)  # as the config overrides: YAML, 1e-5 a number
        except ConfigError as e:
            raise UsageError(f"-o {item}: {e}") from None
        target, _, key = key.rpartition(".")
        if target and target not in names:
            raise UsageError(f"-o {item}: attention '{target}' is not in --attentions ({', '.join(names)})")
        takers = [n for n in ([target] if target else names) if key in known[n]]
        if not takers:
            valid = sorted({k for n in ([target] if target else names) for k in known[n]})
            raise UsageError(f"-o {item}: no selected attention has option '{key}'; options: {', '.join(valid)}")
        for n in takers:
            per[n][key] = value
    return per


def _format(r: dict[str, Any]) -> str:
    head = f"{r['attention']:<12} {r['mode']:<7} T={r['length']:<9}"
    mark = "  (bisection)" if r.get("bisection") else ""
    if "error" in r:
        return f"{head} {r['error']}{mark}"
    unit = "per token" if r["mode"] == "decode" else ""
    state = f"  state {r['state_bytes'] / 2**10:.1f} KiB" if "state_bytes" in r else ""
    kernels = f"  [{r['kernels']}]" if "kernels" in r else ""
    return (f"{head} {r['time_s'] * 1e3:10.3f} ms {unit:<9} {r['tokens_per_s']:12.0f} tok/s  "
            f"peak {r['peak_memory_bytes'] / 2**20:9.1f} MiB{state}{kernels}{mark}")


# ------------------------------------------------------------------------------------------------- sweeps
class Sweep:
    """Measures (attention, length) with one command's settings, each pair once (isolated or in process), printing
    every record as it finishes and keeping them all in ``records``."""

    def __init__(self, settings: dict[str, Any], options: dict[str, dict[str, Any]], isolate: bool,
                 timeout: float | None, echo: Callable[[str], None]) -> None:
        self.settings, self.options, self.isolate, self.timeout, self.echo = settings, options, isolate, timeout, echo
        self.records: list[dict[str, Any]] = []
        self._done: dict[tuple[str, int], dict[str, Any]] = {}

    def __call__(self, name: str, length: int, bisection: bool = False) -> dict[str, Any]:
        if (name, length) in self._done:
            return self._done[name, length]
        spec = {**self.settings, "attention": name, "length": length, "options": self.options[name]}
        if self.isolate:
            record = run_isolated("lavo_zoo.bench.attention:measure", spec, self.timeout)
        else:
            try:
                record = measure(spec)
            except Exception as e:  # noqa: BLE001 - e.g. out of memory: recorded, the sweep goes on
                record = {"error": f"{type(e).__name__}: {e}"}
        record = {"attention": name, "mode": spec["mode"], "length": length, "options": self.options[name],
                  **({"bisection": True} if bisection else {}), **record}
        self._done[name, length] = record
        self.records.append(record)
        self.echo(_format(record))
        return record


def efficiency_lengths(sweep: Sweep, names: list[str], lengths: list[int], tolerance: float = DEFAULT_TOLERANCE,
                       step: int = DEFAULT_STEP) -> dict[str, dict[str, Any]]:
    """{attention: {"time": ..., "memory": ...}} for every name but the baseline, against the baseline measured in
    the same sweep (:func:`lavo_zoo.bench.efficiency.efficiency_search`); lengths outside ``lengths`` are measured
    (both attentions) and marked as bisection records.

    Args:
        sweep: the sweep that measured ``lengths`` (and measures the bisection points).
        names: the sweep's attentions (the baseline among them is skipped).
        lengths: the lengths already swept.
        tolerance: the bisection stops when the bracket is within this fraction of its lower end.
        step: the lengths measured are multiples of ``step``.
    """
    swept = set(lengths)
    out = {}
    for name in names:
        if name == BASELINE:
            continue

        def pair(length: int, name: str = name) -> dict[str, Any]:
            extra = length not in swept
            return {"attention": sweep(name, length, extra), "baseline": sweep(BASELINE, length, extra)}
        out[name] = {**efficiency_search(pair, lengths, tolerance, step), "baseline": BASELINE}
    return out


def efficiency_table(lengths: dict[str, dict[str, Any]]) -> list[str]:
    """The efficiency lengths as aligned text lines (a header and one line per attention)."""
    width = max([9, *map(len, lengths)])
    lines = [f"{'attention':<{width}}  {'faster than softmax from':<28}  smaller than softmax from"]
    for name, found in lengths.items():
        lines.append(f"{name:<{width}}  {found['time']['text']:<28}  {found['memory']['text']}")
    return lines


def run_sweep(names: list[str], lengths: list[int], options: dict[str, dict[str, Any]], settings: dict[str, Any],
              isolate: bool, timeout: float | None = None, efficiency: dict[str, Any] | None = None,
              echo: Callable[[str], None] = click.echo) -> dict[str, Any]:
    """Measure every (name, length) with ``settings`` (mode, pattern, device, dtype, precision (default autocast),
    embed_dim, heads, batch, repeats, warmup, chunk_size), then, with ``efficiency`` (``{"tolerance", "step"}``),
    the efficiency lengths against ``sdpa``, added to the sweep when not in ``names``. Prints as it goes; returns
    the JSON the command writes: ``settings`` (with the machine), ``results`` and ``efficiency_lengths``.

    Args:
        names: the attentions to measure (registry names).
        lengths: the sequence lengths.
        options: each attention's options by name (``{}`` for its defaults).
        settings: the measurement's settings (above).
        isolate: measure each pair in a fresh process (its own memory peak).
        timeout: seconds per isolated measurement, or None (no limit).
        efficiency: ``{"tolerance", "step"}`` to find the efficiency lengths too, or None.
        echo: where the progress lines go.
    """
    from lavo_zoo.engine.env import describe_machine, machine

    names, options = list(names), dict(options)
    host = machine(settings["device"])  # figures from machines with other vector units are not comparable
    switches = {k: os.environ[k] for k in KERNEL_SWITCHES if k in os.environ}  # forced kernel fallbacks
    settings = {**settings, "machine": host, "kernel_switches": switches}
    added = efficiency is not None and BASELINE not in names and bool(names)
    if added:
        names.append(BASELINE)
        options[BASELINE] = {}
    if efficiency is not None:
        settings["efficiency"] = {"baseline": BASELINE, "tolerance": efficiency["tolerance"],
                                  "step": efficiency["step"], "baseline_added": added}
    precision = "" if settings["dtype"] == "float32" else (
        " (pure: module and inputs cast)" if settings.get("precision") == "pure" else " autocast (fp32 weights)")
    echo(f"# {settings['mode']} {settings['pattern']} D={settings['embed_dim']} H={settings['heads']} "
         f"B={settings['batch']} {settings['dtype']}{precision} on {settings['device']}; median of "
         f"{settings['repeats']} after {settings['warmup']} warm-up; "
         f"{'isolated processes' if isolate else 'in process'}")
    echo(f"# {describe_machine(host)}")
    if "lavo" in names or switches:
        echo("# LAVO's kernels in [brackets] on its rows ('triton' on CUDA, 'recompute' on CPU)"
             + (f"; {' '.join(f'{k}={v}' for k, v in switches.items())}" if switches else ""))
    if added:
        echo(f"# {BASELINE} added to the sweep: the efficiency lengths are measured against it "
             "(--no-efficiency leaves it out)")
    sweep = Sweep(settings, options, isolate, timeout, echo)
    for name in names:
        for length in lengths:
            sweep(name, length)
    data: dict[str, Any] = {"settings": settings, "results": sweep.records}
    if efficiency is not None and len(names) > 1:
        found = efficiency_lengths(sweep, names, lengths, efficiency["tolerance"], efficiency["step"])
        data["efficiency_lengths"] = found
        grid = f", lengths multiples of {efficiency['step']}" if efficiency["step"] > 1 else ""
        echo(f"# efficiency lengths: the shortest length at which each beats {BASELINE} ({settings['mode']}), "
             f"bisected to within {efficiency['tolerance'] * 100:g}%{grid}")
        for line in efficiency_table(found):
            echo(line)
    return data


def plot_results(results: list[dict[str, Any]], path: Path) -> None:
    """Time and peak memory against length (log-log), one line per attention."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r["attention"] for r in results):
        ok = sorted((r for r in results if r["attention"] == name and "error" not in r), key=lambda r: r["length"])
        if ok:
            lengths = [r["length"] for r in ok]
            axes[0].plot(lengths, [r["time_s"] for r in ok], "o-", label=name)
            axes[1].plot(lengths, [max(r["peak_memory_bytes"], 1) / 2**20 for r in ok], "o-", label=name)
    mode = results[0]["mode"] if results else ""
    for ax, label in zip(axes, ("time per token (s)" if mode == "decode" else "time (s)", "peak memory (MiB)")):
        ax.set(xscale="log", yscale="log", xlabel="sequence length" if mode != "decode" else "context position",
               ylabel=label, title=f"{label.split(' (')[0]} ({mode})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    try:
        save_figure(fig, path, option="--plot", dpi=120)
    finally:
        plt.close(fig)


# ------------------------------------------------------------------------------------------------- commands
@click.command("attention", epilog="""\b
Examples:
  lavo-zoo bench attention --attentions lavo,sdpa --lengths 1024,4096,16384 --mode fwdbwd
  lavo-zoo bench attention --attentions lavo,performer --lengths 256,1024,4096,16384 --efficiency-tolerance 0.05
  lavo-zoo bench attention --attentions lavo --lengths 1024,65536 --mode decode --no-efficiency
  lavo-zoo bench attention --attentions lavo --lengths 16384,1048576 --mode stream --chunk-size 16384 --no-efficiency
  lavo-zoo bench attention --attentions lavo,local -o window_size=64 -o lavo.num_bases=32 --lengths 4096
  lavo-zoo bench attention --device cuda --dtype bfloat16 --lengths 8192,32768 --json r.json --plot r.png
  lavo-zoo bench attention --device cuda --dtype bfloat16 --precision pure --mode decode --lengths 65536""")
@click.option("--attentions", default="lavo,sdpa,local", show_default=True,
              help="Comma-separated registered attentions (see `lavo-zoo list attentions`).")
@click.option("--lengths", default="1024,4096,16384", show_default=True,
              help="Comma-separated sequence lengths (decode: context positions; stream: total tokens).")
@click.option("--mode", type=click.Choice(MODES), default="fwdbwd", show_default=True,
              help="fwd (no grad), fwdbwd (forward + backward), decode (per-token latency at a context position, "
                   "after a streamed prefill), stream (LENGTH tokens in --chunk-size chunks, carrying the state).")
@click.option("--pattern", type=click.Choice(PATTERNS), default="causal", show_default=True,
              help="cross: attention over a source as long as the queries (fwd and fwdbwd only).")
@device_option
@click.option("--dtype", type=click.Choice(DTYPES), default="float32", show_default=True,
              help="Compute precision. bfloat16 / float16: see --precision.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="autocast", show_default=True,
              help="How a half --dtype is applied: autocast = training's mixed precision (fp32 weights and inputs, "
                   "the forward under torch.autocast to --dtype, as `lavo-zoo train` runs on CUDA); pure = the "
                   "module and its inputs cast to --dtype (half-precision inference).")
@click.option("--embed-dim", type=click.IntRange(1), default=768, show_default=True)
@click.option("--heads", type=click.IntRange(1), default=12, show_default=True)
@click.option("--batch", type=click.IntRange(1), default=1, show_default=True)
@click.option("--repeats", type=click.IntRange(1), default=5, show_default=True, help="Timed runs (median).")
@click.option("--warmup", type=click.IntRange(0), default=1, show_default=True, help="Untimed runs first.")
@click.option("--chunk-size", type=click.IntRange(1), default=16384, show_default=True,
              help="Chunk length for stream mode and for the decode prefill.")
@click.option("-o", "--option", "options", multiple=True, metavar="[ATTN.]KEY=VALUE",
              help="Attention option, for every selected attention that has it or only ATTN (repeatable).")
@click.option("--isolate/--no-isolate", default=None,
              help="Run each measurement in a fresh subprocess (default on CPU: needed for exact peak memory).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds per isolated measurement before it is recorded as a timeout.")
@click.option("--efficiency/--no-efficiency", default=True, show_default=True,
              help="After the sweep, find each attention's efficiency lengths: the shortest length at which it "
                   f"beats {BASELINE} in time and in peak memory, bisected between the swept lengths ({BASELINE} "
                   "is added to the sweep when not listed).")
@click.option("--efficiency-tolerance", type=click.FloatRange(min=0), default=DEFAULT_TOLERANCE, show_default=True,
              help="Bisect until the bracket [lo, hi] is within this fraction of lo (or --efficiency-step); the "
                   "length reported is hi, the shortest measured length at which it wins.")
@click.option("--efficiency-step", type=click.IntRange(1), default=DEFAULT_STEP, show_default=True,
              help="Bisection lengths are multiples of this (e.g. 64 for block kernels); it also ends the "
                   "bisection once the bracket is this narrow.")
@json_records_option
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG of time and peak memory against length (log-log), one line per attention.")
@writes_records
def attention_cmd(attentions: str, lengths: str, mode: str, pattern: str, device: str | None, dtype: str,
                  precision: str, embed_dim: int, heads: int, batch: int, repeats: int, warmup: int, chunk_size: int,
                  options: tuple[str, ...], isolate: bool | None, timeout: float | None, efficiency: bool,
                  efficiency_tolerance: float, efficiency_step: int, json_file: Path | None,
                  plot_file: Path | None) -> None:
    """Time attention layers (projections included) against sequence length: median of the timed runs,
    tokens/s and peak memory of each (attention, length), printed as they finish; then each attention's efficiency
    lengths against sdpa (the shortest length at which it is faster, and at which it needs less peak memory)."""
    from lavo_zoo.attention import attention_info, build_attention

    names = [n.strip() for n in attentions.split(",") if n.strip()]
    if not names:
        raise UsageError("--attentions needs at least one attention name")
    infos = {n: attention_info(n) for n in names}  # unknown names: UsageError with a did-you-mean
    for n, info in infos.items():
        if pattern not in info.patterns:
            raise UsageError(f"attention '{n}' does not support pattern '{pattern}' (it supports "
                             f"{', '.join(info.patterns)})")
        if mode in ("decode", "stream") and not info.streaming:
            raise UsageError(f"--mode {mode} needs a streaming attention; '{n}' has no streaming state")
    if mode in ("decode", "stream") and pattern != "causal":
        raise UsageError(f"--mode {mode} needs --pattern causal")
    if embed_dim % heads:
        raise UsageError(f"--embed-dim {embed_dim} must be a multiple of --heads {heads}")
    length_list = parse_ints(lengths, "--lengths")
    per_options = _parse_options(options, names)
    from lavo_zoo.engine.env import pick_device

    device = str(pick_device(device))
    isolate = device == "cpu" if isolate is None else isolate
    settings = {"mode": mode, "pattern": pattern, "device": device, "dtype": dtype, "precision": precision,
                "embed_dim": embed_dim, "heads": heads, "batch": batch, "repeats": repeats, "warmup": warmup,
                "chunk_size": chunk_size}
    for n in names:  # build each once so that a bad option fails now, as a usage error
        try:
            build_attention(n, embed_dim, heads, pattern, **per_options[n])
        except (ValueError, TypeError) as e:
            raise UsageError(f"attention '{n}' with options {per_options[n]}: {e}") from None
    search = {"tolerance": efficiency_tolerance, "step": efficiency_step} if efficiency else None
    data = run_sweep(names, length_list, per_options, settings, isolate, timeout, search)
    if json_file is not None:
        write_json(json_file, data)
    if plot_file is not None:
        plot_results(data["results"], plot_file)
    if all("error" in r for r in data["results"]):
        raise ZooError("every measurement failed (see the lines above)")
