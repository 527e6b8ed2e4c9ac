"""Time per decoded token of the transformers form of lm models, through its cache, after prompts of several lengths.

For each config: an untrained model of that config (timing does not depend on the weights) is saved as a checkpoint,
exported with ``lavo-zoo export --format hf`` and loaded with ``AutoModelForCausalLM.from_pretrained``. For each
length it reads a random prompt of that many tokens in one forward pass (``use_cache=True``) and then decodes
``--steps`` tokens one at a time through the returned cache; it prints the fastest and the median step. LAVO's cache
holds a constant-size state, so its step costs the same at every position; sdpa's holds every key and value.

Usage::

    python benchmarks/hf_decode_cost.py [--configs lm/tiny-lavo,lm/tiny-sdpa] [--lengths 100,100000] [--steps 64]
                                        [--threads 1] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch


def decode_cost(config: str, lengths: list[int], steps: int, work: Path) -> list[dict]:
    """One record per length: {config, position, state_bytes, min_ms, median_ms}."""
    from transformers import AutoModelForCausalLM

    import lavo_zoo  # noqa: F401  (registers the Auto classes)
    from lavo_zoo.attention import tensor_bytes
    from lavo_zoo.cli import main
    from lavo_zoo.engine.checkpoint_io import save_checkpoint
    from lavo_zoo.engine.configs import resolve_config

    torch.manual_seed(0)
    recipe, cfg = resolve_config(config)
    cfg = recipe.resolve(cfg)
    name = config.replace("/", "-")
    checkpoint = save_checkpoint(work / name, 0, recipe.build_model(cfg).eval(), cfg, recipe.name)
    if main(["export", str(checkpoint), str(work / f"{name}-hf"), "--format", "hf"]) != 0:
        raise SystemExit(f"exporting {config} failed")
    model = AutoModelForCausalLM.from_pretrained(work / f"{name}-hf").eval()
    vocab = model.config.vocab_size
    records = []
    for length in lengths:
        prompt = torch.randint(0, vocab, (1, length))  # [1, T]
        with torch.no_grad():
            out = model(prompt, use_cache=True, logits_to_keep=1)
            cache, token = out.cache, out.logits[:, -1:].argmax(-1)  # the LavoZooLMCache, token [1, 1]
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                out = model(token, cache=cache, use_cache=True)
                times.append(time.perf_counter() - start)
                cache, token = out.cache, out.logits[:, -1:].argmax(-1)
        record = {"config": config, "position": length, "state_bytes": tensor_bytes(cache.lm_state()),
                  "min_ms": min(times) * 1e3, "median_ms": statistics.median(times) * 1e3}
        print(f"{config:16s} position {length:>9,}: {record['min_ms']:7.2f} ms per token "
              f"(median {record['median_ms']:.2f}), cache {record['state_bytes'] / 2**10:,.1f} KiB", flush=True)
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="lm/tiny-lavo,lm/tiny-sdpa", help="comma-separated lm configs")
    parser.add_argument("--lengths", default="100,100000", help="comma-separated prompt lengths")
    parser.add_argument("--steps", type=int, default=64, help="tokens decoded one at a time per length")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the records here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [int(n) for n in args.lengths.split(",")]
    with tempfile.TemporaryDirectory() as work:
        records = [r for c in args.configs.split(",") for r in decode_cost(c, lengths, args.steps, Path(work))]
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "threads": args.threads, "records": records},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
