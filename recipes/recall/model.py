"""The recall models, one per attention pattern (the task fixes which: :data:`~.data.TASK_PATTERNS`), with any
attention of the registry at the site under test, and the size of the state that site keeps.

- **causal** (MQAR, selective copying, induction heads): Zoology's decoder. Token embeddings (+ positions) ->
  ``num_layers`` pre-LN blocks (attention, feed-forward) -> LayerNorm -> a head tied to the embeddings, two layers
  by default (:class:`RecallModel`, on the trunk the ``lm`` recipe shares).
- **noncausal** (noncausal MQAR): the same with the zoo's encoder stack (noncausal self attention of
  ``model.attention``, every position reading the whole sequence), after an optional first layer of
  ``model.binding`` (the CPU configs': ``local`` attention over each token's neighbours with a learned relative
  bias, which binds each value to the key before it, as the cross task's encoder does, so that the layers under test
  do the recall; full softmax with sinusoidal or rotary positions takes longer than a CPU budget to learn that
  binding over pairs at random places): :class:`RecallEncoder`.
- **cross** (cross MQAR): the zoo's encoder-decoder (``zoo/nn``'s encoder and decoder blocks, as summarization,
  TTS and the point-cloud decoder use them), ``num_layers`` layers each, one attention per site
  (``model.attention: {encoder_self, decoder_self, cross}``): the source is encoded, the target (the queries)
  decoded with causal self attention and cross attention over the source: :class:`RecallEncoderDecoder`. The
  answer lies in the source only, so the cross attention is its only way to the target; the encoder may bind each
  value to its key (it does not know the queries) and the decoder's self attention sees other queries only.

Positions are sinusoidal unless the attention encodes position itself (LAVO's EPE, rotary, local's relative bias),
as in the ``lm`` recipe (Zoology learns absolute ones for attention and gives the other mixers a short convolution
instead); embeddings are fairseq's (normal, std D^-0.5, scaled by sqrt(D)). Logits are computed only at the
positions asked for (the queries), never [B, T, V].

:func:`state_bytes` measures the state of the site under test per sequence, summed over its layers and over the
tensors of the state object itself: causal, what each layer's attention keeps after a sequence to go on with it
(``Attention.step``: LAVO's sums and window, a KV cache, a feature-map prefix sum, an SSM state; a mechanism that
cannot stream keeps its whole input); cross, each decoder layer's cache of the source (``Attention.cross_cache``:
LAVO's mean memory, a recurrent mechanism's state after the source, softmax's keys and values, or the source itself
where a mechanism keeps no cache of its own); noncausal, what a layer keeps of the whole sequence for its queries to
read: its own state object where it has one (``sequence_state``: a recurrent mechanism's every token's writes, which
its forward and backward scans read, or with ``noncausal_form=final_state`` and for Based the state after the
sequence), else the cross cache the same mechanism and options keep of that sequence where the mechanism has a cache
of its own (LAVO's memory, which its window branch reads beside; softmax's keys and values), and the sequence itself
where it has none (``local``'s windows, S4D's kernel): that grows with T. Each is measured at two lengths to tell a
constant state from one that grows, layer by layer (:func:`layer_states`: a hybrid's layers keep different states).

Every stack takes a schedule of layers (``model.attention_schedule``, :mod:`lavo_zoo.attention.schedule`): a list
repeated over ``num_layers`` for the causal and noncausal tasks, one per site for the cross task (each stack has
``num_layers``), checked for the task's pattern with the task.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from lavo_zoo.attention import (
    SITE_PATTERNS,
    AttentionSchedule,
    AttentionSpec,
    SiteAttention,
    SiteSchedule,
    attention_class,
    build_attention,
    tensor_bytes,
)
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.attention.spec import merge_attention
from lavo_zoo.config import DELETE, NonNegativeInt, PositiveInt, Probability, from_dict
from lavo_zoo.errors import ConfigError
from lavo_zoo.nn.position import sinusoidal_positions
from lavo_zoo.nn.transformer import LayerState, TiedDecoderLM, TransformerDecoder, TransformerEncoder


def _is_sites(value: Any) -> bool:
    """Whether a YAML attention names sites: a mapping without ``name`` with a site among its keys (any other key
    there is refused as an unknown site)."""
    return isinstance(value, dict) and "name" not in value and any(k in SITE_PATTERNS for k in value)


class RecallAttention:
    """The schema of ``model.attention``: one attention (``{name: lavo, num_bases: 32}``, an
    :class:`~lavo_zoo.attention.AttentionSpec`: the causal and noncausal tasks' one site) or one per site of the
    encoder-decoder (``{encoder_self: ..., decoder_self: ..., cross: ...}``, a
    :class:`~lavo_zoo.attention.SiteAttention`: the cross task). The value read is one of those two, which
    ``lavo-zoo compare`` varies as it varies every recipe's (``--site cross`` for the second); the config names no
    other type. Which one a task takes is checked with the task (:func:`check_task_attention`)."""

    @staticmethod
    def from_config(value: Any, key: str, source: str) -> AttentionSpec | SiteAttention:
        """An AttentionSpec from a name or a mapping with ``name``; a SiteAttention from a mapping of sites.

        Args:
            value: the YAML value (or a spec, returned as it is).
            key: the config key it came from, for the messages.
            source: the config file it came from, for the messages.

        Raises:
            ConfigError: neither form, or a form its reader refuses.
        """
        if isinstance(value, (AttentionSpec, SiteAttention)):
            return value
        if _is_sites(value):
            return SiteAttention.from_config(value, key, source)
        if isinstance(value, dict) and "name" not in value:
            raise ConfigError(f"config key '{key}' in {source} needs 'name:' (an attention from `lavo-zoo list "
                              f"attentions`, e.g. {{name: lavo, num_bases: 32}}) or, for the cross task, a mapping of "
                              f"sites ({', '.join(SITE_PATTERNS)}) to attentions; got {value!r}")
        return AttentionSpec.from_config(value, key, source)

    @staticmethod
    def merge_config(base: Any, over: Any, merge: Callable[[dict, dict], dict]) -> Any:
        """``over`` written over ``base``: sites over sites merge site by site, each by the attention's rule
        (:func:`~lavo_zoo.attention.spec.merge_attention`: another name drops the site's options); a mapping of
        sites over one attention, or one attention over sites, replaces it whole; one attention over another by
        that rule."""
        if _is_sites(over):
            if not _is_sites(base):
                return over
            out = dict(base)
            for site, value in over.items():
                if value is DELETE:
                    out.pop(site, None)
                else:
                    out[site] = merge_attention(out[site], value, merge) if site in out else value
            return out
        return merge_attention(base, over, merge)


class RecallSchedule:
    """The schema of ``model.attention_schedule``: a schedule of layers of the one attention (a list, or
    ``lavo*3+sdpa``: an :class:`~lavo_zoo.attention.AttentionSchedule`, the causal and noncausal tasks') or one per
    site (a mapping of sites: a :class:`~lavo_zoo.attention.SiteSchedule`, the cross task's), the form of
    ``model.attention``; the task's pattern is checked with the task (:func:`check_task_model`)."""

    @staticmethod
    def from_config(value: Any, key: str, source: str) -> AttentionSchedule | SiteSchedule:
        """A SiteSchedule from a mapping, an AttentionSchedule from a list or its text.

        Raises:
            ConfigError: a form its reader refuses (an unknown site, an empty schedule, ...).
        """
        if isinstance(value, (AttentionSchedule, SiteSchedule)):
            return value
        if isinstance(value, dict):
            return from_dict(SiteSchedule, value, source, key + ".")
        return AttentionSchedule.from_config(value, key, source)


def check_task_model(model: ModelConfig, pattern: str, task: str) -> None:
    """Refuse a model the task cannot take (:func:`check_task_attention`; ``model.binding`` outside the noncausal
    task; a schedule whose entries cannot do the task's pattern, :func:`~lavo_zoo.attention.schedule.
    resolve_schedules`), and record the pattern as the model's ``attention_patterns``.

    Raises:
        ConfigError: naming the key and the task.
    """
    check_task_attention(model.attention, pattern, task)
    model.attention_patterns = dict(SITE_PATTERNS) if pattern == "cross" else pattern
    try:
        resolve_schedules(model)
    except ConfigError as e:
        raise ConfigError(f"{e} (data.task={task})") from None
    if model.binding is not None and pattern != "noncausal":
        raise ConfigError(f"model.binding is the noncausal task's first encoder layer; data.task={task} has none "
                          "(the cross task's encoder is model.attention.encoder_self): leave it out")


def check_task_attention(attention: AttentionSpec | SiteAttention, pattern: str, task: str,
                         key: str = "model.attention") -> None:
    """Refuse an attention the task's model cannot take: sites for the cross task's encoder-decoder, one attention
    of the task's pattern otherwise (each checked against its pattern and options).

    Args:
        attention: ``model.attention``.
        pattern: the task's pattern (causal, noncausal or cross).
        task: ``data.task``, for the messages.
        key: the config key, for the messages.

    Raises:
        ConfigError: naming the key, the task and the form it takes.
    """
    if pattern == "cross":
        if not isinstance(attention, SiteAttention):
            raise ConfigError(f"data.task={task} runs an encoder-decoder: {key} gives one attention per site, e.g. "
                              "{encoder_self: {name: sdpa}, decoder_self: {name: sdpa}, cross: {name: lavo}}, not "
                              f"one attention ({attention.name})")
        attention.check(key)
        return
    if isinstance(attention, SiteAttention):
        model = "a decoder" if pattern == "causal" else "an encoder"
        raise ConfigError(f"data.task={task} runs {model} with one {pattern} attention: {key} is one attention "
                          "({name: lavo, ...}), not sites (those are the cross task's, cross_mqar)")
    attention.check(pattern, key)


@dataclass
class ModelConfig:
    num_layers: PositiveInt = 2  # the decoder's or encoder's layers; cross: the encoder's and the decoder's, each
    embed_dim: PositiveInt = 128
    num_heads: PositiveInt = 1
    ffn_dim: PositiveInt = 512
    dropout: Probability = 0.0  # on the residual branches (Zoology's resid_dropout)
    embed_dropout: Probability = 0.1  # on the embeddings (Zoology's)
    # an attention from `lavo-zoo list attentions` of the task's pattern, YAML {name: lavo, num_bases: 32,
    # window_size: 16}; the cross task: one per site, {encoder_self: ..., decoder_self: ..., cross: ...}
    attention: RecallAttention = field(default_factory=lambda: AttentionSpec("sdpa"))
    # the noncausal task: an encoder layer of this noncausal attention before the num_layers of model.attention,
    # e.g. {name: local, window_size: 2, relative_bias: true} to bind each value to its key; none: no such layer
    binding: AttentionSpec | None = None
    # a hybrid: the attention of each layer, a list repeated over num_layers whose entries naming model.attention's
    # mechanism take its options ([lavo, lavo, lavo, sdpa] or lavo*3+sdpa); the cross task: one per site
    # ({decoder_self: [...]}); null: model.attention in every layer
    attention_schedule: RecallSchedule | None = None
    # auto: sinusoidal unless the attention encodes position itself (LAVO's EPE, rotary, local's relative bias)
    positions: Literal["auto", "sinusoidal", "none"] = "auto"
    vocab_size: NonNegativeInt = 0  # data.vocab_size (RecallRecipe.resolve); saved with the run

    def __post_init__(self) -> None:
        if not isinstance(self.attention, (AttentionSpec, SiteAttention)):
            raise ConfigError(f"model.attention must be an AttentionSpec or a SiteAttention, got "
                              f"{type(self.attention).__name__}")
        if self.binding is not None:
            self.binding.check("noncausal", "model.binding")
        resolve_schedules(self)  # the entries' options; their pattern is checked with the task (check_task_model)


class RecallModel(TiedDecoderLM):
    """Causal recall: tokens [B, T] -> logits at the selected positions (see the module docstring); the trunk is
    :class:`~lavo_zoo.nn.transformer.TiedDecoderLM`, with dropout ``embed_dropout`` on the embeddings."""

    pattern = "causal"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, embed_dropout=cfg.embed_dropout)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> the final hidden states [B, T, D] (after the last LayerNorm)."""
        return self.features(tokens)[0]

    def forward(self, tokens: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, T] -> logits [N, V] at the N positions where ``select`` [B, T] (bool) is True, in row-major
        order; without ``select``, logits [B, V] at the last position."""
        h = self.hidden(tokens)  # [B, T, D]
        h = h[select] if select is not None else h[:, -1]  # [N, D] or [B, D]
        return self.logits(h)


class _TiedEmbedding(nn.Module):
    """Token embeddings x sqrt(D) (+ sinusoidal positions, ``use_positions``) -> dropout, and logits through the
    same matrix: what the encoder and the encoder-decoder put around their stacks (as TiedDecoderLM does)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ValueError("model.vocab_size is unset: resolve the config first (the recipe's resolve(cfg))")
        self.cfg = cfg
        self.embed_scale = cfg.embed_dim ** 0.5
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.embed_dim)  # also the output projection (tied)
        self.dropout = nn.Dropout(cfg.embed_dropout)
        nn.init.normal_(self.embed_tokens.weight, std=cfg.embed_dim ** -0.5)

    def embed(self, tokens: torch.Tensor, use_positions: bool) -> torch.Tensor:
        """tokens [B, T] -> [B, T, D]."""
        x = self.embed_tokens(tokens) * self.embed_scale  # [B, T, D]
        if use_positions:
            x = x + sinusoidal_positions(tokens.shape[1], self.cfg.embed_dim, 0, x.dtype, x.device)  # [T, D]
        return self.dropout(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., D] -> logits [..., V] through the tied embeddings."""
        return h @ self.embed_tokens.weight.t()


def _uses_positions(cfg: ModelConfig, layers: list[nn.Module]) -> bool:
    """Sinusoidal positions for a stack: ``positions: sinusoidal``, or ``auto`` where no attention of ``layers``
    encodes position itself."""
    return cfg.positions == "sinusoidal" or (cfg.positions == "auto" and not any(a.encodes_position for a in layers))


def _fairseq_init(blocks: nn.ModuleList) -> None:
    """fairseq's init of the feed-forward layers (Xavier-uniform, zero bias), as TiedDecoderLM's."""
    for block in blocks:
        for fc in (block.ffn.fc1, block.ffn.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.zeros_(fc.bias)


class RecallEncoder(_TiedEmbedding):
    """Noncausal recall: tokens [B, T] -> the encoder (a pre-LN block of ``model.binding`` where given, then
    ``num_layers`` pre-LN blocks of noncausal ``model.attention``, final LayerNorm) -> logits at the selected
    positions. Positions follow the layers under test (sinusoidal unless ``model.attention`` encodes position)."""

    pattern = "noncausal"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        common = {"num_heads": cfg.num_heads, "ffn_dim": cfg.ffn_dim, "dropout": cfg.dropout}
        self.binding = None if cfg.binding is None else \
            TransformerEncoder(1, cfg.embed_dim, attention=cfg.binding, final_norm=False, **common)
        self.encoder = TransformerEncoder(cfg.num_layers, cfg.embed_dim, attention=attention_layers(cfg)[""],
                                          **common)
        self.use_positions = _uses_positions(cfg, [b.attn for b in self.encoder.layers])
        _fairseq_init(self.encoder.layers)
        if self.binding is not None:
            _fairseq_init(self.binding.layers)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> the encoder's output [B, T, D]."""
        x = self.embed(tokens, self.use_positions)  # [B, T, D]
        return self.encoder(x if self.binding is None else self.binding(x))

    def forward(self, tokens: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, T] -> logits [N, V] at the N positions where ``select`` [B, T] is True (row-major order);
        without ``select``, at the last position [B, V]."""
        h = self.hidden(tokens)
        return self.logits(h[select] if select is not None else h[:, -1])


class RecallEncoderDecoder(_TiedEmbedding):
    """Cross recall: the source (``context`` [B, S]) through the encoder, the target (``tokens`` [B, T]) through the
    decoder (causal self attention, cross attention over the encoded source), logits at the selected target
    positions; each stack ``num_layers`` pre-LN layers with a final LayerNorm, embeddings shared and tied."""

    pattern = "cross"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        sites = attention_layers(cfg)  # {site: the attention of each layer}
        common = {"num_heads": cfg.num_heads, "ffn_dim": cfg.ffn_dim, "dropout": cfg.dropout}
        self.encoder = TransformerEncoder(cfg.num_layers, cfg.embed_dim, attention=sites["encoder_self"], **common)
        self.decoder = TransformerDecoder(cfg.num_layers, cfg.embed_dim, self_attention=sites["decoder_self"],
                                          cross_attention=sites["cross"], **common)
        self.source_positions = _uses_positions(cfg, [b.attn for b in self.encoder.layers])
        self.target_positions = _uses_positions(cfg, [b.self_attn for b in self.decoder.layers])
        _fairseq_init(self.encoder.layers)
        _fairseq_init(self.decoder.layers)

    def encode(self, context: torch.Tensor) -> torch.Tensor:
        """context [B, S] -> the encoded source [B, S, D]."""
        return self.encoder(self.embed(context, self.source_positions))

    def hidden(self, tokens: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """target tokens [B, T], source context [B, S] -> the decoder's output [B, T, D]."""
        return self.decoder(self.embed(tokens, self.target_positions), self.encode(context))

    def forward(self, tokens: torch.Tensor, select: torch.Tensor | None = None,
                context: torch.Tensor | None = None) -> torch.Tensor:
        """target tokens [B, T] and their source ``context`` [B, S] -> logits [N, V] at the N target positions where
        ``select`` [B, T] is True (row-major order); without ``select``, at the last position [B, V]."""
        if context is None:
            raise ValueError("cross recall reads a source: give context=[B, S] token ids")
        h = self.hidden(tokens, context)
        return self.logits(h[select] if select is not None else h[:, -1])


MODELS = {"causal": RecallModel, "noncausal": RecallEncoder, "cross": RecallEncoderDecoder}


def build_recall_model(cfg: ModelConfig, pattern: str) -> nn.Module:
    """The recall model of ``pattern`` (the task's, :data:`~.data.TASK_PATTERNS`) from ``cfg``."""
    return MODELS[pattern](cfg)


# ---------------------------------------------------------------------------------------------------- state size
def _like(module: nn.Module, model: nn.Module, length: int) -> torch.Tensor:
    """Random inputs [1, length, D] of the dtype and device of ``module``'s weights (the model's, when it has
    none): a state's size does not depend on the values."""
    weight = next(module.parameters(), next(model.parameters()))
    return torch.randn(1, length, model.cfg.embed_dim, dtype=weight.dtype, device=weight.device)


def noncausal_state(attn: nn.Module, spec: AttentionSpec, x: torch.Tensor) -> Any:
    """What a noncausal layer of ``spec`` keeps of the sequence x [1, T, D] for its queries to read (the module
    docstring): the layer's own state object where it has one (``sequence_state``: the recurrent mechanisms'), else
    the cross cache of the same mechanism and options over x where the mechanism keeps a cache of its own
    (``Attention.decoding("cross") == "cache"``), else x itself (every token kept)."""
    if callable(getattr(attn, "sequence_state", None)):
        return attn.sequence_state(x)
    if attention_class(spec.name).decoding("cross") != "cache" or spec.options.get("global_read") is False:
        return x  # no cache of its own, or no memory read (LAVO's global_read=false: its window alone)
    # what LAVO's memory averages (memory_source) does not change its size, and the cross form has no local branch
    # to average: it is built without that choice
    options = {k: v for k, v in spec.options.items() if k != "memory_source"}
    twin = build_attention(spec.name, attn.embed_dim, attn.num_heads, "cross", **options).to(x.device, x.dtype)
    return twin.cross_cache(x)


@torch.no_grad()
def layer_states(model: nn.Module, seq_len: int) -> list[LayerState]:
    """The state of each layer of the site under test for ONE sequence of ``seq_len`` tokens (cross: a source of that
    many), measured from its state object (the module docstring; on random inputs of the model's dtype: the size does
    not depend on the values), with what it gains per token up to twice the length (a KV cache, a source kept whole,
    the whole input of a mechanism that cannot stream: it grows)."""
    if isinstance(model, RecallModel):
        return model.layer_states(seq_len)  # each causal layer's streaming state (TiedDecoderLM's)
    if isinstance(model, RecallEncoderDecoder):
        attns, specs = [layer.cross_attn for layer in model.decoder.layers], attention_layers(model.cfg)["cross"]

        def measure(a: nn.Module, spec: AttentionSpec, n: int) -> int:
            return tensor_bytes(a.cross_cache(_like(a, model, n)))
    else:
        attns, specs = [block.attn for block in model.encoder.layers], attention_layers(model.cfg)[""]

        def measure(a: nn.Module, spec: AttentionSpec, n: int) -> int:
            return tensor_bytes(noncausal_state(a, spec, _like(a, model, n)))
    out = []
    for i, (attn, spec) in enumerate(zip(attns, specs)):
        first, second = measure(attn, spec, seq_len), measure(attn, spec, 2 * seq_len)
        out.append(LayerState(i, spec.name, first, max(second - first, 0) / seq_len))
    return out


def state_bytes(model: nn.Module, seq_len: int) -> tuple[int, bool]:
    """(bytes, grows): the state of the site under test for ONE sequence of ``seq_len`` tokens, summed over its
    layers (:func:`layer_states`), and whether it grows with the sequence in any layer."""
    layers = layer_states(model, seq_len)
    return sum(layer.bytes for layer in layers), any(layer.grows for layer in layers)
