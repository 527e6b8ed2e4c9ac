"""Text generation from an LM checkpoint: ``lavo-zoo generate CHECKPOINT --prompt TEXT``.

With a streaming attention the prompt is consumed once and every new token costs one step with the carried state
(LAVO's O(1) recurrent state, the softmax attentions' KV cache); otherwise each step re-runs the whole sequence.
"""
from __future__ import annotations

import time

import click
import torch
from torch import nn


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits [V] with everything outside the top-k and the top-p nucleus set to -inf (0 / 1.0 disable them)."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the smallest prefix whose mass reaches top_p
        logits = logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
    return logits


def next_token(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
               generator: torch.Generator | None) -> int:
    """Greedy at temperature 0, else a sample from the filtered, temperature-scaled distribution."""
    if temperature <= 0:
        return int(logits.argmax())
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.no_grad()
def generate_ids(model: nn.Module, prompt: list[int], max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, stop: int | None = None, seed: int | None = None,
                 use_state: bool | None = None) -> list[int]:
    """Continue ``prompt`` (token ids, non-empty) by up to ``max_new_tokens`` ids; stop after ``stop`` if given.

    ``use_state`` (default: when the model streams) decodes with the carried state instead of full re-runs.
    """
    if not prompt:
        raise ValueError("generation needs at least one prompt token")
    use_state = getattr(model, "streaming", False) if use_state is None else use_state
    device = next(model.parameters()).device
    generator = torch.Generator(device).manual_seed(seed) if seed is not None else None
    ids = list(prompt)
    state = None
    logits = None
    for _ in range(max_new_tokens):
        if use_state:  # the prompt once, then one token per step
            step = ids[len(ids) - 1:] if state is not None else ids
            logits, state = model(torch.tensor([step], device=device), state=state, return_state=True)  # [1, V]
        else:
            logits = model(torch.tensor([ids], device=device))  # [1, V]
        ids.append(next_token(logits[0], temperature, top_k, top_p, generator))
        if ids[-1] == stop:
            break
    return ids[len(prompt):]


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
