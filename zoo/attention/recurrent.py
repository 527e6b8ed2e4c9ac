"""What the field's recurrent mechanisms share (every registered subclass of :class:`RecurrentAttention`;
``lavo-zoo list attentions`` names them): one matrix state per head, written token by token and read by the
queries, behind the attention contract.

Patterns. Causal is each mechanism's own definition: the state after token t, read by query t. Noncausal is a
forward and a backward scan combined, as the field builds its bidirectional recurrent layers (Hydra's quasiseparable
mixer, the bidirectional Mamba of Vision Mamba and Caduceus, LION's bidirectional linear attention): query t reads
the state the mechanism holds after the tokens 1..t (its causal state, the token itself included) plus the state
the same recurrence holds after the tokens T, T-1, ..., t+1 (run over the reversed sequence and read one token
early), and one output stage (the mechanism's norm, gate and projection) takes the sum:

    o_t = q_t^T (S_t + R_{t+1}),   S_t = the state after tokens 1..t,   R_{t+1} = the state after tokens T..t+1

The choices, and why:

- **Shared parameters.** Both scans are the layer's one recurrence, with its projections, gates and convolutions
  (as LION's layers, and as Caduceus ties its two directions' projections). A noncausal layer then has exactly the
  causal layer's parameters, every mechanism (present or future) gets the form from its causal recurrence without
  declaring anything, and the form is a reading of the same weights: ``noncausal_form`` changes no weight. Separate
  parameters per direction (Vision Mamba; Hydra's generators) would double the layer against every other mechanism
  at the same site of a study.
- **Combined by a sum, before the output stage.** What the two scans read is added: the layer mixes the tokens by one
  quasiseparable matrix, lower part and diagonal the causal form's, strictly upper part the same recurrence over the
  reversed sequence. For Based (no decay) it is exactly noncausal linear attention, one normaliser over every key
  (LION-LIT); the per-head RMSNorm or normaliser sees both halves at once. A mean would only halve what is read
  (which the norms and normalisers absorb, but for Mamba-2's skip D x); a gate would add parameters.
- **The diagonal once.** The token's own write is read in the forward scan only: the backward scan's reading is
  shifted by one token (Hydra shifts both scans and adds its diagonal separately; Vision Mamba and Caduceus add two
  scans that each count the token). A shift holds for the delta rule too, whose write is not a sum (LION subtracts
  half of q_t.k_t v_t from each direction, which needs one).
- **Decays.** R_{t+1} holds the write of a token s > t decayed by the gates of the tokens between them (t+1..s-1),
  as S_t holds s < t decayed by s+1..t: each is the mechanism's own recurrence, unchanged, over its side of the
  sequence. (LION's symmetric mask also applies the writer's own gate on the backward side.)

``noncausal_form="final_state"`` keeps the earlier reading: every query reads the state after the whole sequence
(for the gated and delta-rule mechanisms weighted to the last tokens). A config saved before the option existed is
read with it (``former_defaults``), so an old checkpoint keeps its reading. Cross attention is that reading of the
source, always: every target query reads the state after the real source, so a decoder's cross cache is that one
state (constant size, whatever the source's length). The short convolution runs over the sequence the state is
written from (in noncausal attention, causally over the sequence, for both scans); in noncausal and cross the
queries are read position by position, without it, so that a target's query depends on its own token only (cross
decoding then needs no target history).

State. Causal attention carries a constant-size state (:class:`RecurrentState`), cross attention keeps one
(:class:`SourceMemory`). A bidirectional noncausal layer has none of constant size: each query reads what lies on
both sides of it, so the layer keeps every token's writes (:meth:`RecurrentAttention.sequence_state`, which grows
with T), and noncausal layers do not stream. The exception is a mechanism whose state is a plain sum (no decay, no
overwrite: ``source_op`` False, Based): its two scans add up to the sums after the sequence, so both forms read
those (one pass, a constant-size state).

Padding: each mechanism runs on rows packed to their real tokens (:func:`~lavo_zoo.attention.ops.padding.pack`),
so a padded row gives what the row alone gives, with left, right or inner padding; in noncausal and cross the
padded tail of a packed source writes nothing and decays nothing, in either scan (:meth:`Writes.masked`). Padded
query rows' outputs are unspecified.

Kernels: each mechanism's recurrence is one op of the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`), the one
its layer's ``kernel_set`` declares (``ops/gated_linear``, ``ops/delta_rule``), each with a PyTorch chunked kernel
('chunk', every device) and flash-linear-attention's ('fla', CUDA). A layer's ``kernels`` option requests 'auto'
or one of them; the call that runs the op chooses once (:meth:`~lavo_zoo.attention.ops.dispatch.HasKernels.
start_kernels` on the op's queries; both scans of a noncausal call run on that choice) and ``kernels_used`` reports
what ran. Reading a source's state (cross queries, a cross decoding step, the final-state form) is one matrix
product and runs no op.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from lavo_zoo.attention.base import PATTERNS, Attention, StreamingState
from lavo_zoo.attention.ops.dispatch import AUTO, Choice, HasKernels
from lavo_zoo.attention.ops.padding import gather_rows, pack
from lavo_zoo.attention.ops.short_conv import ShortConv

# the readings of the noncausal pattern (module docstring): a forward and a backward scan, or the final state
NONCAUSAL_FORMS = ("bidirectional", "final_state")


@dataclass
class RecurrentState(StreamingState):
    """Causal streaming state: the matrix memory and the short convolutions' last inputs (constant size)."""

    memory: torch.Tensor             # [B, H, K, V]
    conv: tuple[torch.Tensor, ...]   # per convolved stream [B, kernel_size - 1, C] (empty without convolution)


