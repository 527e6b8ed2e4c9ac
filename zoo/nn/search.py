"""Autoregressive generation for encoder-decoder models: greedy and beam search over tokens, and greedy decoding of
continuous frames (text-to-speech), with pluggable stop criteria. No recipe writes its own decoder loop.

A model exposes three methods (:class:`TokenModel`, e.g. a thin wrapper around ``TransformerDecoder``):

    memory = model.encode(src, src_mask)             # src [B, S, ...], src_mask [B, S] bool (True = real)
    cache = model.init_cache(memory, src_mask)       # e.g. TransformerDecoder.init_cache (anything reorderable)
    logits, cache = model.decode_step(tokens, cache) # tokens [N, 1] (the last token) -> logits [N, V]

    out = generate(model, src, src_mask, bos_id=1, eos_id=2, pad_id=0, beam_size=4, max_len_a=1.2, max_len_b=10,
                   length_penalty=1.0, no_repeat_ngram_size=3)
    out.tokens [B, L] (pad_id after each end; EOS included), out.lengths [B], out.scores [B]

Lengths (per source, from its number of real tokens S_b): a hypothesis has at most
``max_len = max(1, int(max_len_a * S_b + max_len_b))`` tokens, the stop token included (a stop is forced there), and
may stop only after ``min_len = int(min_len_a * S_b + min_len_b)`` tokens (EOS is masked before). Scores are the
summed log-probabilities divided by ``length ** length_penalty`` (length counts the stop token; fairseq's
convention). Beam search keeps ``beam_size`` hypotheses per source; stops among the best ``beam_size`` candidates
of a step are finished, and a source is done when it has ``beam_size`` finished hypotheses (fairseq's rule) or
reaches its maximum length; finished sources leave the batch (the cache is re-indexed), beams move with
``DecoderCache.reorder(index, cross=False)``. ``no_repeat_ngram_size=n`` bans any token that would repeat an n-gram
of the hypothesis. Greedy (``beam_size=1``) takes the argmax at each step.

Stop criteria are callables ``(StepOutput) -> [N] bool`` (rows that end at this step, the step's output included):
:class:`EosStop` (the default for tokens), :class:`StopProbability` (text-to-speech: sigmoid(stop logit) >
threshold), :class:`AnyStop` to combine them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from lavo_zoo.attention.base import reorder_batch
from lavo_zoo.errors import InputError
from lavo_zoo.nn.transformer import check_has_real_token


# ---------------------------------------------------------------------------------------------------- protocols
class TokenModel(Protocol):
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Any:
        """Sources [B, S] and their mask [B, S] (True = real token) -> the encoder's memory."""

    def init_cache(self, memory: Any, src_mask: torch.Tensor) -> Any:
        """The decoding cache of ``memory`` (cross-attention caches computed once per source)."""

    def decode_step(self, tokens: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
        """The last tokens [B, 1] -> (logits [B, V] of the next token, the cache after them)."""


class FrameModel(Protocol):
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Any:
        """Sources [B, S] and their mask [B, S] (True = real token) -> the encoder's memory."""

    def init_cache(self, memory: Any, src_mask: torch.Tensor) -> Any:
        """The decoding cache of ``memory`` (cross-attention caches computed once per source)."""

    def decode_step(self, previous: torch.Tensor, cache: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """The last predicted group of frames [B, 1, F] (zeros at first) -> (the next group [B, F], the stop logits
        [B], the cache after it)."""


# ---------------------------------------------------------------------------------------------------- stop criteria
@dataclass
class StepOutput:
    """What one decoding step produced, for N rows: handed to the stop criteria."""

    position: int                             # 0-based index of the position just produced
    tokens: torch.Tensor | None = None        # [N] chosen tokens (token search)
    frames: torch.Tensor | None = None        # [N, C] produced frames (frame decoding)
    stop_logits: torch.Tensor | None = None   # [N] (frame decoding)


StopCriterion = Callable[[StepOutput], torch.Tensor]


@dataclass
class EosStop:
    """A row ends when it emits ``eos_id``."""

    eos_id: int

    def __call__(self, out: StepOutput) -> torch.Tensor:
        if out.tokens is None:
            raise InputError("EosStop needs token outputs; frame decoding stops with StopProbability")
        return out.tokens == self.eos_id


@dataclass
class StopProbability:
    """A row ends when sigmoid(its stop logit) > ``threshold`` (Transformer-TTS's stop token)."""

    threshold: float = 0.5

    def __call__(self, out: StepOutput) -> torch.Tensor:
        if out.stop_logits is None:
            raise InputError("StopProbability needs the model's stop logits (decode_step's second output)")
        return torch.sigmoid(out.stop_logits.float()) > self.threshold


def _never_stop(out: StepOutput) -> torch.Tensor:
    """No row ends on its own (frame decoding at fixed lengths)."""
    return torch.zeros(out.frames.shape[0], dtype=torch.bool, device=out.frames.device)


class AnyStop:
    """A row ends when any of the criteria says so."""

    def __init__(self, *criteria: StopCriterion) -> None:
        if not criteria:
            raise ValueError("AnyStop needs at least one criterion")
        self.criteria = criteria

    def __call__(self, out: StepOutput) -> torch.Tensor:
        result = self.criteria[0](out)
        for c in self.criteria[1:]:
            result = result | c(out)
        return result


# ---------------------------------------------------------------------------------------------------- results
@dataclass
class Generation:
    """Best hypothesis per source: tokens [B, L] (pad_id after the end), lengths [B], scores [B] (normalised)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    scores: torch.Tensor


@dataclass
class FrameGeneration:
    """Decoded frames [B, L, C] (zeros after the end), lengths [B] (the stopping frame included)."""

    frames: torch.Tensor
    lengths: torch.Tensor


# ---------------------------------------------------------------------------------------------------- helpers
def length_limits(src_mask: torch.Tensor, max_len_a: float, max_len_b: int, min_len_a: float = 0.0,
                  min_len_b: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-source (min_len, max_len) [B] int64 from the number of real source tokens (see the module docstring).

    Args:
        src_mask: [B, S] bool, True = real source token.
        max_len_a: the maximum length's factor on the real tokens.
        max_len_b: the maximum length's constant.
        min_len_a: the minimum length's factor on the real tokens.
        min_len_b: the minimum length's constant.
    """
    src_len = src_mask.sum(1).double()
    max_len = (max_len_a * src_len + max_len_b).long().clamp(min=1)
    min_len = (min_len_a * src_len + min_len_b).long().clamp(min=0)
    return min_len, max_len


def _reorder(cache: Any, index: torch.Tensor, same_sources: bool) -> Any:
    """Re-index the cache's batch; ``same_sources``: rows only move between beams of one source."""
    if same_sources and hasattr(cache, "reorder"):
        try:
            return cache.reorder(index, cross=False)
        except TypeError:  # a cache whose reorder has no `cross` option
            pass
    return reorder_batch(cache, index)


def _ban_repeated_ngrams(lp: torch.Tensor, hyps: torch.Tensor, n: int) -> torch.Tensor:
    """lp [N, V] with -inf at every token that would complete an n-gram already in hyps [N, t]."""
    t = hyps.shape[1]
    if n <= 0 or t < n:
        return lp
    grams = hyps.unfold(1, n, 1)                                          # [N, t-n+1, n]
    match = (grams[:, :, :-1] == hyps[:, None, t - n + 1:]).all(-1)      # [N, t-n+1] its first n-1 = the last n-1
    banned = grams[:, :, -1]                                              # [N, t-n+1]
    hits = torch.zeros_like(lp).scatter_add_(1, banned, match.to(lp.dtype))  # [N, V]
    return lp.masked_fill(hits > 0, float("-inf"))


def _constrain(lp: torch.Tensor, t: int, hyps: torch.Tensor, min_len: torch.Tensor, max_len: torch.Tensor,
               eos_id: int | None, no_repeat_ngram_size: int) -> torch.Tensor:
    """Apply min/max length (EOS masked before min_len, forced at max_len) and the n-gram ban to lp [N, V]."""
    if eos_id is None:
        return _ban_repeated_ngrams(lp, hyps, no_repeat_ngram_size)
    eos_lp = lp[:, eos_id]                                                # the model's own, kept when forced
    lp = _ban_repeated_ngrams(lp, hyps, no_repeat_ngram_size).clone()
    lp[:, eos_id] = torch.where(t < min_len, float("-inf"), lp[:, eos_id])
    at_max = t + 1 >= max_len                                             # [N]
    if at_max.any():
        forced = torch.full_like(lp, float("-inf"))
        forced[:, eos_id] = eos_lp
        lp = torch.where(at_max[:, None], forced, lp)
    return lp


def _check_inputs(src_mask: torch.Tensor, beam_size: int) -> None:
    check_has_real_token(src_mask, "src_mask")
    if beam_size < 1:
        raise InputError(f"beam_size must be >= 1, got {beam_size}")


# ---------------------------------------------------------------------------------------------------- token search
@torch.no_grad()
def generate(model: TokenModel, src: torch.Tensor, src_mask: torch.Tensor, *, bos_id: int, eos_id: int | None,
             pad_id: int = 0, beam_size: int = 1, max_len_a: float = 0.0, max_len_b: int = 200,
             min_len_a: float = 0.0, min_len_b: int = 0, length_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
             stop: StopCriterion | None = None) -> Generation:
    """Greedy (``beam_size=1``) or beam search; see the module docstring.

    Args:
        model: the model (:class:`TokenModel`).
        src: [B, S, ...] the sources.
        src_mask: [B, S] bool, True = real source token.
        bos_id: the token every hypothesis starts with.
        eos_id: the end token, or None (no EOS token: hypotheses end by ``stop`` or at their maximum length).
        pad_id: the token after each hypothesis's end in the output.
        beam_size: hypotheses kept per source (1: greedy).
        max_len_a: the maximum length's factor on the source's real tokens (module docstring, "Lengths").
        max_len_b: the maximum length's constant.
        min_len_a: the minimum length's factor on the source's real tokens.
        min_len_b: the minimum length's constant.
        length_penalty: scores are divided by ``length ** length_penalty``.
        no_repeat_ngram_size: n > 0 bans any token that would repeat an n-gram of the hypothesis (0: none).
        stop: the stop criterion (None: ``EosStop(eos_id)``).

    Raises:
        InputError: neither ``eos_id`` nor ``stop``, a ``beam_size`` below 1, or a source without a real token.
    """
    _check_inputs(src_mask, beam_size)
    if stop is None:
        if eos_id is None:
            raise InputError("generate needs eos_id or a stop criterion")
        stop = EosStop(eos_id)
    min_len, max_len = length_limits(src_mask, max_len_a, max_len_b, min_len_a, min_len_b)
    memory = model.encode(src, src_mask)
    cache = model.init_cache(memory, src_mask)
    search = _greedy if beam_size == 1 else _beam
    seqs, scores = search(model, cache, src_mask.shape[0], beam_size, bos_id, eos_id, min_len.to(src_mask.device),
                          max_len.to(src_mask.device), length_penalty, no_repeat_ngram_size, stop, src_mask.device)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    tokens = torch.full((len(seqs), int(lengths.max()) if len(seqs) else 0), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, :len(s)] = s.cpu()
    return Generation(tokens.to(src_mask.device), lengths.to(src_mask.device),
                      torch.tensor(scores, dtype=torch.float32, device=src_mask.device))


def _normalise(score: torch.Tensor, length: int, length_penalty: float) -> float:
    return float(score) / (length ** length_penalty)


def _greedy(model: TokenModel, cache: Any, B: int, K: int, bos_id: int, eos_id: int | None, min_len: torch.Tensor,
            max_len: torch.Tensor, length_penalty: float, ngram: int, stop: StopCriterion,
            device: torch.device) -> tuple[list[torch.Tensor], list[float]]:
    active = torch.arange(B, device=device)          # original row of each live row
    hyps = torch.zeros(B, 0, dtype=torch.long, device=device)
    total = torch.zeros(B, dtype=torch.float64, device=device)
    last = torch.full((B,), bos_id, dtype=torch.long, device=device)
    seqs: list[torch.Tensor | None] = [None] * B
    scores = [0.0] * B
    t = 0
    while len(active):
        logits, cache = model.decode_step(last[:, None], cache)                       # [A, V]
        lo, hi = min_len[active], max_len[active]
        lp = _constrain(F.log_softmax(logits.double(), -1), t, hyps, lo, hi, eos_id, ngram)
        tok = lp.argmax(-1)                                                            # [A]
        total = total + lp.gather(1, tok[:, None])[:, 0]
        hyps = torch.cat([hyps, tok[:, None]], 1)
        ended = (stop(StepOutput(t, tokens=tok)) & (t >= lo)) | (t + 1 >= hi)
        for a in ended.nonzero()[:, 0].tolist():
            seqs[int(active[a])] = hyps[a]
            scores[int(active[a])] = _normalise(total[a], t + 1, length_penalty)
        if ended.any():
            keep = (~ended).nonzero()[:, 0]
            if not len(keep):
                break
            active, hyps, total, tok = active[keep], hyps[keep], total[keep], tok[keep]
            cache = reorder_batch(cache, keep)
        last = tok
        t += 1
    return seqs, scores  # type: ignore[return-value]


def _beam(model: TokenModel, cache: Any, B: int, K: int, bos_id: int, eos_id: int | None, min_len: torch.Tensor,
          max_len: torch.Tensor, length_penalty: float, ngram: int, stop: StopCriterion,
          device: torch.device) -> tuple[list[torch.Tensor], list[float]]:
    cache = reorder_batch(cache, torch.arange(B, device=device).repeat_interleave(K))  # every source K times
    active = torch.arange(B, device=device)                 # original source of each live source [A]
    hyps = torch.zeros(B * K, 0, dtype=torch.long, device=device)
    beam_scores = torch.full((B, K), float("-inf"), dtype=torch.float64, device=device)
    beam_scores[:, 0] = 0.0                                 # the K copies start identical: expand one
    last = torch.full((B * K,), bos_id, dtype=torch.long, device=device)
    finished: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(B)]
    t = 0
    while len(active):
        A = len(active)
        logits, cache = model.decode_step(last[:, None], cache)                       # [A*K, V]
        lo, hi = min_len[active], max_len[active]                                      # [A]
        lp = _constrain(F.log_softmax(logits.double(), -1), t, hyps, lo.repeat_interleave(K),
                        hi.repeat_interleave(K), eos_id, ngram)                        # [A*K, V]
        V = lp.shape[-1]
        cand = (beam_scores.reshape(-1, 1) + lp).view(A, K * V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)                      # [A, 2K]
        top_tok = top_idx % V
        rows = torch.arange(A, device=device)[:, None] * K + top_idx // V             # [A, 2K] row in the batch
        is_stop = stop(StepOutput(t, tokens=top_tok.flatten())).view(A, -1) & (t >= lo)[:, None]
        is_stop = (is_stop | (t + 1 >= hi)[:, None]) & torch.isfinite(top_scores)
        for a, j in is_stop[:, :K].nonzero().tolist():  # stops among the best K candidates finish
            fin = finished[int(active[a])]
            if len(fin) < K:
                seq = torch.cat([hyps[rows[a, j]], top_tok[a, j:j + 1]])
                fin.append((_normalise(top_scores[a, j], t + 1, length_penalty), seq))
        order = torch.argsort(is_stop.to(torch.int8), dim=1, stable=True)[:, :K]      # the best K that go on
        beam_scores = top_scores.gather(1, order).masked_fill(is_stop.gather(1, order), float("-inf"))  # [A, K]
        new_rows = rows.gather(1, order).flatten()                                     # [A*K]
        last = top_tok.gather(1, order).flatten()
        hyps = torch.cat([hyps[new_rows], last[:, None]], 1)
        cache = _reorder(cache, new_rows, same_sources=True)
        done = torch.tensor([len(finished[int(s)]) >= K for s in active], device=device)
        done = done | (t + 1 >= hi) | ~torch.isfinite(beam_scores).any(1)
        if done.any():
            keep = (~done).nonzero()[:, 0]
            if not len(keep):
                break
            keep_rows = (keep[:, None] * K + torch.arange(K, device=device)).flatten()
            active, beam_scores = active[keep], beam_scores[keep]
            hyps, last = hyps[keep_rows], last[keep_rows]
            cache = reorder_batch(cache, keep_rows)
        t += 1
    seqs, scores = [], []
    for fin in finished:  # a source whose every hypothesis became impossible (-inf) gets an empty one
        best = max(fin, key=lambda f: f[0]) if fin else (float("-inf"), hyps.new_zeros(0))
        seqs.append(best[1])
        scores.append(best[0])
    return seqs, scores


# ---------------------------------------------------------------------------------------------------- frames
@torch.no_grad()
def generate_frames(model: FrameModel, src: torch.Tensor, src_mask: torch.Tensor, start: torch.Tensor, *,
                    max_len_a: float = 0.0, max_len_b: int = 1000, min_len_a: float = 0.0, min_len_b: int = 0,
                    stop: StopCriterion | None = None,
                    feedback: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    lengths: torch.Tensor | None = None) -> FrameGeneration:
    """Greedy decoding of continuous frames (text-to-speech): ``model.decode_step(previous [N, 1, C_in], cache)
    -> (frame [N, C], stop_logit [N], cache)``; the next input is ``feedback(frame)`` (default: the frame itself).
    ``start`` [C_in] or [B, C_in] is the first input (e.g. the all-zero "go" frame). A row ends at the first frame
    whose ``stop`` says so (default ``StopProbability(0.5)``), not before ``min_len`` frames, at most ``max_len``.
    ``lengths`` [B] (optional) fixes each row's number of frames instead: the stop rule and the limits are ignored
    (synthesis at a given duration, e.g. the reference's).

    Args:
        model: the model (:class:`FrameModel`).
        src: [B, S, ...] the sources.
        src_mask: [B, S] bool, True = real source token.
        start: [C_in] or [B, C_in], the first input.
        max_len_a: the maximum length's factor on the source's real tokens (as :func:`length_limits`).
        max_len_b: the maximum length's constant.
        min_len_a: the minimum length's factor on the source's real tokens.
        min_len_b: the minimum length's constant.
        stop: the stop criterion (None: ``StopProbability(0.5)``).
        feedback: the next input from a frame (None: the frame itself).
        lengths: [B] frames per row, or None (above).
    """
    _check_inputs(src_mask, 1)
    stop = stop or StopProbability(0.5)
    B = src_mask.shape[0]
    min_len, max_len = length_limits(src_mask, max_len_a, max_len_b, min_len_a, min_len_b)
    if lengths is not None:
        if lengths.shape != (B,) or bool((lengths < 1).any()):
            raise InputError(f"lengths must hold one positive frame count per source ({B}), got {list(lengths.shape)}"
                             f" with minimum {int(lengths.min()) if lengths.numel() else 'n/a'}")
        min_len = max_len = lengths.long()
        stop = _never_stop
    min_len, max_len = min_len.to(src_mask.device), max_len.to(src_mask.device)
    cache = model.init_cache(model.encode(src, src_mask), src_mask)
    prev = (start.expand(B, -1) if start.dim() == 1 else start)[:, None]              # [B, 1, C_in]
    active = torch.arange(B, device=src_mask.device)
    outputs: list[torch.Tensor] = []                                                  # per step [B, C] (zeros: done)
    lengths = torch.zeros(B, dtype=torch.long, device=src_mask.device)
    t = 0
    while len(active):
        frame, stop_logit, cache = model.decode_step(prev, cache)                     # [A, C], [A]
        full = frame.new_zeros(B, frame.shape[-1])
        full[active] = frame
        outputs.append(full)
        lengths[active] = t + 1
        ended = (stop(StepOutput(t, frames=frame, stop_logits=stop_logit)) & (t + 1 >= min_len[active]))
        ended = ended | (t + 1 >= max_len[active])
        nxt = feedback(frame) if feedback is not None else frame
        if ended.any():
            keep = (~ended).nonzero()[:, 0]
            if not len(keep):
                break
            active, nxt = active[keep], nxt[keep]
            cache = reorder_batch(cache, keep)
        prev = nxt[:, None]
        t += 1
    frames = torch.stack(outputs, 1) if outputs else src.new_zeros(B, 0, 0)          # [B, L, C]
    return FrameGeneration(frames, lengths)
