"""What the field's recurrent mechanisms share (every registered subclass of :class:`RecurrentAttention`;
``lavo-zoo list attentions`` names them): one matrix state per head, written token by token and read by the
queries, behind the attention contract.

Patterns. Causal is each mechanism's own definition: the state after token t, read by query t. Noncausal and cross
follow from what the family is, a compression of a sequence into that state: every query reads the state the
mechanism holds after the whole (real) source, i.e. after the whole sequence for noncausal, after the context for
cross. For Based (no gate) this is exactly noncausal / cross linear attention (sums over every key); for the gated
and delta-rule mechanisms it is the state their causal form would carry at the end of the source, so a decoder's
cross cache is that one state (constant size, whatever the source's length). The short convolution runs over the
sequence the state is written from; in noncausal and cross the queries are read position by position, without
it, so that a target's query depends on its own token only (cross decoding then needs no target history).

Padding: each mechanism runs on rows packed to their real tokens (:func:`~lavo_zoo.attention.ops.padding.pack`),
so a padded row gives what the row alone gives, with left, right or inner padding; in noncausal and cross the
padded tail of a packed source writes nothing and decays nothing. Padded query rows' outputs are unspecified.

Kernels: each mechanism's recurrence is one op of the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`), the one
its layer's ``kernel_set`` declares (``ops/gated_linear``, ``ops/delta_rule``), each with a PyTorch chunked kernel
('chunk', every device) and flash-linear-attention's ('fla', CUDA). A layer's ``kernels`` option requests 'auto'
or one of them; the call that runs the op chooses once (:meth:`~lavo_zoo.attention.ops.dispatch.HasKernels.
start_kernels` on the op's queries) and ``kernels_used`` reports what ran. Reading a source's state (noncausal and
cross queries, a cross decoding step) is one matrix product and runs no op.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from lavo_zoo.attention.base import PATTERNS, Attention, StreamingState
from lavo_zoo.attention.ops.dispatch import AUTO, HasKernels
from lavo_zoo.attention.ops.padding import gather_rows, pack
from lavo_zoo.attention.ops.short_conv import ShortConv


@dataclass
class RecurrentState(StreamingState):
    """Causal streaming state: the matrix memory and the short convolutions' last inputs (constant size)."""

    memory: torch.Tensor             # [B, H, K, V]
    conv: tuple[torch.Tensor, ...]   # per convolved stream [B, kernel_size - 1, C] (empty without convolution)


@dataclass
class SourceMemory(StreamingState):
    """Noncausal / cross: the state after the whole real source (a decoder's cross cache, constant size)."""

    memory: torch.Tensor  # [B, H, K, V]


def check_eps(name: str, value: float) -> float:
    """``value`` if it is a finite number > 0, else a ValueError naming ``name``: an epsilon added to a norm or a
    normaliser keeps it finite on a zero vector (a query that sees no weight, a zero head), and a negative one gives
    NaN."""
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a finite number > 0 (it keeps a norm finite on zero inputs; the default "
                         f"suits), got {value!r}")
    return value


