"""Encoder-decoder decoding benchmark (issue 11): the time of one cached decoding step of a TransformerDecoder
(lavo_zoo.nn.transformer) at a given target prefix length and source length, LAVO at both decoder sites (causal
self + cross) against sdpa at both.

For each (attention, prefix P, source S): random memory [B, S, D] -> ``init_cache`` (the cross caches, once), a
prefill of P target positions in one ``step``, then the timed runs: ``--steps`` single-token steps, each from that
same cache (so every timed step is at prefix P exactly). Every case is timed in each of ``--rounds`` interleaved
rounds (``--steps`` steps after ``--warmup`` untimed ones; CUDA is synchronised before each clock read) and the
median of the round medians is reported, with the decoder cache's size and the time as a ratio to the (first prefix,
first source) time of the same attention. LAVO's step does not depend on P or S (a
constant-size self state and an [H, d] cross memory); sdpa's reads its whole KV cache and the source's K/V.

    python benchmarks/decode.py --device cuda --batch 16 --json benchmarks/results/enc_dec_decode_gpu.json
    OMP_NUM_THREADS=1 python benchmarks/decode.py --device cpu --batch 4 --layers 2 --json /tmp/decode.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

from lavo_zoo.nn.transformer import DecoderCache, TransformerDecoder


def cache_bytes(cache: DecoderCache) -> int:
    """Bytes of the tensor storages the cache keeps alive (each counted once)."""
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
    """The cache after init_cache on a random source of ``source`` tokens and a prefill of ``prefix`` positions."""
    D = decoder.embed_dim
    with torch.no_grad():
        cache = decoder.init_cache(torch.randn(batch, source, D, device=device, dtype=dtype))
        return decoder.step(torch.randn(batch, prefix, D, device=device, dtype=dtype), cache)[1]


def time_steps(decoder: TransformerDecoder, cache: DecoderCache, steps: int, warmup: int) -> list[float]:
    """Seconds of each of ``steps`` single-token steps from the same cache, after ``warmup`` untimed ones."""
    p = next(decoder.parameters())
    sync = torch.cuda.synchronize if p.device.type == "cuda" else (lambda: None)
    x = torch.randn(cache.batch_size, 1, decoder.embed_dim, device=p.device, dtype=p.dtype)
    times = []
    with torch.no_grad():
        for i in range(warmup + steps):
            sync()
            start = time.perf_counter()
            decoder.step(x, cache)
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Examples:\n" + __doc__.split("\n\n")[-1].rstrip('"'))
    parser.add_argument("--attentions", default="lavo,sdpa", help="mechanisms at both decoder sites")
    parser.add_argument("--prefixes", default="64,4096")
    parser.add_argument("--sources", default="512,8192")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn-dim", type=int, default=2048)
    parser.add_argument("--num-bases", type=int, default=64, help="LAVO's r")
    parser.add_argument("--window-size", type=int, default=16, help="LAVO's w")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case and round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each case's timed ones")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median of their medians")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--json", default=None, help="write every record here")
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    prefixes = [int(p) for p in args.prefixes.split(",")]
    sources = [int(s) for s in args.sources.split(",")]
    records = []
    print(f"# decode step: {args.layers} layers, D={args.embed_dim}, H={args.heads}, FFN={args.ffn_dim}, "
          f"B={args.batch}, LAVO r={args.num_bases} w={args.window_size}, {args.dtype} on {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f" ({platform.processor()})")
          + f", torch {torch.__version__}, {torch.get_num_threads()} threads; median over {args.rounds} interleaved "
          f"rounds of the median of {args.steps} steps (after {args.warmup} untimed)")
    print("| attention | prefix | source | ms / step | vs first | cache MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    cases = []  # (name, decoder, prefix, source, cache)
    for name in args.attentions.split(","):
        spec = {"name": name, "num_bases": args.num_bases, "window_size": args.window_size} if name == "lavo" \
            else name
        torch.manual_seed(0)
        decoder = TransformerDecoder(args.layers, args.embed_dim, args.heads, args.ffn_dim, self_attention=spec,
                                     cross_attention=spec).to(device=device, dtype=dtype).eval()
        cases += [(name, decoder, p, s, prepare(decoder, args.batch, p, s, device, dtype))
                  for p in prefixes for s in sources]
    # rounds over every case, interleaved, so that a change of machine load hits all cases alike
    per_round: list[list[float]] = [[] for _ in cases]
    for _ in range(args.rounds):
        for i, (_, decoder, _, _, cache) in enumerate(cases):
            per_round[i].append(statistics.median(time_steps(decoder, cache, args.steps, args.warmup)))
    base: dict[str, float] = {}
    for (name, _, prefix, source, cache), rounds in zip(cases, per_round):
        step_ms = 1e3 * statistics.median(rounds)
        base.setdefault(name, step_ms)
        rec = {"attention": name, "prefix": prefix, "source": source, "step_ms": step_ms,
               "round_medians_ms": [1e3 * r for r in rounds], "ratio": step_ms / base[name],
               "cache_bytes": cache_bytes(cache)}
        records.append(rec)
        print(f"| {name} | {prefix} | {source} | {step_ms:.3f} | {rec['ratio']:.2f} | "
              f"{rec['cache_bytes'] / 2 ** 20:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "device": str(device), "torch": torch.__version__,
                       "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
