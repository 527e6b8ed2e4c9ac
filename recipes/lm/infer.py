"""A trained language model on new text: generation (:func:`generate_ids`, :class:`LanguageModel`, what
``lavo_zoo.load`` returns for an ``lm`` checkpoint and ``lavo-zoo generate`` calls), and the perplexity loops of the
recipe's evaluation (:func:`length_perplexity` at several context lengths, :func:`stream_perplexity` through the
carried state).

With a streaming attention the prompt is consumed once and every new token costs one step with the carried state
(LAVO's O(1) recurrent state, the softmax attentions' KV cache); otherwise each step re-runs the whole sequence.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from lavo_zoo import limits
from lavo_zoo.engine.predictor import Predictor, as_batch
from lavo_zoo.errors import DataError, InputError, UsageError
from lavo_zoo.evaluators.perplexity import PerplexityTable
from lavo_zoo.nn.tokenizers import Tokenizer, get_tokenizer
from lavo_zoo.nn.transformer import LayerState
from lavo_zoo.recipes.lm.data import TokenBlocks


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
    """Greedy at temperature 0, else a sample from the filtered, temperature-scaled distribution; logits [V] that are
    not finite are refused (an :class:`InputError`).

    Args:
        logits: [V] the next token's scores.
        temperature: the sampling temperature (<= 0: greedy).
        top_k: sample among the k most likely ids (0: all).
        top_p: sample among the most likely ids whose probabilities sum to ``top_p`` (1: all).
        generator: the sampling generator, or None (the global one).
    """
    if not bool(torch.isfinite(logits).all()):
        raise InputError("the model's next-token scores are not finite (NaN or infinite); nothing was generated")
    if temperature <= 0:
        return int(logits.argmax())
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


PREFILL_CHUNK = 4096  # prompt tokens run at once with the carried state: a prompt's length multiplies no activation


@torch.no_grad()
def generate_ids(model: nn.Module, prompt: list[int], max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, stop: int | None = None, seed: int | None = None,
                 use_state: bool | None = None) -> list[int]:
    """Continue ``prompt`` (token ids, non-empty) by up to ``max_new_tokens`` ids; stop after ``stop`` if given.

    ``use_state`` (default: when the model streams) decodes with the carried state instead of full re-runs; the prompt
    then runs :data:`PREFILL_CHUNK` tokens at a time (what streaming gives equals the one pass), so only the state
    grows with its length.

    Args:
        model: the language model (eval mode).
        prompt: the prompt's token ids (at least one).
        max_new_tokens: ids to add at most.
        temperature: the sampling temperature (0: greedy).
        top_k: sample among the k most likely ids (0: all).
        top_p: sample among the most likely ids whose probabilities sum to ``top_p`` (1: all).
        stop: an id that ends the generation (kept), or None.
        seed: the sampling generator's seed, or None (the global generator).
        use_state: decode with the carried state (None: when the model streams).

    Returns:
        The new ids (the prompt not included).
    """
    if not prompt:
        raise ValueError("generation needs at least one prompt token")
    use_state = getattr(model, "streaming", False) if use_state is None else use_state
    device = next(model.parameters()).device
    generator = torch.Generator(device).manual_seed(seed) if seed is not None else None
    ids = list(prompt)
    state = None
    logits = None
    if use_state:  # the prompt but its last token, in chunks; then one token per step
        for start in range(0, len(ids) - 1, PREFILL_CHUNK):
            chunk = ids[start:min(start + PREFILL_CHUNK, len(ids) - 1)]
            _, state = model(torch.tensor([chunk], device=device), state=state, return_state=True)
    for _ in range(max_new_tokens):
        if use_state:
            logits, state = model(torch.tensor([ids[-1:]], device=device), state=state, return_state=True)  # [1, V]
        else:
            logits = model(torch.tensor([ids], device=device))  # [1, V]
        ids.append(next_token(logits[0], temperature, top_k, top_p, generator))
        if ids[-1] == stop:
            break
    return ids[len(prompt):]


class LanguageModel(Predictor):
    """A trained language model: ``generate`` continues prompts (``lavo_zoo.load`` returns it for an ``lm``
    checkpoint)."""

    # decoding states are measured after this many tokens and twice as many: a state that keeps every past token
    # (a KV cache) grows between them, one of bounded size (LAVO, a local window up to this size) does not
    PROBE_TOKENS = 1024
    _layer_states: list[LayerState] | None = None  # each layer's state after PROBE_TOKENS, measured on first use

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer the model was trained with (``data.tokenizer``)."""
        return get_tokenizer(self.cfg.data.tokenizer)

    def generate(self, prompt: str | Sequence[str], max_new_tokens: int = 200, *, temperature: float = 1.0,
                 top_k: int = 50, top_p: float = 1.0, seed: int | None = None, stream_state: bool = True
                 ) -> str | list[str]:
        """Continue text.

        Args:
            prompt: the text to continue ('' starts a new document), or a list of them (one continuation each).
            max_new_tokens: at most this many tokens; generation stops earlier at the end-of-document token.
            temperature: softmax temperature; 0 decodes greedily.
            top_k: sample among the k most likely tokens (0: all).
            top_p: nucleus sampling: the smallest set of tokens holding this probability mass (1: all).
            seed: seed of the sampling (None: not reproducible).
            stream_state: decode with the carried recurrent state / KV cache when the attention streams, else by
                re-running the whole sequence each step (the same tokens, slower).

        Returns:
            The continuation (without the prompt), or a list of them for a list of prompts.

        Raises:
            InputError: ``prompt`` is not a str or a list of them, an option is outside its range
                (:mod:`lavo_zoo.limits`), the decoding state (or, without one, a pass over the prompt and the new
                tokens) would not fit in memory, or the model's scores are not finite.
        """
        prompts, single = as_batch(prompt, lambda p: isinstance(p, str), "prompt", "a text (str)")
        max_new_tokens = limits.MAX_NEW_TOKENS.check(max_new_tokens)
        temperature, top_p = limits.TEMPERATURE.check(temperature), limits.TOP_P.check(top_p)
        top_k, seed = limits.TOP_K.check(top_k), limits.SEED.check_optional(seed)
        tokenizer = self.tokenizer
        use_state = stream_state and self.model.streaming
        out = []
        for i, text in enumerate(prompts):
            try:
                ids = tokenizer.encode(text) or [tokenizer.eod]
            except UnicodeEncodeError as e:  # a lone surrogate (text decoded with errors='surrogateescape')
                where = "prompt" if single else f"prompt[{i}]"
                raise InputError(f"{where} holds {text[e.start]!r} at position {e.start}, a character that has no "
                                 "UTF-8 form (a lone surrogate, left by decoding bytes that were not UTF-8); decode "
                                 "the text as what it is, or with errors='replace'") from None
            if use_state:  # the prompt runs in chunks: only the state grows with it
                self._check_state_fits(len(ids) + max_new_tokens)
            else:  # every step re-runs the whole sequence
                length = len(ids) + max_new_tokens
                self.check_fits(self.memory_estimate(length, carried_state=False),
                                f"generating up to {length:,} tokens (the prompt and max_new_tokens) by re-running "
                                "the sequence at every step", "give a shorter prompt or lower max_new_tokens")
            new = generate_ids(self.model, ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                               stop=tokenizer.eod, seed=seed, use_state=use_state)
            out.append(tokenizer.decode([i for i in new if i != tokenizer.eod]))
        return out[0] if single else out

    @torch.no_grad()
    def memory_estimate(self, tokens: int, carried_state: bool = True) -> int:
        """Estimated bytes of generating up to ``tokens`` tokens.

        Args:
            tokens: the prompt's tokens and the new ones.
            carried_state: decoding with the carried state: each layer's state at two probe lengths, measured once,
                and its growth per token between them (none for a bounded state, :meth:`layer_states`); False: one
                pass over the whole sequence, as re-running it at every step takes (float32 activations of about
                ffn_dim + 8 embed_dim numbers per token).
        """
        if not carried_state:
            m = self.model.cfg
            return tokens * (m.ffn_dim + 8 * m.embed_dim) * 4
        probe = self.PROBE_TOKENS  # the state at twice the probe, then its growth per token beyond
        return int(sum(layer.bytes + layer.per_token * (probe + max(tokens - 2 * probe, 0))
                       for layer in self.layer_states()))

    def layer_states(self) -> list[LayerState]:
        """What each layer keeps to go on decoding: its mechanism, the bytes of its state after ``PROBE_TOKENS``
        tokens and what it gains per token from there (a KV cache; 0 for a bounded state: LAVO, a window, a
        recurrent matrix), measured once (:meth:`~lavo_zoo.nn.transformer.TiedDecoderLM.layer_states`)."""
        if self._layer_states is None:
            self._layer_states = self.model.layer_states(self.PROBE_TOKENS)
        return self._layer_states

    def _check_state_fits(self, tokens: int) -> None:
        """Refuse a generation whose decoding state would outgrow memory after ``tokens`` tokens; a bounded state is
        never refused (nor measured for a short one)."""
        if tokens <= 2 * self.PROBE_TOKENS:
            return
        growing = [layer for layer in self.layer_states() if layer.grows]
        which = ("this attention's state grows" if len(growing) == len(self.layer_states()) else
                 f"the state of layer{'s' if len(growing) > 1 else ''} "
                 + ", ".join(f"{layer.layer} ({layer.attention})" for layer in growing) + " grows")
        self.check_fits(self.memory_estimate(tokens),
                        f"generating up to {tokens:,} tokens (the prompt and max_new_tokens) with the carried state",
                        f"lower max_new_tokens ({which} with every token)")


