"""``lavo-zoo bench decode``: the time of one cached decoding step of a TransformerDecoder
(lavo_zoo.nn.transformer) at a given target prefix length and source length, LAVO at both decoder sites (causal
self + cross) against sdpa at both.

For each (attention, prefix P, source S): random memory [B, S, D] -> ``init_cache`` (the cross caches, once), a
prefill of P target positions in one ``step``, then the timed runs: ``--steps`` single-token steps, each from that
same cache (so every timed step is at prefix P exactly). Every case is timed in each of ``--rounds`` interleaved
rounds (``--steps`` steps after ``--warmup`` untimed ones; CUDA is synchronised before each clock read) and the
median of the round medians is reported, with the decoder cache's size and the time as a ratio to the (first prefix,
first source) time of the same attention. LAVO's step does not depend on P or S (a
constant-size self state and an [H, d] cross memory); sdpa's reads its whole KV cache and the source's K/V.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lavo_zoo.bench.timing import parse_ints, time_runs, write_json, writes_records
from lavo_zoo.options import device_option, json_records_option

if TYPE_CHECKING:
    import torch

    from lavo_zoo.nn.transformer import DecoderCache, TransformerDecoder


def cache_bytes(cache: DecoderCache) -> int:
    """Bytes of the tensor storages the cache keeps alive (each counted once)."""
    import torch

    seen: dict[int, int] = {}

    def walk(obj) -> None:
        if isinstance(obj, torch.Tensor):
            seen[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
        elif isinstance(obj, (list, tuple)):
            for o in obj:
                walk(o)
        elif hasattr(obj, "__dataclass_fields__"):
            for name in obj.__dataclass_fields__:
                walk(getattr(obj, name))

    walk(cache)
    return sum(seen.values())


def prepare(decoder: TransformerDecoder, batch: int, prefix: int, source: int, device: torch.device,
            dtype: torch.dtype) -> DecoderCache:
    """The cache after init_cache on a random source of ``source`` tokens and a prefill of ``prefix`` positions.

    Args:
        decoder: the decoder stack.
        batch: the batch size.
        prefix: positions decoded before the timed steps.
        source: the source's tokens.
        device: where the inputs are made.
        dtype: the inputs' dtype.
    """
    import torch

    D = decoder.embed_dim
    with torch.no_grad():
        cache = decoder.init_cache(torch.randn(batch, source, D, device=device, dtype=dtype))
        return decoder.step(torch.randn(batch, prefix, D, device=device, dtype=dtype), cache)[1]


def time_steps(decoder: TransformerDecoder, cache: DecoderCache, steps: int, warmup: int) -> list[float]:
    """Seconds of each of ``steps`` single-token steps from the same cache, after ``warmup`` untimed ones.

    Args:
        decoder: the decoder stack.
        cache: the cache every step starts from (:func:`prepare`).
        steps: the timed steps.
        warmup: the untimed steps before them.
    """
    import torch

    p = next(decoder.parameters())
    x = torch.randn(cache.batch_size, 1, decoder.embed_dim, device=p.device, dtype=p.dtype)
    with torch.no_grad():
        return time_runs(lambda: decoder.step(x, cache), warmup, steps, p.device, memory=False)["times_s"]


@click.command("decode", epilog="""\b
Examples:
  lavo-zoo bench decode --device cuda --batch 16 --json benchmarks/results/enc_dec_decode_gpu.json
  OMP_NUM_THREADS=1 lavo-zoo bench decode --device cpu --batch 4 --layers 2 --json runs/decode.json""")
@click.option("--attentions", default="lavo,sdpa", show_default=True, help="Mechanisms at both decoder sites.")
@click.option("--prefixes", default="64,4096", show_default=True, help="Target prefix lengths.")
@click.option("--sources", default="512,8192", show_default=True, help="Source lengths.")
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--layers", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--embed-dim", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--heads", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--ffn-dim", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--num-bases", type=click.IntRange(min=1), default=64, show_default=True, help="LAVO's r.")
@click.option("--window-size", type=click.IntRange(min=1), default=16, show_default=True, help="LAVO's w.")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Timed steps per case and round.")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Untimed steps before each case's timed ones.")
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True,
              help="Interleaved rounds; the median of their medians.")
@device_option
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True)
@json_records_option
@writes_records
def decode_cmd(attentions: str, prefixes: str, sources: str, batch: int, layers: int, embed_dim: int, heads: int,
               ffn_dim: int, num_bases: int, window_size: int, steps: int, warmup: int, rounds: int,
               device: str | None, dtype: str, json_file: Path | None) -> None:
    """Time one cached decoding step of an encoder-decoder decoder at each (prefix, source), LAVO at both decoder
    sites against sdpa at both."""
    import torch

    from lavo_zoo.engine.env import describe_machine, machine, pick_device
    from lavo_zoo.nn.transformer import TransformerDecoder

    dev, dt = pick_device(device), getattr(torch, dtype)
    prefix_list, source_list = parse_ints(prefixes, "--prefixes"), parse_ints(sources, "--sources")
    host = machine(dev)
    click.echo(f"# decode step: {layers} layers, D={embed_dim}, H={heads}, FFN={ffn_dim}, B={batch}, LAVO "
               f"r={num_bases} w={window_size}, {dtype} on {dev}; median over {rounds} interleaved rounds of the "
               f"median of {steps} steps (after {warmup} untimed)")
    click.echo(f"# {describe_machine(host)}")
    click.echo("| attention | prefix | source | ms / step | vs first | cache MiB |\n|---|---:|---:|---:|---:|---:|")
    cases: list[tuple[str, Any, int, int, Any]] = []  # (name, decoder, prefix, source, cache)
    for name in [n for n in attentions.split(",") if n]:
        spec = {"name": name, "num_bases": num_bases, "window_size": window_size} if name == "lavo" else name
        torch.manual_seed(0)
        decoder = TransformerDecoder(layers, embed_dim, heads, ffn_dim, self_attention=spec,
                                     cross_attention=spec).to(device=dev, dtype=dt).eval()
        cases += [(name, decoder, p, s, prepare(decoder, batch, p, s, dev, dt))
                  for p in prefix_list for s in source_list]
    # rounds over every case, interleaved, so that a change of machine load hits all cases alike
    per_round: list[list[float]] = [[] for _ in cases]
    for _ in range(rounds):
        for i, (_, decoder, _, _, cache) in enumerate(cases):
            per_round[i].append(statistics.median(time_steps(decoder, cache, steps, warmup)))
    base: dict[str, float] = {}
    records = []
    for (name, _, prefix, source, cache), medians in zip(cases, per_round):
        step_ms = 1e3 * statistics.median(medians)
        base.setdefault(name, step_ms)
        rec = {"attention": name, "prefix": prefix, "source": source, "step_ms": step_ms,
               "round_medians_ms": [1e3 * r for r in medians], "ratio": step_ms / base[name],
               "cache_bytes": cache_bytes(cache)}
        records.append(rec)
        click.echo(f"| {name} | {prefix} | {source} | {step_ms:.3f} | {rec['ratio']:.2f} | "
                   f"{rec['cache_bytes'] / 2 ** 20:.2f} |")
    if json_file is not None:
        write_json(json_file, {"machine": host, "settings": {"batch": batch, "layers": layers,
                                                             "embed_dim": embed_dim, "heads": heads,
                                                             "ffn_dim": ffn_dim, "num_bases": num_bases,
                                                             "window_size": window_size, "dtype": dtype},
                               "records": records})
