"""``lavo-zoo bench summarization``: training throughput, peak memory and cached decoding speed of summarization
configs against source length.

Training: one source of L random tokens and a 48-token summary per step: forward, backward, AdamW step; source
tokens per second (median of ``--repeats`` steps after one warm-up) and the peak resident memory of the timed
steps above the memory before them (CPU: the process's VmHWM after a reset; CUDA: max_memory_allocated). Decoding:
encode one source of ``--decode-length`` tokens, build the decoder cache (cross-attention caches computed once),
then ``--decode-steps`` greedy steps through ``decode_step``; summary tokens per second of the steps alone. Every
(config, length) runs in a fresh process so that peaks do not mix. Configs take overrides after a colon:
``summarization/tiny-sdpa:model.attention.cross.name=lavo``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lavo_zoo.bench.timing import parse_ints, run_fresh, time_runs, write_json, writes_records
from lavo_zoo.options import device_option, json_records_option

TARGET_TOKENS = 48
WORKER = "lavo_zoo.bench.summarization:measure"  # run in a fresh process per (config, length)


def _parse(config: str) -> tuple[str, list[str]]:
    name, _, overrides = config.partition(":")
    return name, [o for o in overrides.split(",") if o]


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement (``spec``: config, overrides, mode train|decode, length, repeats, steps, device)."""
    import torch

    from lavo_zoo.engine.configs import resolve_config

    device = torch.device(spec["device"])
    torch.manual_seed(0)
    recipe, cfg = resolve_config(spec["config"], ["model.dropout=0.0", "model.attention_dropout=0.0",
                                                  f"model.max_source_positions={max(spec['length'], 4096)}",
                                                  *spec["overrides"]])
    model = recipe.build_model(cfg).to(device)
    vocab = cfg.model.vocab_size - 4
    source = torch.randint(0, vocab, (1, spec["length"]), device=device)  # [1, S]
    mask = torch.ones_like(source, dtype=torch.bool)
    if spec["mode"] == "train":
        target = torch.randint(0, vocab, (1, TARGET_TOKENS + 1), device=device)  # [1, T + 1]
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model.train()

        def run() -> None:
            optimizer.zero_grad(set_to_none=True)
            hidden = model(source, mask, target[:, :-1])  # [1, T, D]
            torch.nn.functional.cross_entropy(model.logits(hidden)[0], target[0, 1:]).backward()
            optimizer.step()

        result = time_runs(run, 1, spec["repeats"], device)
        seconds = sorted(result["times_s"])[len(result["times_s"]) // 2]
        return {**result, "source_tokens_per_s": spec["length"] / seconds}
    model.eval()
    state: dict[str, Any] = {}

    def encode() -> None:
        state["cache"] = model.init_cache(model.encode(source, mask), mask)

    def decode() -> None:
        token, cache = torch.full((1, 1), bos, device=device), state["cache"]
        for _ in range(spec["steps"]):
            logits, cache = model.decode_step(token, cache)
            token = logits.argmax(-1, keepdim=True)

    bos = recipe.resolve(cfg).model.never_generate[0]
    with torch.no_grad():
        encode_s = time_runs(encode, 0, 1, device, memory=False)["times_s"][0]
        decode_s = time_runs(decode, 0, 1, device, memory=False)["times_s"][0]
    return {"encode_s": encode_s, "summary_tokens_per_s": spec["steps"] / decode_s}


@click.command("summarization", epilog="""\b
Examples:
  lavo-zoo bench summarization summarization/tiny-sdpa summarization/tiny-lavo-noncausal
  lavo-zoo bench summarization summarization/tiny-sdpa:model.attention.cross.name=lavo --lengths 4096""")
@click.argument("configs", nargs=-1, required=True)
@click.option("--lengths", default="1024,2048,4096", show_default=True,
              help="Source lengths for training ('': decoding only).")
@click.option("--decode-length", type=int, default=4096, show_default=True, help="Source length for decoding "
              "(0: no decoding).")
@click.option("--decode-steps", type=int, default=32, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True)
@device_option
@json_records_option
@writes_records
def summarization_cmd(configs: tuple[str, ...], lengths: str, decode_length: int, decode_steps: int, repeats: int,
                      device: str | None, json_file: Path | None) -> None:
    """Training throughput and peak memory against source length, and cached decoding speed, of CONFIGS (each
    (config, length) in a fresh process; overrides after a colon: CONFIG:key=value,key=value)."""
    from lavo_zoo.engine.env import describe_machine, machine, pick_device

    device = str(pick_device(device))
    host = machine(device)
    click.echo(f"# {describe_machine(host)}")
    rows = []
    for config in configs:
        name, overrides = _parse(config)
        base = {"config": name, "overrides": overrides, "repeats": repeats, "steps": decode_steps, "device": device}
        for length in parse_ints(lengths, "--lengths") if lengths else []:
            rows.append({"label": config, "mode": "train", "length": length,
                         **run_fresh(WORKER, {**base, "mode": "train", "length": length})})
            r = rows[-1]
            click.echo(f"{config:<60} train  S={length:>5}  " + (r.get("error") or
                       f"{r['source_tokens_per_s']:8.0f} source tok/s  peak {r['peak_memory_bytes'] / 2**20:7.0f} MiB"))
        if decode_length:
            rows.append({"label": config, "mode": "decode", "length": decode_length,
                         **run_fresh(WORKER, {**base, "mode": "decode", "length": decode_length})})
            r = rows[-1]
            click.echo(f"{config:<60} decode S={decode_length:>5}  " + (r.get("error") or
                       f"{r['summary_tokens_per_s']:8.1f} summary tok/s  (encode + cache {r['encode_s']:.2f} s)"))
    if json_file:
        write_json(json_file, {"machine": host, "results": rows})
