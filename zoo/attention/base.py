"""The one attention contract every mechanism (LAVO and the baselines) follows; see docs/architecture.md.

    attn = build_attention("lavo", embed_dim=256, num_heads=4, pattern="causal", num_bases=32, window_size=16)
    y = attn(x)                                          # x [B, T, D] -> y [B, T, D]
    y = attn(x, padding_mask=m)                          # m [B, T] bool, True = real token
    y, state = attn(x, state=None, return_state=True)    # streaming (causal, mechanisms with streaming=True)
    y = attn(x_tgt, context=x_src, context_mask=m_src)   # pattern="cross"

Subclasses set ``patterns`` and ``streaming`` and implement :meth:`Attention.attend`; :meth:`Attention.forward`
validates the inputs once, here, so every mechanism refuses bad input with the same clear messages.

Incremental decoding (encoder-decoder models, one API for every mechanism and both decoder sites):

    state = None                                          # causal self-attention
    cache = cross.cross_cache(src, src_mask)              # cross attention: the source, prepared once
    y, state = attn.step(x_t, state)                      # x_t [B, t, D], t >= 1 new positions
    y, cache = cross.step(x_t, cache)
    state = reorder_batch(state, index)                   # beams: index [B'] into the batch (repeats allowed)

The defaults here work for every mechanism: a streaming mechanism carries its state; one without streaming
re-runs its prefix (:class:`PrefixState`); the cross cache keeps the source and re-projects it each step
(:class:`SourceCache`), unless the mechanism overrides :meth:`Attention.cross_cache` / :meth:`Attention.cross_step`
(LAVO keeps its [H, d] mean memory, sdpa its projected keys and values). :meth:`Attention.decoding` says which.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

PATTERNS = ("causal", "noncausal", "cross")


def reorder_batch(obj: Any, index: torch.Tensor) -> Any:
    """``obj`` with its batch axis re-indexed by ``index`` [B'] (int64; repeats allowed, e.g. beam expansion).

    Tensors are indexed on dim 0 (every streaming state here is batch-first); an object with a ``reorder`` method
    uses it; dataclasses, tuples, lists and dicts are walked; anything else (ints, None) is kept.
    """
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, index.to(obj.device))
    if hasattr(obj, "reorder") and callable(obj.reorder):
        return obj.reorder(index)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _reorder_fields(obj, index)
    if isinstance(obj, (tuple, list)):
        return type(obj)(reorder_batch(o, index) for o in obj)
    if isinstance(obj, dict):
        return {k: reorder_batch(v, index) for k, v in obj.items()}
    return obj


def _reorder_fields(obj: Any, index: torch.Tensor) -> Any:
    return dataclasses.replace(obj, **{f.name: reorder_batch(getattr(obj, f.name), index)
                                       for f in dataclasses.fields(obj) if f.init})


class StreamingState:
    """Mixin for the dataclasses that hold decoding state: ``reorder(index)`` re-indexes the batch (dim 0 of every
    tensor field; other fields are kept) and returns a new state."""

    def reorder(self, index: torch.Tensor) -> Any:
        """A new state with the batch re-indexed by ``index`` [B'] (:func:`reorder_batch` of every field)."""
        return _reorder_fields(self, index)


@dataclass
class PrefixState(StreamingState):
    """Causal decoding state of a mechanism without streaming: every input so far, re-run at each step."""

    inputs: torch.Tensor  # [B, P, D]


@dataclass
class SourceCache(StreamingState):
    """Default cross-attention cache: the source itself (re-projected at each step), and for mechanisms whose
    queries interact (``mixes_queries``) the queries so far, re-run with each step's new ones."""

    context: torch.Tensor                      # [B, S, D]
    context_mask: torch.Tensor | None = None   # [B, S] bool, True = real token
    queries: torch.Tensor | None = None        # [B, P, D] (mixes_queries only)


class Attention(nn.Module):
    """Base class: multi-head attention over ``[B, T, D]`` inputs with one of ``PATTERNS``."""

    patterns: ClassVar[tuple[str, ...]] = ()
    streaming: ClassVar[bool] = False  # causal pattern can carry a recurrent state / cache across chunks
    description: ClassVar[str] = ""
    # what ``lavo-zoo list attentions`` shows beside the patterns: the mechanism's family and the size of its causal
    # decoding state in the contract's symbols (D width, H heads, T tokens so far, and its options)
    family: ClassVar[str] = ""
    decoding_state: ClassVar[str] = ""
    # what a noncausal layer keeps of its sequence for the queries to read, in the same symbols (shown where declared;
    # a noncausal layer never streams: its queries need the whole sequence first)
    noncausal_state: ClassVar[str] = ""
    # False for mechanisms whose eval-mode output is not a fixed function of the valid tokens (e.g. sampled keys),
    # so that exact invariance tests (padding, streaming == full) know to use a tolerance or skip.
    deterministic: ClassVar[bool] = True
    # constructor options that change no weight, which ``lavo-zoo eval`` may override on a trained checkpoint
    # (``model.attention.<option>=...``, e.g. LAVO's global_read: the same weights with the memory switched off)
    eval_options: ClassVar[tuple[str, ...]] = ()
    # options whose default changed, with the value they had before: a saved config that does not record them
    # (written before the change) is read with these (AttentionSpec.with_former_defaults); configs saved since
    # always record them (AttentionSpec.to_config)
    former_defaults: ClassVar[dict[str, Any]] = {}
    # Patterns in which a query's output also depends on the other queries of the call (landmarks or a top-u
    # selection over the queries, a scale set by the number of queries): step-by-step decoding then equals
    # re-running every prefix, not one forward over the whole target, and a teacher-forced decoder sees the future.
    mixes_queries: ClassVar[tuple[str, ...]] = ()
    # False for a control whose output ignores its queries (``mean``): in cross attention the target then gets no
    # gradient through the site, which the contract allows for such a mechanism only.
    reads_queries: ClassVar[bool] = True
    # True where the causal decoding state grows with the tokens decoded (a KV cache); False: it has a constant size
    state_grows: ClassVar[bool] = False
    # Small non-default options with which the tests cross every chunk, window, segment and landmark boundary of the
    # mechanism at a few dozen tokens (as timm keeps ``default_cfg`` beside each model): the zoo's tests build every
    # registered mechanism with them beside its defaults (:meth:`test_options_for`)
    test_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal") -> None:
        """What every mechanism's constructor passes on first (its own options follow).

        Args:
            embed_dim: D, the model width; inputs are [B, T, D].
            num_heads: H (D must divide by H: head dim d = D / H).
            pattern: causal, noncausal or cross; one of the class's ``patterns``.

        Raises:
            ValueError: an unknown or unsupported pattern, a width or head count that is not an int, or a width that
                does not divide into the heads.
        """
        super().__init__()
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got '{pattern}'")
        if pattern not in self.patterns:
            raise ValueError(f"{type(self).__name__} does not support pattern '{pattern}'; "
                             f"it supports: {', '.join(self.patterns)}")
        for arg, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):  # the contract's error: ValueError
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(  # noqa: TRY004
                    f"{arg} must be a whole number (an int), got {type(value).__name__} {value!r}")
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be a positive multiple of num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.pattern = pattern

    @property
    def encodes_position(self) -> bool:
        """True when the mechanism injects position itself (LAVO's EPE, rotary), so a backbone may drop its own."""
        return False

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, *,
                context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None,
                state: Any = None, return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Attend: validate the inputs once, then run the mechanism (:meth:`attend`).

        Args:
            x: the queries' sequence [B, T, D] (D = ``embed_dim``).
            padding_mask: [B, T] bool, True = a real token (None: all real). A padded position changes no real
                output; its own output is unspecified.
            context: the source [B, S, D]; required with pattern ``cross``, refused otherwise.
            context_mask: [B, S] bool, True = a real source token (None: all real); ``cross`` only.
            state: the state a previous chunk returned (``causal`` and ``streaming`` mechanisms only): the chunk
                continues that sequence.
            return_state: also return the state after this chunk (same condition; no ``padding_mask``).

        Returns:
            y [B, T, D], or (y, state) with ``return_state``.

        Raises:
            ValueError: a shape, dtype or mask does not fit, ``context`` is missing or not allowed for the pattern,
                or streaming is asked of a pattern or mechanism without a state.
        """
        self._check(x, "x", padding_mask, "padding_mask")
        if self.pattern == "cross":
            if context is None:
                raise ValueError("pattern 'cross' needs context=[B, S, D] (the source sequence)")
            self._check(context, "context", context_mask, "context_mask")
            if context.shape[0] != x.shape[0]:
                raise ValueError(f"context batch {context.shape[0]} != x batch {x.shape[0]}")
        elif context is not None or context_mask is not None:
            raise ValueError(f"context is only used with pattern 'cross' (this attention is '{self.pattern}')")
        if (state is not None or return_state) and not (self.pattern == "causal" and self.streaming):
            raise ValueError(f"{type(self).__name__} with pattern '{self.pattern}' has no streaming state; "
                             "state/return_state need pattern 'causal' and a mechanism with streaming=True")
        if (state is not None or return_state) and padding_mask is not None:
            raise ValueError("streaming (state/return_state) does not take a padding_mask; feed real tokens only")
        return self.attend(x, padding_mask, context, context_mask, state, return_state)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Mechanism-specific computation on validated inputs (:meth:`forward` checked them): what each mechanism
        implements, and the statement of its arguments for every override.

        Args:
            x: the queries' sequence [B, T, D].
            padding_mask: [B, T] bool, True = a real token, or None (all real).
            context: cross: the source [B, S, D]; None for the other patterns.
            context_mask: cross: [B, S] bool, True = a real source token, or None (all real).
            state: causal streaming: the state a previous chunk returned, or None (the sequence starts here).
            return_state: also return the state after this chunk (causal streaming mechanisms; no padding then).

        Returns:
            y [B, T, D], or (y, state) with ``return_state``.
        """
        raise NotImplementedError

    @classmethod
    def test_options_for(cls, pattern: str) -> dict[str, Any]:
        """:attr:`test_options` for ``pattern`` (a mechanism whose option suits some patterns only drops it where it
        does not apply).

        Args:
            pattern: one of the class's ``patterns``.
        """
        return dict(cls.test_options)

    # ------------------------------------------------------------------------------------------ decoding
    @classmethod
    def decoding(cls, pattern: str) -> str:
        """How :meth:`step` decodes ``pattern``: 'state' (causal: a streaming state), 'cache' (cross: the source
        prepared once), 'source' (cross: the source kept and re-projected each step), 'prefix' (falls back to
        re-running the prefix: no streaming, or ``mixes_queries``), '' (``pattern`` is not decoded step by step)."""
        if pattern not in ("causal", "cross") or pattern not in cls.patterns:
            return ""
        if pattern in cls.mixes_queries:
            return "prefix"
        if pattern == "causal":
            return "state" if cls.streaming else "prefix"
        return "cache" if cls.cross_cache is not Attention.cross_cache else "source"

    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> Any:
        """The cross-attention cache of a source (context [B, S, D], context_mask [B, S]), computed once and used by
        every :meth:`step`. Default: the source itself (:class:`SourceCache`); mechanisms override it to keep less."""
        if self.pattern != "cross":
            raise ValueError(f"cross_cache needs pattern 'cross' (this attention is '{self.pattern}')")
        self._check(context, "context", context_mask, "context_mask")
        return SourceCache(context, context_mask)

    def cross_step(self, x: torch.Tensor, cache: Any) -> torch.Tensor:
        """Cross attention of new queries x [B, t, D] against the cached source -> [B, t, D] (no ``mixes_queries``).
        Default: re-project the kept source (a :class:`SourceCache`; another mechanism's cache is a TypeError)."""
        if not isinstance(cache, SourceCache):
            raise TypeError(f"cache must be the SourceCache that this attention's cross_cache() returned, got "
                            f"{type(cache).__name__} (another mechanism's cache)")
        self._check(cache.context, "the cache's context", cache.context_mask, "the cache's context_mask")
        return self.attend(x, None, cache.context, cache.context_mask, None, False)

    def step(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """Decode t >= 1 new positions x [B, t, D] -> (y [B, t, D], new state).

        causal: ``state`` is None at the first step, then what the previous step returned; cross: ``state`` is
        :meth:`cross_cache`'s result. Equals the one-pass forward at those positions (for ``mixes_queries``
        patterns: the forward over the prefix so far)."""
        self._check(x, "x", None, "")
        if self.pattern == "noncausal":
            raise ValueError("step() decodes causal self-attention or cross attention; this attention is 'noncausal'")
        batch = self._state_batch(state)
        if batch not in (None, x.shape[0]):
            raise ValueError(f"state is for batch {batch}, input has batch {x.shape[0]}: decode with the state of "
                             "this batch (after beam expansion, reorder it with reorder_batch)")
        t = x.shape[1]
        if self.pattern == "causal":
            if self.decoding("causal") == "state":
                return self(x, state=state, return_state=True)
            if state is not None and not isinstance(state, PrefixState):
                raise TypeError(f"state must be the PrefixState returned by step(), got {type(state).__name__}")
            inputs = x if state is None else torch.cat([state.inputs, x], 1)  # [B, P + t, D]
            return self(inputs)[:, inputs.shape[1] - t:], PrefixState(inputs)
        if state is None:
            raise ValueError("cross attention's step() needs the cache from cross_cache(context, context_mask)")
        if "cross" in self.mixes_queries:
            if not isinstance(state, SourceCache):
                raise TypeError(f"state must be the SourceCache from cross_cache(), got {type(state).__name__}")
            queries = x if state.queries is None else torch.cat([state.queries, x], 1)  # [B, P + t, D]
            y = self(queries, context=state.context, context_mask=state.context_mask)[:, queries.shape[1] - t:]
            return y, dataclasses.replace(state, queries=queries)
        return self.cross_step(x, state), state

    @staticmethod
    def _state_batch(state: Any) -> int | None:
        """Batch size of a decoding state (dim 0 of its first tensor), None when it holds no tensor."""
        if isinstance(state, torch.Tensor):
            return state.shape[0]
        if dataclasses.is_dataclass(state):
            for f in dataclasses.fields(state):
                b = Attention._state_batch(getattr(state, f.name))
                if b is not None:
                    return b
        return None

    def _check(self, t: torch.Tensor, name: str, mask: torch.Tensor | None, mask_name: str) -> None:
        if not isinstance(t, torch.Tensor):  # the contract's error for any input that does not fit: ValueError
            raise ValueError(f"{name} must be a tensor [B, T, {self.embed_dim}], got {type(t).__name__}")  # noqa: TRY004
        if t.dim() != 3 or t.shape[-1] != self.embed_dim:
            raise ValueError(f"{name} must have shape [B, T, {self.embed_dim}] (embed_dim={self.embed_dim}), "
                             f"got {list(t.shape)}")
        self._check_dtype(t, name)
        if mask is not None and (mask.dtype != torch.bool or mask.shape != t.shape[:2]):
            raise ValueError(f"{mask_name} must be a bool tensor of shape {list(t.shape[:2])} "
                             f"(True = real token), got {mask.dtype} {list(mask.shape)}")

    def _check_dtype(self, t: torch.Tensor, name: str) -> None:
        """A floating-point input of the layer's own dtype (its first floating parameter's), unless autocast runs on
        its device and casts for the layer's products."""
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        weight = next((p for p in self.parameters() if p.is_floating_point()), None)
        if weight is None or t.dtype == weight.dtype or torch.is_autocast_enabled(t.device.type):
            return
        raise ValueError(f"{name} is {t.dtype} and this layer's weights are {weight.dtype}: give {name} in "
                         f"{weight.dtype} ({name}.to({weight.dtype})), move the layer to {t.dtype} "
                         f"(attn.to({t.dtype})), or run it under torch.autocast")

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, pattern={self.pattern}"


def tensor_bytes(state: Any) -> int:
    """Bytes held by the tensors of a decoding state (what :meth:`Attention.step` returns, or a model's states of
    every layer): tensors count numel x element size; dataclasses, lists, tuples and dicts are walked; other values
    (a position counter, None) count 0."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return sum(tensor_bytes(getattr(state, f.name)) for f in dataclasses.fields(state))
    if isinstance(state, (list, tuple)):
        return sum(tensor_bytes(s) for s in state)
    if isinstance(state, dict):
        return sum(tensor_bytes(s) for s in state.values())
    return 0
