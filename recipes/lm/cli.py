"""The language model's own commands, mounted by ``lavo-zoo`` through ``LMRecipe.commands``: ``generate`` and
``throughput``. Heavy modules are imported inside the commands so that ``lavo-zoo --help`` stays fast."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click


@click.command("generate", epilog="""\b
Examples:
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "KING HENRY. "
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "def main(" --temperature 0      # greedy
  lavo-zoo generate runs/pg19/checkpoints/last --prompt "It was" --top-k 0 --top-p 0.9 --seed 1
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "ROMEO." --max-new-tokens 500 --no-stream-state""")
@click.argument("checkpoint")
@click.option("--prompt", required=True, help="Text to continue ('' starts a new document).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Softmax temperature; 0 decodes greedily.")
@click.option("--top-k", type=click.IntRange(min=0), default=50, show_default=True,
              help="Sample among the k most likely tokens (0: all).")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True,
              help="Nucleus sampling: the smallest set of tokens holding this probability mass.")
@click.option("--seed", type=int, default=None, help="Seed for reproducible sampling.")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
@click.option("--stream-state/--no-stream-state", default=True, show_default=True,
              help="Decode with the recurrent state / KV cache (when the attention streams) or full re-runs.")
def generate(checkpoint: str, prompt: str, max_new_tokens: int, temperature: float, top_k: int, top_p: float,
             seed: int | None, device: str | None, stream_state: bool) -> None:
    """Continue PROMPT with the language model in CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL or
    an hf:// reference)."""
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.errors import UsageError
    from lavo_zoo.recipes.lm.generate import generate_ids
    from lavo_zoo.recipes.lm.tokenizers import get_tokenizer

    with open_checkpoint(checkpoint) as path:  # an unpacked archive is removed once the model is loaded
        recipe, cfg, model, _ = load_model(path, pick_device(device))
    if recipe.name != "lm":
        raise UsageError(f"{checkpoint} is a '{recipe.name}' checkpoint; generate needs a language model ('lm')")
    tokenizer = get_tokenizer(cfg.data.tokenizer)
    prompt_ids = tokenizer.encode(prompt) or [tokenizer.eod]
    start = time.perf_counter()
    new = generate_ids(model, prompt_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                       stop=tokenizer.eod, seed=seed, use_state=stream_state and model.streaming)
    elapsed = time.perf_counter() - start
    click.echo(prompt + tokenizer.decode([i for i in new if i != tokenizer.eod]))
    mode = "with the carried state" if stream_state and model.streaming else "by full re-runs"
    click.echo(f"[{len(new)} tokens in {elapsed:.2f}s, {len(new) / elapsed:.1f} tokens/s, {mode}]", err=True)


@click.command("throughput", epilog="""\b
Examples:
  lavo-zoo throughput lm/tiny-lavo lm/tiny-sdpa --lengths 512,2048
  lavo-zoo throughput lm/pg19-lavo --lengths 2048,8192,16384 --device cuda --json throughput.json""")
@click.argument("configs", nargs=-1, required=True)
@click.option("--lengths", default="2048,8192,16384", show_default=True, help="Comma-separated context lengths.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed steps per figure (the median is reported) after one warm-up step.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the rows to this JSON file.")
def throughput(configs: tuple[str, ...], lengths: str, repeats: int, device: str, json_out: Path | None) -> None:
    """Training and evaluation tokens/s of LM CONFIGS at several context lengths, one sequence per step."""
    import torch

    from lavo_zoo.errors import UsageError
    from lavo_zoo.recipes.lm.throughput import measure

    try:
        sizes = [int(n) for n in lengths.split(",")]
    except ValueError:
        raise UsageError(f"--lengths must be comma-separated integers, got '{lengths}'") from None
    rows = [measure(c, n, repeats, torch.device(device)) for c in configs for n in sizes]
    click.echo(f"{'config':<22} {'length':>7} {'train tok/s':>12} {'eval tok/s':>12}")
    for r in rows:
        click.echo(f"{r['config']:<22} {r['length']:>7} {r['train_tokens_per_s']:>12.0f} "
                   f"{r['eval_tokens_per_s']:>12.0f}")
    if json_out is not None:
        json_out.write_text(json.dumps(rows, indent=2) + "\n")
