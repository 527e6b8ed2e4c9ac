"""The language model's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``generate``. Heavy modules are
imported inside the commands so that ``lavo-zoo --help`` stays fast."""
from __future__ import annotations

import time

import click

from lavo_zoo import limits
from lavo_zoo.options import device_option


@click.command("generate", epilog="""\b
Examples:
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "KING HENRY. "
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "def main(" --temperature 0      # greedy
  lavo-zoo generate runs/pg19/checkpoints/last --prompt "It was" --top-k 0 --top-p 0.9 --seed 1
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "ROMEO." --max-new-tokens 500 --no-stream-state""")
@click.argument("checkpoint")
@click.option("--prompt", required=True, help="Text to continue ('' starts a new document).")
@click.option("--max-new-tokens", type=limits.MAX_NEW_TOKENS.click_type(), default=200, show_default=True,
              help=f"At most this many new tokens ({limits.MAX_NEW_TOKENS.describe()}).")
@click.option("--temperature", type=limits.TEMPERATURE.click_type(), default=1.0, show_default=True,
              help=f"Softmax temperature ({limits.TEMPERATURE.describe()}); 0 decodes greedily.")
@click.option("--top-k", type=limits.TOP_K.click_type(), default=50, show_default=True,
              help="Sample among the k most likely tokens (0: all).")
@click.option("--top-p", type=limits.TOP_P.click_type(), default=1.0, show_default=True,
              help=f"Nucleus sampling ({limits.TOP_P.describe()}): the smallest set of tokens holding this mass.")
@click.option("--seed", type=limits.SEED.click_type(), default=None,
              help=f"Seed for reproducible sampling ({limits.SEED.describe()}).")
@device_option
@click.option("--stream-state/--no-stream-state", default=True, show_default=True,
              help="Decode with the recurrent state / KV cache (when the attention streams) or full re-runs.")
def generate(checkpoint: str, prompt: str, max_new_tokens: int, temperature: float, top_k: int, top_p: float,
             seed: int | None, device: str | None, stream_state: bool) -> None:
    """Continue PROMPT with the language model in CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL or
    an hf:// reference)."""
    from lavo_zoo.checkpoints import load_predictor

    lm = load_predictor(checkpoint, device, recipe="lm")
    start = time.perf_counter()
    text = lm.generate(prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                       stream_state=stream_state)
    elapsed = time.perf_counter() - start
    click.echo(prompt + text)
    tokens = len(lm.tokenizer.encode(text))
    mode = "with the carried state" if stream_state and lm.model.streaming else "by full re-runs"
    click.echo(f"[{tokens} tokens in {elapsed:.2f}s, {tokens / max(elapsed, 1e-9):.1f} tokens/s, {mode}]", err=True)


COMMANDS = [generate]
