"""Transformer blocks and stacks around any registry attention (see :mod:`lavo_zoo.attention`).

    enc = TransformerEncoder(2, 256, 4, 1024, attention=AttentionSpec("lavo", {"num_bases": 32}))
    dec = TransformerDecoder(2, 256, 4, 1024, self_attention=AttentionSpec("lavo"),
                             cross_attention=AttentionSpec("sdpa"))
    memory = enc(src, src_mask)                     # src [B, S, D], src_mask [B, S] bool (True = real token)
    y = dec(tgt, memory, src_mask, tgt_mask)        # teacher forcing: tgt [B, T, D] -> [B, T, D]
    cache = dec.init_cache(memory, src_mask)        # cross-attention caches, computed once per source
    y_t, cache = dec.step(tgt_t, cache)             # tgt_t [B, t, D]: t >= 1 new positions (cache.position = offset)
    cache = cache.reorder(index)                    # beams: index [B'] into the batch (repeats allowed)

Blocks are pre-LN by default (``norm_first=True``: x + Dropout(Sublayer(LN(x))), fairseq ``normalize_before``) and
post-LN with ``norm_first=False`` (LN(x + Dropout(Sublayer(x))), Vaswani et al.; Informer). A pre-LN stack ends with
a LayerNorm (``final_norm``, default: ``norm_first``).

Attention sites take an ``AttentionSpec`` (``lavo_zoo.attention.spec``; a bare name or a ``{name: ..., **options}``
mapping is accepted too), built for the site's pattern (``SITE_PATTERNS``): a mechanism that cannot do it is refused
naming the site, the pattern and the mechanisms that can. A list of them, one per layer, makes a hybrid stack (the
layers of a config's ``attention_schedule``, :func:`lavo_zoo.attention.schedule.attention_layers`): each layer then
carries its own mechanism's state through ``step`` and streaming. ``attention_dropout`` becomes the mechanism's
``dropout`` option where it has one and the spec does not set it (mechanisms without attention-probability dropout
ignore it).

Decoding state per layer: the self-attention's streaming state (LAVO's constant-size recurrent state, the softmax
KV cache, the window ring, ...; mechanisms without streaming re-run their prefix) and the cross attention's source
cache (LAVO: its [H, d] mean memory; sdpa: projected K/V; others: the source, re-projected). See
:meth:`lavo_zoo.attention.base.Attention.step`. A decoder with a site whose mechanism mixes queries
(``Attention.mixes_queries``: ProbSparse, and LARA / Nystromformer / cosFormer as cross attention) re-runs its
forward over the target so far at each step (``TransformerDecoder.reruns_prefix``): a position's output then
depends on the target length, so step-by-step decoding equals the forward over each prefix, and a teacher-forced
forward lets earlier positions see later ones.

Beyond the shared block interface: sites also accept a name or a mapping; ``DecoderCache`` is
immutable (``step`` and ``reorder`` return new caches) and ``reorder(index, cross=False)`` skips the per-source
cross caches when rows only move between beams of the same source; ``DecoderCache.position`` is the next step's
position offset (for position embeddings); ``final_norm`` (default ``norm_first``).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lavo_zoo.attention import ATTENTIONS, attention_info, check_attention
from lavo_zoo.attention.base import Attention, SourceCache, reorder_batch, tensor_bytes
from lavo_zoo.attention.schedule import attention_layers
from lavo_zoo.attention.spec import SITE_PATTERNS, AttentionSpec
from lavo_zoo.errors import ConfigError, InputError, OptionError, did_you_mean
from lavo_zoo.nn.position import sinusoidal_positions

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


def _as_spec(spec: Any, site: str) -> Any:
    """An ``AttentionSpec`` (or anything with ``.name`` and ``.options``) from a spec, a name or a mapping."""
    if isinstance(spec, (str, Mapping)):
        value = dict(spec) if isinstance(spec, Mapping) else spec
        spec = AttentionSpec.from_config(value, site, "the model's arguments")
        spec.origin = None  # not read from a config: a refused option is the mechanism's own error
        return spec
    if not (hasattr(spec, "name") and hasattr(spec, "options")):
        raise ConfigError(f"attention site '{site}': expected an AttentionSpec, a name or a mapping, "
                          f"got {type(spec).__name__}")
    return spec


def per_layer(spec: Any, num_layers: int, site: str) -> list[Any]:
    """One attention per layer: a list (or tuple) of ``num_layers`` specs as given, a single spec repeated.

    Raises:
        ConfigError: a list of another length."""
    if isinstance(spec, (list, tuple)):
        if len(spec) != num_layers:
            raise ConfigError(f"attention site '{site}': {len(spec)} attentions for {num_layers} layers; give one per "
                              "layer (or one for all)")
        return list(spec)
    return [spec] * num_layers


def build_site_attention(spec: Any, embed_dim: int, num_heads: int, site: str,
                         attention_dropout: float = 0.0) -> Attention:
    """Build the attention of ``site`` (a key of ``SITE_PATTERNS``) from its spec, for the site's pattern: a
    mechanism that cannot do the pattern is a ConfigError naming the site, the pattern and the mechanisms that can.

    Args:
        spec: the site's attention spec (an AttentionSpec, a name or a mapping).
        embed_dim: D.
        num_heads: H.
        site: the site (``encoder_self``, ``decoder_self`` or ``cross``: ``SITE_PATTERNS``).
        attention_dropout: dropout on the attention probabilities, the default of a mechanism with a ``dropout``
            option (one the spec sets wins).
    """
    if site not in SITE_PATTERNS:
        raise ConfigError(f"unknown attention site '{site}'{did_you_mean(site, SITE_PATTERNS)}; "
                          f"the sites are {', '.join(SITE_PATTERNS)}")
    spec, pattern = _as_spec(spec, site), SITE_PATTERNS[site]
    if spec.name in ATTENTIONS:
        check_attention(spec.name, pattern, key=site)  # a ConfigError naming the site and pattern it cannot do
    options = dict(spec.options)
    if attention_dropout and spec.name in ATTENTIONS and "dropout" in attention_info(spec.name).options:
        options.setdefault("dropout", attention_dropout)
    # a spec read from a config names its key (the site) and file when an option is refused
    return AttentionSpec(spec.name, options, origin=getattr(spec, "origin", None)).build(embed_dim, num_heads, pattern)


class FeedForward(nn.Module):
    """Linear(D -> F), activation, dropout, Linear(F -> D): the transformer's position-wise MLP (the dropout after
    the second linear layer belongs to the residual connection around it, in the block)."""

    def __init__(self, embed_dim: int, ffn_dim: int, dropout: float = 0.0, activation: str = "gelu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise OptionError(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{activation}'"
                              f"{did_you_mean(activation, ACTIVATIONS)}")
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, T, D]
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # [B, T, D]


class _Residual(nn.Module):
    """One sublayer's residual connection with its LayerNorm before (pre-LN) or after (post-LN) it."""

    def __init__(self, dim: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        """The sublayer's input: LN(x) for pre-LN, x for post-LN."""
        return self.norm(x) if self.norm_first else x

    def outer(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Combine the residual x with the sublayer output h."""
        y = x + self.dropout(h)
        return y if self.norm_first else self.norm(y)


class EncoderBlock(nn.Module):
    """Noncausal self-attention + feed-forward, each a residual sublayer (pre-LN or post-LN)."""

    def __init__(self, attention: Attention, ffn_dim: int, dropout: float = 0.0, activation: str = "gelu",
                 norm_first: bool = True) -> None:
        super().__init__()
        dim = attention.embed_dim
        self.attn = attention
        self.attn_res = _Residual(dim, dropout, norm_first)
        self.ffn = FeedForward(dim, ffn_dim, dropout, activation)
        self.ffn_res = _Residual(dim, dropout, norm_first)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, D], padding_mask [B, S] (True = real) -> [B, S, D]."""
        x = self.attn_res.outer(x, self.attn(self.attn_res.inner(x), padding_mask))
        return self.ffn_res.outer(x, self.ffn(self.ffn_res.inner(x)))


class DecoderBlock(nn.Module):
    """Causal self-attention, cross attention over an encoder output, feed-forward (pre-LN or post-LN)."""

    def __init__(self, self_attention: Attention, cross_attention: Attention, ffn_dim: int, dropout: float = 0.0,
                 activation: str = "gelu", norm_first: bool = True) -> None:
        super().__init__()
        dim = self_attention.embed_dim
        self.self_attn, self.cross_attn = self_attention, cross_attention
        self.self_res = _Residual(dim, dropout, norm_first)
        self.cross_res = _Residual(dim, dropout, norm_first)
        self.ffn = FeedForward(dim, ffn_dim, dropout, activation)
        self.ffn_res = _Residual(dim, dropout, norm_first)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, D], memory [B, S, D], memory_mask [B, S], padding_mask [B, T] (True = real) -> [B, T, D].

        Its arguments are stated on `TransformerDecoder.forward`.
        """
        x = self.self_res.outer(x, self.self_attn(self.self_res.inner(x), padding_mask))
        x = self.cross_res.outer(x, self.cross_attn(self.cross_res.inner(x), padding_mask, context=memory,
                                                    context_mask=memory_mask))
        return self.ffn_res.outer(x, self.ffn(self.ffn_res.inner(x)))

    def step(self, x: torch.Tensor, self_state: Any, cross_cache: Any) -> tuple[torch.Tensor, Any, Any]:
        """t new positions x [B, t, D] -> (y [B, t, D], self_state, cross_cache) (see Attention.step)."""
        h, self_state = self.self_attn.step(self.self_res.inner(x), self_state)
        x = self.self_res.outer(x, h)
        h, cross_cache = self.cross_attn.step(self.cross_res.inner(x), cross_cache)
        x = self.cross_res.outer(x, h)
        return self.ffn_res.outer(x, self.ffn(self.ffn_res.inner(x))), self_state, cross_cache


def check_has_real_token(mask: torch.Tensor | None, name: str, like: torch.Tensor | None = None) -> None:
    """Refuse a padding mask that is not a bool [B, S] tensor (the first two dims of ``like`` when given) or that has
    a row without a real (True) token: such a source has nothing to attend to."""
    if mask is None:
        return
    shape = list(like.shape[:2]) if like is not None else None
    if mask.dtype != torch.bool or mask.dim() != 2 or (shape is not None and list(mask.shape) != shape):
        raise InputError(f"{name} must be a bool tensor of shape {shape or '[B, S]'} "
                         f"(True = real token), got {mask.dtype} {list(mask.shape)}")
    empty = (~mask.any(1)).nonzero()[:, 0]
    if len(empty):
        raise InputError(f"{name} has no real token in batch row(s) {empty.tolist()[:8]}: every source needs at "
                         "least one real (True) position; drop empty sources before encoding")


class TransformerEncoder(nn.Module):
    """A stack of :class:`EncoderBlock` (noncausal self-attention of ``attention``'s mechanism, or of each layer's
    where ``attention`` is a list of one per layer)."""

    def __init__(self, num_layers: int, embed_dim: int, num_heads: int, ffn_dim: int, attention: Any = "sdpa",
                 dropout: float = 0.0, attention_dropout: float = 0.0, activation: str = "gelu",
                 norm_first: bool = True, final_norm: bool | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderBlock(build_site_attention(spec, embed_dim, num_heads, "encoder_self", attention_dropout),
                         ffn_dim, dropout, activation, norm_first)
            for spec in per_layer(attention, num_layers, "encoder_self"))
        self.norm = nn.LayerNorm(embed_dim) if (norm_first if final_norm is None else final_norm) else None

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, D], padding_mask [B, S] bool (True = real token) -> [B, S, D]."""
        check_has_real_token(padding_mask, "padding_mask", x)
        for layer in self.layers:
            x = layer(x, padding_mask)
        return x if self.norm is None else self.norm(x)


@dataclass
class DecoderCache:
    """Incremental decoding state of a :class:`TransformerDecoder` for one batch of sources."""

    self_states: list[Any]   # per layer: the self-attention's streaming state (None before the first step)
    cross_caches: list[Any]  # per layer: the cross attention's source cache (computed once by init_cache)
    batch_size: int
    position: int            # target positions decoded so far (the next step's position offset)
    owner: int               # id() of the decoder that made it
    rerun: SourceCache | None = None  # decoders with a mixes_queries site: memory, its mask and the target so far

    def reorder(self, index: torch.Tensor, cross: bool = True) -> DecoderCache:
        """A new cache whose row i is row ``index[i]`` of this one (index [B'] int64, repeats allowed).

        ``cross=False`` keeps the cross caches as they are: valid when ``index`` maps every row to a row with the
        same source (beams of one source), which saves copying per-source caches (sdpa's K/V) at every step."""
        if cross:
            crosses = [reorder_batch(c, index) for c in self.cross_caches]
        elif len(index) != self.batch_size:
            raise InputError(f"reorder(cross=False) keeps the cross caches of batch {self.batch_size}; "
                             f"index has {len(index)} rows (use cross=True to change the batch size)")
        else:
            crosses = self.cross_caches
        return DecoderCache([reorder_batch(s, index) for s in self.self_states], crosses, len(index),
                            self.position, self.owner, reorder_batch(self.rerun, index))


class TransformerDecoder(nn.Module):
    """A stack of :class:`DecoderBlock`: teacher-forced ``forward`` and cached incremental ``step``.
    ``self_attention`` and ``cross_attention`` are one attention for every layer or a list of one per layer; the
    cache holds each layer's own self-attention state and cross cache."""

    def __init__(self, num_layers: int, embed_dim: int, num_heads: int, ffn_dim: int, self_attention: Any = "sdpa",
                 cross_attention: Any = "sdpa", dropout: float = 0.0, attention_dropout: float = 0.0,
                 activation: str = "gelu", norm_first: bool = True, final_norm: bool | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderBlock(build_site_attention(own, embed_dim, num_heads, "decoder_self", attention_dropout),
                         build_site_attention(cross, embed_dim, num_heads, "cross", attention_dropout),
                         ffn_dim, dropout, activation, norm_first)
            for own, cross in zip(per_layer(self_attention, num_layers, "decoder_self"),
                                  per_layer(cross_attention, num_layers, "cross")))
        self.norm = nn.LayerNorm(embed_dim) if (norm_first if final_norm is None else final_norm) else None
        self.embed_dim = embed_dim

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The decoder stack over the target, reading the encoder's output -> [B, T, D].

        Args:
            x: [B, T, D] the target, shifted right.
            memory: [B, S, D] the encoder's output.
            memory_mask: [B, S] bool, True = real source token, or None (all real).
            padding_mask: [B, T] bool, True = real target token, or None (all real).
        """
        check_has_real_token(memory_mask, "memory_mask", memory)
        for layer in self.layers:
            x = layer(x, memory, memory_mask, padding_mask)
        return x if self.norm is None else self.norm(x)

    def init_cache(self, memory: torch.Tensor, memory_mask: torch.Tensor | None = None) -> DecoderCache:
        """The decoding cache of a batch of sources (memory [B, S, D], memory_mask [B, S]): every layer's cross
        cache is computed here, once; the self-attention states start empty."""
        if memory.dim() != 3 or memory.shape[-1] != self.embed_dim:
            raise InputError(f"memory must have shape [B, S, {self.embed_dim}], got {list(memory.shape)}")
        check_has_real_token(memory_mask, "memory_mask", memory)
        if self.reruns_prefix:
            return DecoderCache([], [], memory.shape[0], 0, id(self), SourceCache(memory, memory_mask))
        crosses = [layer.cross_attn.cross_cache(memory, memory_mask) for layer in self.layers]
        return DecoderCache([None] * len(self.layers), crosses, memory.shape[0], 0, id(self))

    @property
    def reruns_prefix(self) -> bool:
        """True when a site's mechanism mixes queries (``Attention.mixes_queries``): a position's output then depends
        on the whole prefix through every layer, so each step re-runs the forward over the target so far."""
        return any("causal" in layer.self_attn.mixes_queries or "cross" in layer.cross_attn.mixes_queries
                   for layer in self.layers)

    def step(self, x: torch.Tensor, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """Decode t >= 1 new target positions x [B, t, D] -> (y [B, t, D], the updated cache).

        Equals ``forward`` at those positions (for mechanisms with ``mixes_queries`` at a site: the forward over
        the prefix so far). The cache passed in is not modified."""
        if not isinstance(cache, DecoderCache):
            raise InputError(f"cache must be the DecoderCache of init_cache(), got {type(cache).__name__}")
        if cache.owner != id(self) or len(cache.self_states) != (0 if self.reruns_prefix else len(self.layers)):
            raise InputError("this cache was made by another decoder: call init_cache() on the decoder that steps")
        if x.dim() != 3 or x.shape[0] != cache.batch_size or x.shape[-1] != self.embed_dim or x.shape[1] < 1:
            raise InputError(f"x must have shape [{cache.batch_size}, t >= 1, {self.embed_dim}] (the cache's batch "
                             f"size; reorder the cache after changing the batch), got {list(x.shape)}")
        if cache.rerun is not None:  # re-run the prefix: see reruns_prefix
            run = cache.rerun
            prefix = x if run.queries is None else torch.cat([run.queries, x], 1)  # [B, P + t, D]
            y = self(prefix, run.context, run.context_mask)[:, prefix.shape[1] - x.shape[1]:]
            return y, dataclasses.replace(cache, position=cache.position + x.shape[1],
                                          rerun=dataclasses.replace(run, queries=prefix))
        states, crosses = [], []
        for layer, state, cross in zip(self.layers, cache.self_states, cache.cross_caches):
            x, state, cross = layer.step(x, state, cross)
            states.append(state)
            crosses.append(cross)
        y = x if self.norm is None else self.norm(x)
        return y, DecoderCache(states, crosses, cache.batch_size, cache.position + x.shape[1], cache.owner)


class PreLNDecoderBlock(nn.Module):
    """Decoder-only block: x + Dropout(Attn(LN(x))), then x + Dropout(FFN(LN(x))) (fairseq ``normalize_before``).

    ``forward(x, state=s, return_state=True)`` passes the attention's streaming state (recurrent state or KV
    cache) through, so a causal decoder can consume any length chunk by chunk.
    """

    def __init__(self, attention: Attention, ffn_dim: int, dropout: float = 0.0, activation: str = "gelu") -> None:
        super().__init__()
        dim = attention.embed_dim
        self.ln_attn = nn.LayerNorm(dim)
        self.attn = attention
        self.ln_ffn = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_dim, dropout, activation)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, *, state: Any = None, return_state: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        h = self.ln_attn(x)  # [B, T, D]
        if return_state or state is not None:
            h, state = self.attn(h, state=state, return_state=True)
        else:
            h = self.attn(h)
        x = x + self.dropout(h)
        x = x + self.dropout(self.ffn(self.ln_ffn(x)))  # [B, T, D]
        return (x, state) if return_state else x


@dataclass
class DecoderState:
    """A decoder-only model's streaming state: tokens consumed so far (the next position) and each layer's attention
    state."""

    offset: int
    layers: list[Any]


class TiedDecoderLM(nn.Module):
    """The decoder-only trunk of the language models (``lm``'s GPT-2, ``recall``'s Zoology decoder): token
    embeddings (x sqrt(D), + sinusoidal positions unless the attention encodes position itself) -> dropout ->
    ``num_layers`` :class:`PreLNDecoderBlock` -> LayerNorm, and logits through the tied embeddings; fairseq's init.

    ``cfg`` holds ``vocab_size``, ``embed_dim``, ``num_heads``, ``ffn_dim``, ``num_layers``, ``dropout`` (on the
    residual branches), ``attention`` (an :class:`~lavo_zoo.attention.AttentionSpec`, built causal), optionally
    ``attention_schedule`` (a hybrid: each layer's attention, :mod:`lavo_zoo.attention.schedule`) and
    ``positions`` (``auto`` | ``sinusoidal`` | ``none``); ``embed_dropout`` is the dropout on the embeddings.
    ``attention_names`` is the mechanism of each layer; the :class:`DecoderState` holds each layer's own state.
    """

    def __init__(self, cfg: Any, embed_dropout: float) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ValueError("model.vocab_size is unset: resolve the config first (the recipe's resolve(cfg))")
        self.cfg = cfg
        self.embed_scale = math.sqrt(cfg.embed_dim)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.embed_dim)  # also the output projection (tied)
        specs = attention_layers(cfg)[""]
        self.attention_names = [spec.name for spec in specs]
        self.blocks = nn.ModuleList(
            PreLNDecoderBlock(spec.build(cfg.embed_dim, cfg.num_heads, "causal"), cfg.ffn_dim, cfg.dropout)
            for spec in specs)
        self.ln_f = nn.LayerNorm(cfg.embed_dim)
        self.dropout = nn.Dropout(embed_dropout)
        encodes = any(b.attn.encodes_position for b in self.blocks)
        self.use_positions = cfg.positions == "sinusoidal" or (cfg.positions == "auto" and not encodes)
        self.streaming = all(b.attn.streaming for b in self.blocks)  # can carry a DecoderState across chunks
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's init for the embeddings (normal, std D^-0.5) and FFN (Xavier-uniform, zero bias)."""
        nn.init.normal_(self.embed_tokens.weight, std=self.cfg.embed_dim ** -0.5)
        for block in self.blocks:
            for fc in (block.ffn.fc1, block.ffn.fc2):
                nn.init.xavier_uniform_(fc.weight)
                nn.init.zeros_(fc.bias)

    def features(self, idx: torch.Tensor, *, state: DecoderState | None = None, return_state: bool = False
                 ) -> tuple[torch.Tensor, DecoderState | None]:
        """idx [B, T] -> (the final LayerNorm's output h [B, T, D], the :class:`DecoderState` after these tokens
        when ``return_state`` or ``state`` is given, else None). ``logits(h)`` gives every position's logits."""
        if state is not None and (not isinstance(state, DecoderState) or len(state.layers) != len(self.blocks)):
            got = (f"a DecoderState of {len(state.layers)} layers" if isinstance(state, DecoderState)
                   else type(state).__name__)
            raise ValueError(f"state must be the DecoderState this model returned (return_state=True), one per each "
                             f"of its {len(self.blocks)} layers; got {got}")
        T = idx.shape[1]
        offset = state.offset if state is not None else 0
        x = self.embed_tokens(idx) * self.embed_scale  # [B, T, D]
        if self.use_positions:
            x = x + sinusoidal_positions(T, self.cfg.embed_dim, offset, x.dtype, x.device)  # [T, D] broadcast
        x = self.dropout(x)
        streaming = return_state or state is not None
        new_layers = []
        for i, block in enumerate(self.blocks):
            if streaming:
                x, layer_state = block(x, state=state.layers[i] if state else None, return_state=True)
                new_layers.append(layer_state)
            else:
                x = block(x)
        return self.ln_f(x), (DecoderState(offset + T, new_layers) if streaming else None)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., D] -> logits [..., V] through the tied output projection."""
        return h @ self.embed_tokens.weight.t()

    def layer_states(self, seq_len: int) -> list[LayerState]:
        """What each layer's attention keeps to go on after one sequence of ``seq_len`` tokens
        (:func:`attention_states`)."""
        return attention_states([block.attn for block in self.blocks], self.attention_names, seq_len,
                                self.embed_tokens.weight)


@dataclass(frozen=True)
class LayerState:
    """One layer's decoding state, as :func:`attention_states` measures it."""

    layer: int        # the layer's index in its stack
    attention: str    # its mechanism
    bytes: int        # what its state object holds for one sequence of the measured length
    per_token: float  # what it gains per token from there to twice the length (0: bounded)

    @property
    def grows(self) -> bool:
        """Whether it grows with the sequence: a KV cache, or the whole input of a mechanism that cannot stream."""
        return self.per_token > 0