@dataclass
class SourceMemory(StreamingState):
    """Cross (and noncausal with ``noncausal_form="final_state"``): the state after the whole real source (a
    decoder's cross cache, constant size)."""

    memory: torch.Tensor  # [B, H, K, V]


@dataclass
class Writes:
    """What the tokens of a sequence write into a recurrent state, one entry per token: the op's arguments beside its
    queries. What a bidirectional noncausal layer keeps of its sequence (:meth:`RecurrentAttention.sequence_state`).

    Gates are the op's by argument name (``g``: log decays, ``beta``: erase strengths, ``write``: write strengths),
    each [B, H, T] (one per head) or [B, H, T, c] (one per channel); 0 has no effect (no decay, nothing erased or
    written), which :meth:`masked` relies on.
    """

    keys: torch.Tensor              # [B, H, T, K]
    values: torch.Tensor            # [B, H, T, V]
    gates: dict[str, torch.Tensor]  # name -> [B, H, T] or [B, H, T, c]

    def masked(self, mask: torch.Tensor) -> Writes:
        """These writes with the padded tokens' keys and gates zeroed: they write, erase and decay nothing.

        Args:
            mask: [B, T] bool, True = a real token.
        """
        m = mask[:, None, :]  # [B, 1, T]
        return Writes(self.keys.masked_fill(~m[..., None], 0.0), self.values,
                      {n: g.masked_fill(~(m if g.dim() == 3 else m[..., None]), 0.0) for n, g in self.gates.items()})

    def reversed(self) -> Writes:
        """The writes of the reversed sequence (token T first)."""
        return Writes(self.keys.flip(2), self.values.flip(2), {n: g.flip(2) for n, g in self.gates.items()})


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
    values split into heads), else a ValueError naming ``name``: a fractional width is refused, not truncated.

    Args:
        name: the option's name, for the message (``expand_k``, ``expand_v``).
        expand: the option's value, the width's ratio to ``embed_dim``.
        embed_dim: D.
        num_heads: H.
    """
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
    """RMSNorm over the last dimension, in fp32 (fp64 for fp64), with a learned scale: x / sqrt(mean(x^2) + eps).

    It is computed on x divided by a scale s, as (x / s) / sqrt(mean((x / s)^2) + eps / s^2), which is the same
    function for every s > 0: s is the largest magnitude of x, so that squares of values beyond 1.8e19 (a state read
    out at inputs far from the unit scale) do not overflow float32 into a zero output, and at least sqrt(eps), so
    that eps / s^2 <= 1 never overflows where x is tiny (a state a strong decay has cleared). Since the function does
    not depend on s, s is held constant in the backward pass (its gradient is 0): through the maximum, the backward
    pass multiplied an infinite partial derivative by zero into NaN where |x| < 1e-10."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    x = x.to(dtype)
    scale = x.detach().abs().amax(-1, keepdim=True).clamp_min(max(math.sqrt(eps), torch.finfo(dtype).tiny))
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
    """Base class: the contract's patterns, padding, streaming and decoding around what a mechanism implements:
    :meth:`run_causal` (chunk of tokens + state -> outputs + state), :meth:`writes` (what a source's tokens write)
    and :meth:`reader` (queries that read, and the output stage); its op runs on the kernels the dispatch chooses
    from the subclass's :attr:`kernel_set` (module docstring, "Kernels"), in chunks of its ``chunk_size``. Noncausal
    attention (both scans, or the final state) and cross attention are built here from those, once for every
    mechanism (module docstring, "Patterns").

    Args:
        embed_dim: D, the model width (the contract's three arguments, stated on
            :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
        num_heads: H, the number of heads.
        pattern: causal, noncausal or cross, one of the class's ``patterns``.
        kernels: 'auto' or one kernel's name of :attr:`kernel_set` (checked: an unknown one is a ValueError naming
            the choices).
        noncausal_form: the noncausal pattern's reading: 'bidirectional' (a forward and a backward scan combined) or
            'final_state' (every query reads the state after the whole sequence). Causal and cross attention do not
            read it (cross reads the state after the source, always).
    """

    patterns = PATTERNS
    streaming = True
    noncausal_state = ("grows with T, no streaming: every token's keys, values and gates, which both scans read "
                       "(noncausal_form=final_state: the state after the sequence)")
    # a saved config without the option was trained with the final state (the form before the bidirectional one)
    former_defaults: ClassVar[dict[str, Any]] = {"noncausal_form": "final_state"}
    eval_options = ("noncausal_form",)  # the same weights read either way
    # whether writing a source's state (cross; noncausal with the final state) runs the op; False where it is a
    # plain sum (no decay)
    source_op: ClassVar[bool] = True
    chunk_size: int  # tokens per chunk of the op's chunked form (each mechanism's option)

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", kernels: str = AUTO,
                 noncausal_form: str = "bidirectional") -> None:
        super().__init__(embed_dim, num_heads, pattern)
        self.kernels = self.kernel_set.check(kernels)
        if noncausal_form not in NONCAUSAL_FORMS:
            raise ValueError(f"noncausal_form must be one of {', '.join(NONCAUSAL_FORMS)} (bidirectional: a forward "
                             f"and a backward scan; final_state: every query reads the state after the whole "
                             f"sequence), got {noncausal_form!r}")
        self.noncausal_form = noncausal_form

    def run_causal(self, x: torch.Tensor, state: RecurrentState | None) -> tuple[torch.Tensor, RecurrentState]:
        """Causal: x [B, T, D] (real tokens only) continuing ``state`` -> (y [B, T, D], the state after x)."""
        raise NotImplementedError

    def writes(self, source: torch.Tensor) -> Writes:
        """What the tokens of ``source`` [B, S, D] write (keys, values, gates [B, H, S, .]), from its first token on
        (its short convolutions start from zeros)."""
        raise NotImplementedError

    def reader(self, x: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        """The queries [B, H, T, K] of x [B, T, D] that read a state (noncausal and cross: without the short
        convolution), and the output stage of those tokens, which turns what they read [B, H, T, V] into the
        layer's output [B, T, D] (norm, gate, projection)."""
        raise NotImplementedError

    def scan(self, run: Choice, q: torch.Tensor, writes: Writes, state: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The mechanism's op over ``writes``, query t reading the state after token t.

        Args:
            run: the call's kernel choice (:meth:`~lavo_zoo.attention.ops.dispatch.HasKernels.start_kernels`).
            q: queries [B, H, T, K].
            writes: the tokens' writes (T of them).
            state: the state before the first token [B, H, K, V] (None: zeros).

        Returns:
            (o [B, H, T, V], the state after the last token [B, H, K, V]).
        """
        (op,) = self.kernel_set.ops  # each recurrent mechanism runs one op
        return getattr(run, op)(q, writes.keys, writes.values, state=state, chunk_size=self.chunk_size,
                                **writes.gates)

    def scan_both_ways(self, q: torch.Tensor, writes: Writes) -> torch.Tensor:
        """What the queries read in the bidirectional form (module docstring): q_t^T (S_t + R_{t+1}).

        Args:
            q: queries [B, H, T, K].
            writes: the sequence's writes (T of them; padded tokens masked: :meth:`Writes.masked`).

        Returns:
            [B, H, T, V], before the output stage.
        """
        run = self.start_kernels(q)  # one choice for both scans
        prefix, _ = self.scan(run, q, writes)  # q_t^T S_t: tokens 1..t, the token itself included
        # R_{t+1} is the reversed scan's state at token t + 1, where that scan reads it with the query placed there:
        # at token s (original order) the query of token s - 1 (a zero query at the first token)
        earlier = torch.cat([torch.zeros_like(q[:, :, :1]), q[:, :, :-1]], 2)
        suffix, _ = self.scan(run, earlier.flip(2), writes.reversed())
        suffix = suffix.flip(2)  # at token s: q_{s-1}^T R_s
        # at token t: q_t^T R_{t+1}; the last token has nothing after it
        suffix = torch.cat([suffix[:, :, 1:], torch.zeros_like(suffix[:, :, :1])], 2)
        return prefix + suffix

    def bidirectional(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Noncausal attention as a forward and a backward scan (module docstring).

        Args:
            x: [B, T, D], each row's real tokens first.
            mask: [B, T], True for each row's real prefix (None: all real).

        Returns:
            [B, T, D] (a padded position's output unspecified).
        """
        q, finish = self.reader(x)
        writes = self.writes(x)
        return finish(self.scan_both_ways(q, writes if mask is None else writes.masked(mask)))

    def write(self, source: torch.Tensor, mask: torch.Tensor | None) -> SourceMemory:
        """The state after a source [B, S, D] whose real tokens come first (``mask`` [B, S]: a real prefix)."""
        writes = self.writes(source)
        if mask is not None:  # the packed tail writes nothing and decays nothing
            writes = writes.masked(mask)
        if not self.source_op:  # no decay: the state is the plain sum of the writes
            return SourceMemory(writes.keys.transpose(-1, -2) @ writes.values)
        keys = writes.keys
        _, memory = self.scan(self.start_kernels(keys), keys.new_zeros(keys.shape), writes)
        return SourceMemory(memory)

    def read(self, x: torch.Tensor, memory: SourceMemory) -> torch.Tensor:
        """Queries x [B, T, D] reading a source's state -> [B, T, D]."""
        q, finish = self.reader(x)
        return finish(q @ memory.memory.to(x.dtype))

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
        if self.reads_final_state:
            return self.read(x, self.source_memory(x, padding_mask))
        if padding_mask is None:
            return self.bidirectional(x, None)
        order, inverse, mask = pack(padding_mask)  # packed rows: both scans pass the padding writing nothing
        return gather_rows(self.bidirectional(gather_rows(x, order), mask), inverse)

    @property
    def reads_final_state(self) -> bool:
        """Whether noncausal attention reads the state after the sequence: with ``noncausal_form="final_state"``, and
        where the state is a plain sum (``source_op`` False), whose two scans add up to it (module docstring)."""
        return self.noncausal_form == "final_state" or not self.source_op

    def source_memory(self, source: torch.Tensor, mask: torch.Tensor | None) -> SourceMemory:
        """The state after the real tokens of ``source`` [B, S, D] (mask [B, S], any padding)."""
        if mask is not None:
            order, _, mask = pack(mask)
            source = gather_rows(source, order)
        return self.write(source, mask)

    def sequence_state(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> Writes | SourceMemory:
        """What a noncausal layer keeps of the sequence x for its queries to read, as a state object (its bytes:
        :func:`~lavo_zoo.attention.base.tensor_bytes`): with the bidirectional form the writes of every token
        (:class:`Writes`, packed rows with the padding's masked; T entries: it grows with the sequence, since each
        query reads the tokens on both sides of it), with the final state (and where the state is a plain sum:
        :attr:`reads_final_state`) the state after the sequence (:class:`SourceMemory`, constant size). Either way a
        noncausal layer does not stream: its queries need the whole sequence first.

        Args:
            x: [B, T, D].
            padding_mask: [B, T] bool, True = a real token (None: all real).

        Raises:
            ValueError: a layer of another pattern (its state: :meth:`step` or :meth:`cross_cache`), or inputs of
                the wrong shape.
        """
        if self.pattern != "noncausal":
            raise ValueError(f"sequence_state is what a noncausal layer keeps; this attention is '{self.pattern}' "
                             f"(its state: {'step()' if self.pattern == 'causal' else 'cross_cache()'})")
        self._check(x, "x", padding_mask, "padding_mask")
        if self.reads_final_state:
            return self.source_memory(x, padding_mask)
        if padding_mask is None:
            return self.writes(x)
        order, _, mask = pack(padding_mask)
        return self.writes(gather_rows(x, order)).masked(mask)

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
    (the row itself, or its ``context`` in cross attention).

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    src = x if context is None else context
    src_mask = context_mask if m.pattern == "cross" else padding_mask
    for b in range(x.shape[0]):
        rows = torch.arange(x.shape[1]) if padding_mask is None else padding_mask[b].nonzero()[:, 0]
        srows = torch.arange(src.shape[1]) if src_mask is None else src_mask[b].nonzero()[:, 0]
        yield b, rows, x[b:b + 1, rows], src[b:b + 1, srows]


def naive_source_reading(m: RecurrentAttention, op: Callable[..., tuple[torch.Tensor, torch.Tensor]],
                         q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **gates: torch.Tensor | None
                         ) -> torch.Tensor:
    """The slow references' noncausal and cross reading, token by token: what the queries q [1, H, T, K] read of the
    source's writes (k [1, H, S, K], v [1, H, S, V], the gates by the op's argument names, [1, H, S] or
    [1, H, S, c], None for none), built by ``op``, the op's token-by-token recurrence ((q, k, v, **gates,
    state=) -> (o, the state after the last token)). Cross attention and ``noncausal_form="final_state"``: every
    query reads the state after the whole source. Bidirectional: query t reads the state after tokens 1..t (the
    recurrence over the sequence) plus the state after tokens T..t+1 (the recurrence stepped one token at a time
    over the reversed sequence, read before token t's own step), so the token itself counts once.

    Args:
        m: the module (its pattern and ``noncausal_form``).
        op: the op's token-by-token recurrence.
        q: [1, H, T, K] the queries.
        k: [1, H, S, K] the source's keys.
        v: [1, H, S, V] the source's values.
        **gates: the op's gates by its argument names.

    Returns:
        [1, H, T, V], before the output stage.
    """
    if m.pattern == "cross" or m.noncausal_form == "final_state":
        _, state = op(torch.zeros_like(k), k, v, **gates)
        return q @ state
    forward, _ = op(q, k, v, **gates)
    suffix, state = [], None  # state: after the tokens later than t, when query t reads it
    for t in reversed(range(q.shape[2])):
        suffix.append(torch.zeros_like(forward[:, :, t]) if state is None else (q[:, :, t, :, None] * state).sum(-2))
        step = {n: None if g is None else g[:, :, t:t + 1] for n, g in gates.items()}
        _, state = op(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], state=state, **step)
    return forward + torch.stack(suffix[::-1], 2) if suffix else forward
