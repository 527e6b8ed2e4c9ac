"""The LAVO layer (registered ``lavo``): linear attention via orthogonal memory, as docs/lavo.md describes it.

Per head, r orthonormal bases B [r, d] compress a mean of features into r numbers H = B mean(f); a query reads them
with a softmax over the r slots. Causal self-attention (context dissection): an exact w-key sliding window (local
branch, with the embedded position encoding P [2w-1]) plus the memory of the local outputs of all complete windows
before the query's window; output local + global (causal default; the paper's 0.5 * (local + global) is the flag
``combine='half'``), the read sharpened by a learned temperature and taken from the rms-normalised mean (docs/lavo.md,
"Which reading makes the memory count"). Costs O((w + r) T d) time and O(T d) memory; the causal state (last w-1
keys/values, two fp32 sums, the position) is constant-size, so any length streams in chunks.

The layer holds the projections, the parameters (bases, EPE, read temperature, gain), the streaming state and the
one kernel choice per call (:meth:`LavoAttention.kernels`, recorded for :attr:`LavoAttention.mode`). The math is
stateless, beside it: the local branch is the shared window op (:mod:`lavo_zoo.attention.ops.window`), the memory
(its rows, the read, the joining of the branches) the op of :mod:`lavo_zoo.attention.lavo.ops`, whose read kernels
(``read.py``, ``triton.py``) save only q, the memory rows and the bases and recompute in backward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import PATTERNS, Attention, StreamingState
from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.lavo import ops
from lavo_zoo.attention.lavo.ops import COMBINES, EMPTY_MEMORY, MEMORY_NORMS, MemoryState
from lavo_zoo.attention.ops.dispatch import BACKENDS, Kernels, choose_kernels, triton_runs
from lavo_zoo.attention.ops.window import CHUNK, flex, last_positions, window_attention, window_attention_step

MEMORY_SOURCES = ("local_out", "value", "input")
CAUSAL_TEMPERATURE = 16.0  # the read temperature's default (initial value) in causal attention: docs/lavo.md
# parameters renamed since checkpoints were first written (old state_dict key -> new): old checkpoints keep loading
RENAMED_PARAMETERS = {"read_temp": "log_read_temperature", "read_gain": "learned_gain"}


@dataclass
class LavoState(StreamingState):
    """Causal streaming state of one layer (flash-linear-attention's initial_state / final_state convention).

    Its size does not grow with the sequence: ``position`` is the only thing that does. The memory H = B M is
    recomputed from ``sum_complete`` when read (r*d multiply-adds per head), so it is not stored.
    """

    keys: torch.Tensor          # [B, H, L, d] the last L = min(w-1, position) keys (the local window's past)
    values: torch.Tensor        # [B, H, L, d]
    sum_complete: torch.Tensor  # [B, H, d] fp32+: memory features summed over complete windows (all tokens w/o cd)
    sum_partial: torch.Tensor   # [B, H, d] fp32+: ... over the current, incomplete window (zeros w/o cd)
    position: int               # tokens consumed so far

    def detach(self) -> LavoState:
        """The same state cut from the autograd graph (truncated backpropagation through time)."""
        return LavoState(self.keys.detach(), self.values.detach(), self.sum_complete.detach(),
                         self.sum_partial.detach(), self.position)


@dataclass
class LavoCrossCache(StreamingState):
    """Cross-attention cache of one source: its mean memory features, d numbers per head (not the source
    tokens), so a decoding step costs the same for any source length."""

    memory: torch.Tensor  # [B, H, 1, d] mean over the real source tokens (compute dtype)


@register_attention("lavo")
class LavoAttention(Attention):
    """LAVO (Zhang et al. 2023): orthogonal-memory linear attention with context dissection and EPE"""

    family = "orthogonal memory + sliding window"
    decoding_state = "2 (w-1) D window keys/values + 2 D feature sums"
    patterns = PATTERNS
    streaming = True
    eval_options = ("global_read",)
    # the reading before the causal defaults changed (docs/lavo.md): configs saved earlier keep it
    former_defaults: ClassVar[dict[str, Any]] = {"combine": "half", "read_temperature": 0.0, "memory_norm": "mean"}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", num_bases: int | None = None,
                 window_size: int = 16, context_dissection: bool = True, position_encoding: bool = True,
                 memory_source: str | None = None, bases_trainable: bool = True, empty_memory: str = "local",
                 global_read: bool = True, combine: str | None = None, read_gain: float = 1.0,
                 read_temperature: float | None = None, memory_norm: str | None = None, bases_decay: bool = True,
                 dropout: float = 0.0, bias: bool = True, backend: str = "auto") -> None:
        """``num_bases`` defaults to min(64, head_dim); ``memory_source`` to 'local_out' with context dissection
        and 'value' without it and in cross attention. Cross attention has no local branch, hence no EPE. In
        noncausal attention the memory is the mean over all real tokens either way (``context_dissection`` only
        picks the default source). ``dropout`` applies to both branches' attention probabilities in training.
        ``backend`` picks the kernels (see :meth:`kernels`); 'auto' is right everywhere, the others are for tests
        and benchmarks.

        The reading of the memory (docs/lavo.md, "Flags"; None: the pattern's default, the measured reading in
        causal attention, the paper's otherwise): ``global_read=False`` drops the global branch (a local window with
        the EPE bias, the control that prices the memory); ``combine`` (causal 'sum', else 'half') joins the
        branches as the paper's 0.5 (local + global) ('half'), local + ``read_gain`` x global ('sum') or local +
        g_h x global with a learned per-head gain g_h initialised at ``read_gain`` ('gain'); ``read_temperature``
        (causal 16, else 0 = off) learns a per-head factor on q before the read, initialised at that value (the slot
        logits are the only place q enters it); ``memory_norm`` (causal 'rms', else 'mean') reads m / rms(m)
        instead of the mean m; ``bases_decay=False`` exempts trainable bases from weight decay."""
        super().__init__(embed_dim, num_heads, pattern)
        d = self.head_dim
        r = min(64, d) if num_bases is None else num_bases
        if not 1 <= r <= d:
            raise ValueError(f"num_bases ({r}) must be between 1 and the head dim {d} (embed_dim {embed_dim} / "
                             f"num_heads {num_heads}): each head's {r} bases are orthonormal vectors in R^{d}")
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size}")
        if memory_source is None:
            memory_source = "local_out" if context_dissection and pattern != "cross" else "value"
        if memory_source not in MEMORY_SOURCES:
            raise ValueError(f"memory_source must be one of {', '.join(MEMORY_SOURCES)}, got '{memory_source}'")
        if pattern == "cross" and memory_source == "local_out":
            raise ValueError("cross attention has no local branch: memory_source must be 'value' or 'input'")
        if empty_memory not in EMPTY_MEMORY:
            raise ValueError(f"empty_memory must be one of {', '.join(EMPTY_MEMORY)}, got '{empty_memory}'")
        if combine is None:  # causal: 'half' halves the local branch at the first window boundary (docs/lavo.md)
            combine = "sum" if pattern == "causal" else "half"
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {', '.join(COMBINES)}, got '{combine}'")
        if combine != "half" and empty_memory != "local":
            raise ValueError(f"empty_memory='{empty_memory}' only applies to combine='half' (with '{combine}' the "
                             "global branch adds nothing where the memory is empty)")
        if combine == "half" and read_gain != 1.0:
            raise ValueError(f"read_gain ({read_gain}) applies to combine='sum' or 'gain'; 'half' is 0.5 (local + "
                             "global)")
        if read_temperature is None:
            read_temperature = CAUSAL_TEMPERATURE if pattern == "causal" else 0.0
        if read_temperature < 0:
            raise ValueError(f"read_temperature must be positive (0: none), got {read_temperature}")
        if memory_norm is None:
            memory_norm = "rms" if pattern == "causal" else "mean"
        if memory_norm not in MEMORY_NORMS:
            raise ValueError(f"memory_norm must be one of {', '.join(MEMORY_NORMS)}, got '{memory_norm}'")
        if pattern == "cross" and not global_read:
            raise ValueError("cross attention is the global read alone: global_read=False would leave nothing")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
        self.backend = backend
        # queries per recomputed chunk; None: CHUNK for the window, read_chunk() for the memory read (tests set it
        # small to cross chunk boundaries)
        self.chunk_size: int | None = None
        self.num_bases, self.window_size, self.dropout = r, window_size, dropout
        self.context_dissection, self.memory_source, self.empty_memory = context_dissection, memory_source, empty_memory
        self.global_read, self.combine, self.memory_norm = global_read, combine, memory_norm
        self.read_gain = read_gain  # combine 'sum': the global branch's constant factor; 'gain': its initial value
        self.has_local = pattern != "cross"
        D = embed_dim
        self.q_proj = nn.Linear(D, D, bias=bias)
        self.k_proj = nn.Linear(D, D, bias=bias) if self.has_local else None
        self.v_proj = nn.Linear(D, D, bias=bias) if self.has_local or memory_source == "value" else None
        self.out_proj = nn.Linear(D, D, bias=bias)
        bases = torch.empty(num_heads, r, d)
        for h in range(num_heads):  # per head: orthogonal_ on the 3-D tensor would orthogonalise the wrong axes
            nn.init.orthogonal_(bases[h])
        if bases_trainable:
            self.bases = nn.Parameter(bases)                       # [H, r, d]
            self.bases.no_weight_decay = not bases_decay           # honoured by lavo_zoo.engine.optim
        else:
            self.register_buffer("bases", bases)
        self.epe = nn.Parameter(torch.zeros(num_heads, 2 * window_size - 1)) if position_encoding and self.has_local \
            else None                                               # [H, 2w-1]
        # log of the learned per-head factor on q before the read ('read_temp' in older checkpoints)
        self.log_read_temperature = None if read_temperature == 0 else \
            nn.Parameter(torch.full((num_heads,), math.log(read_temperature)))                 # [H]
        # combine 'gain': the learned per-head gain of the global branch ('read_gain' in older checkpoints)
        self.learned_gain = nn.Parameter(torch.full((num_heads,), float(read_gain))) \
            if combine == "gain" and self.has_local else None                                   # [H]
        self.register_load_state_dict_pre_hook(_load_renamed_parameters)

    @property
    def encodes_position(self) -> bool:
        return self.epe is not None

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, num_bases={self.num_bases}, window_size={self.window_size}, "
                f"context_dissection={self.context_dissection}, position_encoding={self.epe is not None}, "
                f"memory_source={self.memory_source}, empty_memory={self.empty_memory}, "
                f"global_read={self.global_read}, "
                f"combine={self.combine}, read_gain={self.read_gain}, "
                f"read_temperature={self.log_read_temperature is not None}, "
                f"memory_norm={self.memory_norm}")

    # ------------------------------------------------------------------------------------------------ kernels
    def kernels(self, q: torch.Tensor) -> Kernels:
        """The kernels of a call on queries q [B, H, T, d]: this layer's ``backend``, ``dropout`` and training mode
        handed to the one kernel choice, :func:`lavo_zoo.attention.ops.dispatch.choose_kernels`, whose docstring has
        the rules: ('flex', 'recompute') on CUDA (('triton', 'triton') with ``LAVO_ZOO_TRITON=1`` or
        ``backend='triton'``), ('recompute', 'recompute') on CPU (save q, k, v, the memory rows and the bases;
        recompute in backward) and on CUDA with attention dropout in training (flex has no dropout; the Triton and
        recompute kernels regenerate the mask in backward). Pure: a forward call records the pair it used, for
        :attr:`mode`.

        Args:
            q: the call's queries (device, dtype and length decide).

        Returns:
            :class:`~lavo_zoo.attention.ops.dispatch.Kernels` (window, read): the local branch's and the read's.
        """
        return choose_kernels(q, self.backend, dropout=self.dropout, training=self.training)

    @property
    def mode(self) -> str:
        """The kernels of the last call ('triton', 'flex+recompute', 'recompute', 'autograd'; local+read when they
        differ); before any call, those a long sequence on the parameters' device and dtype would get."""
        local, read = getattr(self, "_last_kernels", None) or self.kernels(
            self.q_proj.weight.new_empty(1, self.num_heads, flex.MIN_QUERIES, self.head_dim))
        return local if local == read else f"{local}+{read}"

    def _after_fallback(self, q: torch.Tensor, kernels: Kernels) -> None:
        """Where a Triton kernel could not be compiled during the call (it then ran on the fallback, and the Triton
        kernels are off for the process), record the kernels the call ended on for :attr:`mode`."""
        if "triton" in kernels and not triton_runs(q):
            self._last_kernels = self.kernels(q)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)  # [B, T, D] -> [B, H, T, d]

    def _gain(self) -> float | torch.Tensor:
        """The global branch's factor: the learned per-head gain [H] ('gain'), else the constant ``read_gain``."""
        return self.learned_gain if self.learned_gain is not None else self.read_gain

    def _read(self, q: torch.Tensor, mem: torch.Tensor, kernel: str, offset: int = 0, group: int = 1
              ) -> torch.Tensor:
        """Read the orthogonal memory with this layer's bases and reading options (:func:`.ops.read`): q [B, H, T, d],
        mem [B, H, n, d] mean features (query t reads row (offset + t) // group; n == 1: every query the one row)
        -> [B, H, T, d] in the compute dtype."""
        return ops.read(q, mem, self.bases, kernel, offset=offset, group=group,
                        log_temperature=self.log_read_temperature, memory_norm=self.memory_norm,
                        chunk=self.chunk_size, dropout=self.dropout, training=self.training)

    def _check_state(self, state: object, x: torch.Tensor) -> None:
        if not isinstance(state, LavoState):
            raise TypeError(f"state must be the LavoState returned by this attention, got {type(state).__name__}")
        if state.keys.shape[:2] != (x.shape[0], self.num_heads) or state.keys.shape[-1] != self.head_dim:
            raise ValueError(f"state is for batch/heads/head_dim {list(state.keys.shape[:2])}/{state.keys.shape[-1]},"
                             f" input has batch {x.shape[0]} and this layer {self.num_heads} heads of {self.head_dim}")

    # ------------------------------------------------------------------------------------------------ forward
    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: LavoState | None, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, LavoState]:
        B, T, D = x.shape
        if state is not None:
            self._check_state(state, x)
        if T == 0:
            y = x.new_empty(B, 0, D)
            return (y, state) if return_state else y
        q = self._heads(self.q_proj(x))                                              # [B, H, T, d]
        kernels = self._last_kernels = self.kernels(q)                               # the one choice, recorded
        new_state = None
        if self.pattern == "cross":
            out = self._read(q, self.cross_memory(context, context_mask), kernels.read)  # [B, H, T, d]
        else:
            out, new_state = self._self(x, q, padding_mask, state, return_state, kernels)
        self._after_fallback(q, kernels)
        if padding_mask is not None:
            out = out * padding_mask[:, None, :, None]
        y = self.out_proj(out.transpose(1, 2).reshape(B, T, D).to(x.dtype))  # a view when out is laid out [B, T, H, d]
        return (y, new_state) if return_state else y

    # ------------------------------------------------------------------------------------------ cross attention
    def cross_memory(self, context: torch.Tensor, context_mask: torch.Tensor | None) -> torch.Tensor:
        """Cross attention's memory: mean over the valid source tokens of v (or the raw heads), [B, H, 1, d] in the
        compute dtype. It depends on the source only: compute it once per source and reuse it every decoding step."""
        ct = compute_dtype(context.dtype)
        B, S = context.shape[:2]
        src = self._heads(self.v_proj(context) if self.v_proj is not None else context)     # [B, H, S, d]
        valid = torch.ones(B, 1, S, dtype=ct, device=context.device) if context_mask is None \
            else context_mask[:, None].to(ct)                                                # [B, 1, S]
        return ops.mean_memory(src.to(ct) * valid[..., None], valid)

    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> LavoCrossCache:
        """Only the source's mean memory is kept: a decoding step costs the same for any source length."""
        super().cross_cache(context, context_mask)  # validates
        return LavoCrossCache(self.cross_memory(context, context_mask))

    def cross_step(self, x: torch.Tensor, cache: LavoCrossCache) -> torch.Tensor:
        if not isinstance(cache, LavoCrossCache) or cache.memory.shape[1:] != (self.num_heads, 1, self.head_dim):
            raise TypeError("cache must be the LavoCrossCache that this attention's cross_cache() returned")
        q = self._heads(self.q_proj(x))                                                  # [B, H, t, d]
        kernels = self._last_kernels = self.kernels(q)                                   # the one choice, recorded
        out = self._read(q, cache.memory, kernels.read)                                  # [B, H, t, d]
        self._after_fallback(q, kernels)
        return self.out_proj(out.transpose(1, 2).flatten(2).to(x.dtype))                 # [B, t, D]

    # --------------------------------------------------------------------------------------------- self-attention
    def _self(self, x: torch.Tensor, q: torch.Tensor, padding_mask: torch.Tensor | None, state: LavoState | None,
              return_state: bool, kernels: Kernels) -> tuple[torch.Tensor, LavoState | None]:
        """Causal and noncausal self-attention: local window branch plus memory. Returns [B, H, T, d] and the new
        streaming state (when asked for)."""
        B, T, _ = x.shape
        w = self.window_size
        if T == 1 and state is not None and padding_mask is None and self.context_dissection and \
                kernels.window != "autograd" and not (self.dropout and self.training):  # the step has no dropout
            return self._decode_one(x, q, state, kernels.read)
        k, v = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))              # [B, H, T, d]
        past_k, past_v = (state.keys, state.values) if state is not None else (None, None)  # [B, H, <w, d]
        prefix = None if state is None else (past_k, past_v)
        local = window_attention(q, k, v, w, causal=self.pattern == "causal", bias=self.epe,
                                 key_mask=padding_mask, prefix=prefix, dropout=self.dropout, training=self.training,
                                 backend=kernels.window, chunk=self.chunk_size or CHUNK)  # [B, H, T, d]
        position = (state.position if state is not None else 0) + T
        if not self.global_read:  # the local window with the EPE bias alone; the state's sums stay zero
            if not return_state:
                return local, None
            zero = torch.zeros(B, self.num_heads, self.head_dim, dtype=compute_dtype(x.dtype), device=x.device)
            return local, LavoState(last_positions(past_k, k, w), last_positions(past_v, v, w), zero, zero.clone(),
                                    position)
        initial = None if state is None else MemoryState(state.sum_complete, state.sum_partial, state.position)
        out, final = ops.memory_branch(
            q, local, self._features(x, v, local), self.bases, w, padding_mask=padding_mask,
            causal=self.pattern == "causal", context_dissection=self.context_dissection, combine=self.combine,
            gain=self._gain(), empty_memory=self.empty_memory, log_temperature=self.log_read_temperature,
            memory_norm=self.memory_norm, kernel=kernels.read, chunk=self.chunk_size, dropout=self.dropout,
            training=self.training, initial_state=initial, output_final_state=return_state and self.pattern == "causal",
            inplace=kernels.window == kernels.read == "recompute")  # fresh outputs: combine may overwrite them
        if final is None:
            return out, None
        return out, LavoState(last_positions(past_k, k, w), last_positions(past_v, v, w), final.sum_complete,
                              final.sum_partial, final.position)

    def _decode_one(self, x: torch.Tensor, q: torch.Tensor, state: LavoState, read_kernel: str
                    ) -> tuple[torch.Tensor, LavoState]:
        """One causal token after ``state`` (context dissection, no padding): the output and state of the chunked
        path in a handful of small operations, since a decoding step's cost is all fixed overhead. x [B, 1, D],
        q [B, H, 1, d] -> ([B, H, 1, d] in the compute dtype, the new state)."""
        w = self.window_size
        k, v = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))              # [B, H, 1, d]
        if read_kernel == "triton" and self.global_read and state.position > 0 and not torch.is_grad_enabled():
            stepped = self._decode_one_triton(x, q, k, v, state)                    # one kernel, no graph to record
            if stepped is not None:
                return stepped
        local = window_attention_step(q, k, v, w, prefix=(state.keys, state.values), bias=self.epe)  # [B, H, 1, d]
        keys, values = last_positions(state.keys, k, w), last_positions(state.values, v, w)
        if not self.global_read:  # the local window alone; the state's sums stay zero
            return local, LavoState(keys, values, state.sum_complete, state.sum_partial, state.position + 1)
        out, memory = ops.memory_step(
            q, local, self._features(x, v, local), self.bases, w,
            MemoryState(state.sum_complete, state.sum_partial, state.position), combine=self.combine,
            gain=self._gain(), empty_memory=self.empty_memory, log_temperature=self.log_read_temperature,
            memory_norm=self.memory_norm, kernel=read_kernel, chunk=self.chunk_size)
        return out, LavoState(keys, values, memory.sum_complete, memory.sum_partial, memory.position)

    def _decode_one_triton(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           state: LavoState) -> tuple[torch.Tensor, LavoState] | None:
        """:meth:`_decode_one` as one Triton kernel (the window step, the read, the joining and the new state), or
        None where the kernel cannot be compiled on this device (warned once; the caller runs the torch ops)."""
        from lavo_zoo.attention.lavo import triton as lavo_triton
        from lavo_zoo.attention.ops import triton_utils

        feat = None if self.memory_source == "local_out" else (v if self.memory_source == "value" else self._heads(x))
        try:
            out, keys, values, complete, partial = lavo_triton.decode_step_triton(
                q, k, v, state.keys, state.values, state.sum_complete, state.sum_partial, state.position, self.bases,
                self.window_size, bias=self.epe, feat=feat, log_temperature=self.log_read_temperature,
                memory_norm=self.memory_norm, combine=self.combine, gain=self._gain(), empty_memory=self.empty_memory)
        except triton_utils.KernelUnavailable:
            return None
        return out, LavoState(keys, values, complete, partial, state.position + 1)

    def _features(self, x: torch.Tensor, v: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """The per-token features the memory averages (``memory_source``), [B, H, T, d] in the compute dtype."""
        if self.memory_source == "local_out":
            return local
        return (v if self.memory_source == "value" else self._heads(x)).to(local.dtype)


def _load_renamed_parameters(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load-state-dict pre-hook: a state dict written before the parameters' renames (:data:`RENAMED_PARAMETERS`)
    loads under the new names."""
    for old, new in RENAMED_PARAMETERS.items():
        if prefix + old in state_dict and prefix + new not in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)