@torch.no_grad()
def attention_states(attentions: list[Attention], names: list[str], seq_len: int,
                     like: torch.Tensor | None = None) -> list[LayerState]:
    """Each causal attention layer's decoding state for ONE sequence of ``seq_len`` tokens: the bytes of the tensors
    of the state its ``step`` returns (LAVO's sums and window, a KV cache, a matrix state with its convolution's
    inputs, ...), and what it gains per token up to ``2 * seq_len`` tokens (a state that grows: a KV cache). Measured
    on random inputs of each layer's dtype and device (the size does not depend on the values).

    Args:
        attentions: the layers' attention modules (causal).
        names: their mechanisms, for the records.
        seq_len: the tokens consumed.
        like: a tensor of the model (its dtype and device) for a layer without parameters.
    """
    out = []
    for i, (attn, name) in enumerate(zip(attentions, names)):
        weight = next(attn.parameters(), like)
        dtype, device = (weight.dtype, weight.device) if weight is not None else (torch.float32, "cpu")
        sizes = [tensor_bytes(attn.step(torch.randn(1, length, attn.embed_dim, dtype=dtype, device=device))[1])
                 for length in (seq_len, 2 * seq_len)]  # x [1, T, D]
        out.append(LayerState(i, name, sizes[0], max(sizes[1] - sizes[0], 0) / seq_len))
    return out