# ------------------------------------------------------------------------------------------------- perplexity
@torch.no_grad()
def length_perplexity(model: nn.Module, tokens: np.ndarray, table: PerplexityTable, lengths: list[int], *,
                      tokens_per_batch: int, max_tokens: int, device: torch.device | str = "cpu") -> None:
    """Score non-overlapping blocks of each length into group ``<length>`` of ``table``, every length over the same
    first ``max_tokens`` targets rounded down to a multiple of the longest length.

    Args:
        model: the language model (eval mode).
        tokens: the split's token ids.
        table: the table the NLLs are added to.
        lengths: the evaluation lengths.
        tokens_per_batch: tokens per forward pass (blocks per batch: this over the length).
        max_tokens: targets scored at most.
        device: where the model runs.

    Raises:
        DataError: fewer tokens than one block of the longest length.
    """
    scored = max_tokens // max(lengths) * max(lengths)
    if scored == 0:
        raise DataError(f"the split has {tokens.size} tokens (limit {max_tokens}), fewer than one block of the "
                        f"longest evaluation length {max(lengths)}; lower eval.length_factors or data.block_size")
    for length in lengths:
        blocks = TokenBlocks(tokens, length, max_tokens=scored)
        for batch in DataLoader(blocks, batch_size=max(1, tokens_per_batch // length)):
            batch = batch.to(device)  # [b, length + 1]
            table.update({str(length): model(batch[:, :-1], batch[:, 1:])})


def bucket_edges(first: int, total: int) -> list[int]:
    """Context-length bucket bounds 0, first, 2*first, 4*first, ... up to >= total."""
    edges = [0, first]
    while edges[-1] < total:
        edges.append(edges[-1] * 2)
    return edges


@torch.no_grad()
def stream_perplexity(model: nn.Module, tokens: np.ndarray, table: PerplexityTable, *, chunk: int, bucket_start: int,
                      max_tokens: int | None = None, device: torch.device | str = "cpu") -> None:
    """Feed ``tokens`` through ``model`` as ONE sequence, ``chunk`` tokens at a time, carrying the recurrent state.

    Adds every token's NLL to group ``stream`` of ``table`` and to ``ctx:<lo>-<hi>``, the bucket of its context
    length (tokens seen so far, 1-based; buckets double from ``bucket_start``). Memory is constant in the stream's
    length for attentions with a bounded state (LAVO, local); a KV cache grows with it.

    Args:
        model: the language model, with a streaming attention (eval mode).
        tokens: the split's token ids, read as one sequence.
        table: the table the NLLs are added to.
        chunk: tokens per forward pass.
        bucket_start: the first context-length bucket's upper end (buckets double from it).
        max_tokens: targets scored at most (None: the whole split).
        device: where the model runs.

    Raises:
        UsageError: the model's attention cannot stream.
    """
    if not getattr(model, "streaming", False):
        raise UsageError("eval.stream needs a streaming attention (one whose `lavo-zoo list attentions` entry has "
                         "streaming=True); this model's attention cannot carry state across chunks")
    n = min(tokens.size - 1, max_tokens or tokens.size)
    edges = torch.tensor(bucket_edges(bucket_start, n))
    names = [f"ctx:{lo + 1}-{hi}" for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist())]
    state = None
    for start in tqdm(range(0, n, chunk), desc="streaming", unit="chunk", disable=None, file=sys.stderr):
        block = torch.from_numpy(tokens[start:min(start + chunk, n) + 1].astype(np.int64))[None].to(device)  # [1, t+1]
        nll, state = model(block[:, :-1], block[:, 1:], state=state, return_state=True)  # [1, t]
        table.update({"stream": nll})
        context = torch.arange(start + 1, start + 1 + nll.shape[1])  # [t] tokens seen when predicting each target
        bucket = torch.bucketize(context, edges, right=False) - 1  # context in (edges[b], edges[b+1]]
        for b in bucket.unique().tolist():
            table.update({names[b]: nll[0, (bucket == b).to(nll.device)]})
