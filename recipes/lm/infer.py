"""Text generation from a language model: :class:`LanguageModel`, what ``lavo_zoo.load`` returns for an ``lm``
checkpoint (``lavo-zoo generate`` calls it).

With a streaming attention the prompt is consumed once and every new token costs one step with the carried state
(LAVO's O(1) recurrent state, the softmax attentions' KV cache); otherwise each step re-runs the whole sequence.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.nn.tokenizers import Tokenizer, get_tokenizer


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


class LanguageModel(Predictor):
    """A trained language model: ``generate`` continues prompts (``lavo_zoo.load`` returns it for an ``lm``
    checkpoint)."""

    @property
    def tokenizer(self) -> Tokenizer:
        return get_tokenizer(self.cfg.data.tokenizer)

    def generate(self, prompt: str | Sequence[str], max_new_tokens: int = 200, *, temperature: float = 1.0,
                 top_k: int = 50, top_p: float = 1.0, seed: int | None = None, stream_state: bool = True
                 ) -> str | list[str]:
        """The continuation of ``prompt`` (a string, or a list of them: one continuation each), decoded with the
        carried recurrent state / KV cache when the attention streams (``stream_state``), else by re-running the
        sequence each step. ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 switch those filters off;
        generation stops at the end-of-document token."""
        if not isinstance(prompt, str):
            return [self.generate(p, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                  stream_state=stream_state) for p in prompt]
        tokenizer = self.tokenizer
        ids = tokenizer.encode(prompt) or [tokenizer.eod]
        new = generate_ids(self.model, ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                           stop=tokenizer.eod, seed=seed, use_state=stream_state and self.model.streaming)
        return tokenizer.decode([i for i in new if i != tokenizer.eod])