def expanded_width(name: str, expand: float, embed_dim: int, num_heads: int) -> int:
    """``expand * embed_dim`` as an integer that is a positive multiple of ``num_heads`` (the width of the keys or
    values split into heads), else a ValueError naming ``name``: a fractional width is refused, not truncated."""
    width = expand * embed_dim
    if not (width >= num_heads and float(width).is_integer() and int(width) % num_heads == 0):
        raise ValueError(f"{name} * embed_dim ({name} {expand!r} * {embed_dim} = {width:g}) must be a whole, positive "
                         f"multiple of num_heads ({num_heads}); choose {name} so that it is, e.g. "
                         f"{max(1, round(width / num_heads)) * num_heads / embed_dim:g}")
    return int(width)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(|x|^2 + eps) over the last dimension (flash-linear-attention's ``l2norm``)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, in fp32 (fp64 for fp64), with a learned scale: x / sqrt(mean(x^2) + eps),
    computed on x divided by its largest magnitude (the same function), so that squares of values beyond 1.8e19 (a
    state read out at inputs far from the unit scale) do not overflow float32 into a zero output."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    x = x.to(dtype)
    scale = x.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    unit = x / scale
    return unit * torch.rsqrt(unit.pow(2).mean(-1, keepdim=True) + eps / scale.pow(2)) * weight.to(dtype)


def swish_gate(o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """o * swish(gate) (the output gates of GLA and Gated DeltaNet, applied after the norm)."""
    return o * F.silu(gate.to(o.dtype))


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, T, H * c] -> [B, H, T, c]."""
    return t.unflatten(-1, (heads, t.shape[-1] // heads)).transpose(1, 2)


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """[B, H, T, c] -> [B, T, H * c]."""
    return t.transpose(1, 2).flatten(2)


class RecurrentAttention(HasKernels, Attention):
    """Base class: the contract's patterns, padding, streaming and decoding around three methods a mechanism
    implements: :meth:`run_causal` (chunk of tokens + state -> outputs + state), :meth:`write` (a packed source ->
    the state after it) and :meth:`read` (queries against that state); its op runs on the kernels the dispatch
    chooses from the subclass's :attr:`kernel_set` (module docstring, "Kernels").

    Args:
        embed_dim, num_heads, pattern: the attention contract (:class:`~lavo_zoo.attention.base.Attention`).
        kernels: 'auto' or one kernel's name of :attr:`kernel_set` (checked: an unknown one is a ValueError naming
            the choices).
    """

    patterns = PATTERNS
    streaming = True
    # whether writing a source's state (noncausal, cross) runs the op; False where it is a plain sum (no decay)
    source_op: ClassVar[bool] = True

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", kernels: str = AUTO) -> None:
        super().__init__(embed_dim, num_heads, pattern)
        self.kernels = self.kernel_set.check(kernels)

    def run_causal(self, x: torch.Tensor, state: RecurrentState | None) -> tuple[torch.Tensor, RecurrentState]:
        """Causal: x [B, T, D] (real tokens only) continuing ``state`` -> (y [B, T, D], the state after x)."""
        raise NotImplementedError

    def write(self, source: torch.Tensor, mask: torch.Tensor | None) -> SourceMemory:
        """The state after a source [B, S, D] whose real tokens come first (``mask`` [B, S]: a real prefix)."""
        raise NotImplementedError

    def read(self, x: torch.Tensor, memory: SourceMemory) -> torch.Tensor:
        """Queries x [B, T, D] reading a source's state -> [B, T, D]."""
        raise NotImplementedError

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        if self.pattern == "causal":
            if padding_mask is not None:  # packed rows: the padding is after every real token
                order, inverse, _ = pack(padding_mask)
                y, _ = self.run_causal(gather_rows(x, order), None)
                return gather_rows(y, inverse)
            if state is not None:
                self.check_state(state, x)
            y, new_state = self.run_causal(x, state)
            return (y, new_state) if return_state else y
        if self.pattern == "cross":
            return self.read(x, self.source_memory(context, context_mask))
        return self.read(x, self.source_memory(x, padding_mask))

    def source_memory(self, source: torch.Tensor, mask: torch.Tensor | None) -> SourceMemory:
        """The state after the real tokens of ``source`` [B, S, D] (mask [B, S], any padding)."""
        if mask is not None:
            order, _, mask = pack(mask)
            source = gather_rows(source, order)
        return self.write(source, mask)

    @property
    def memory_shape(self) -> tuple[int, int]:
        """(K, V): the matrix memory per head is K x V (the state's ``memory`` is [B, H, K, V])."""
        raise NotImplementedError

    @property
    def sequence_state_bytes(self) -> int:
        """Bytes of one sequence's state (fp32; H x K x V), which no call can do without: what
        :func:`~lavo_zoo.attention.registry.build_attention` checks, with the parameters, against free memory."""
        K, V = self.memory_shape
        return 4 * self.num_heads * K * V

    def check_state(self, state: Any, x: torch.Tensor) -> None:
        """Refuse a state that this layer did not return for a batch like ``x`` [B, T, D]: another type, batch size,
        head count, memory size or number of short convolutions (a layer of another configuration), before any op
        runs on it."""
        if not isinstance(state, RecurrentState):
            raise TypeError(f"state must be the RecurrentState returned by this attention, got "
                            f"{type(state).__name__}")
        if state.memory.shape[:2] != (x.shape[0], self.num_heads):
            raise ValueError(f"state is for batch/heads {list(state.memory.shape[:2])}, input has batch "
                             f"{x.shape[0]} and {self.num_heads} heads")
        convs = sum(1 for m in self.modules() if isinstance(m, ShortConv) and m.kernel_size)
        if tuple(state.memory.shape[2:]) != tuple(self.memory_shape) or len(state.conv) != convs:
            raise ValueError(f"state holds a {' x '.join(map(str, state.memory.shape[2:]))} memory per head and "
                             f"{len(state.conv)} convolution caches, this layer's are "
                             f"{' x '.join(map(str, self.memory_shape))} and {convs}: the state is from a layer of "
                             "another configuration; continue with the layer that returned it")

    # ------------------------------------------------------------------------------------------ decoding
    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> SourceMemory:
        """The source's state, computed once: a decoding step costs the same for any source length."""
        super().cross_cache(context, context_mask)  # validates
        return self.source_memory(context, context_mask)

    def cross_step(self, x: torch.Tensor, cache: SourceMemory) -> torch.Tensor:
        if not isinstance(cache, SourceMemory):
            raise TypeError(f"cache must be the SourceMemory that this attention's cross_cache() returned, got "
                            f"{type(cache).__name__}")
        expected = (self.num_heads, *self.memory_shape)
        if tuple(cache.memory.shape[1:]) != expected:
            raise ValueError(f"cache holds a {' x '.join(map(str, cache.memory.shape[1:]))} state (heads x K x V), "
                             f"this layer's is {' x '.join(map(str, expected))}: the cache is from a layer of another "
                             "mechanism or configuration; decode with the cache this layer's cross_cache() returned")
        return self.read(x, cache)


def real_rows(m: Attention, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
              context_mask: torch.Tensor | None) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The slow references' rows, one at a time, each as its real tokens alone: (b, rows, xq, xs) with rows the
    positions of row b's real queries, xq [1, Tq, D] those queries and xs [1, S, D] the real tokens of the source
    (the row itself, or its ``context`` in cross attention)."""
    src = x if context is None else context
    src_mask = context_mask if m.pattern == "cross" else padding_mask
    for b in range(x.shape[0]):
        rows = torch.arange(x.shape[1]) if padding_mask is None else padding_mask[b].nonzero()[:, 0]
        srows = torch.arange(src.shape[1]) if src_mask is None else src_mask[b].nonzero()[:, 0]
        yield b, rows, x[b:b + 1, rows], src[b:b + 1, srows]


def key_mask(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """A packed source's mask [B, S] as [B, 1, S] in ``like``'s dtype (to zero writes and decays of its tail)."""
    return None if mask is None else mask[:, None, :].to(like.dtype)
