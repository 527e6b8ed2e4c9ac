"""The LAVO layer (registered ``lavo``): linear attention via orthogonal memory, as docs/lavo.md describes it.

Per head, r orthonormal bases B [r, d] compress a mean of features into r numbers H = B mean(f); a query reads them
with a softmax over the r slots. Causal self-attention (context dissection): an exact w-key sliding window (local
branch, with the embedded position encoding P [2w-1]) plus the memory of the local outputs of all complete windows
before the query's window; output local + global (causal default; the paper's 0.5 * (local + global) is the flag
``combine='half'``), the read sharpened by a learned temperature and taken from the rms-normalised mean (docs/lavo.md,
"Which reading makes the memory count"). Costs O((w + r) T d) time and O(T d) memory; the causal state (last w-1
keys/values, two fp32 sums, the position) is constant-size, so any length streams in chunks.

Training memory: the local branch and the memory read are autograd Functions that save only q, k, v, the per-window
memory means and the bases, and recompute their [T, 2w] and [T, r] internals chunk by chunk in backward
(:mod:`lavo_zoo.attention.ops.window`, :mod:`lavo_zoo.attention.lavo.memory`); everything between them works on
per-window sums. Which kernel runs is decided in :meth:`LavoAttention.kernels`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import PATTERNS, Attention, StreamingState
from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.lavo.memory import read_memory, read_memory_autograd, triton_applies
from lavo_zoo.attention.ops.window import CHUNK, flex, last_positions, window_attention

MEMORY_SOURCES = ("local_out", "value", "input")
EMPTY_MEMORY = ("local", "half")
COMBINES = ("half", "sum", "gain")
MEMORY_NORMS = ("mean", "rms")
RMS_EPS = 1e-6
CAUSAL_TEMPERATURE = 16.0  # the read temperature's default (initial value) in causal attention: docs/lavo.md
BACKENDS = ("auto", "recompute", "autograd", "flex", "triton")


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


def window_sums(feats: torch.Tensor, a: int, w: int) -> torch.Tensor:
    """Sums of feats [B, H, T, d] over windows of w time steps, the first window starting a steps before position 0
    (its first a steps and the last window's tail count as zeros): [B, H, ceil((a + T) / w), d]. The whole windows
    are summed through a view, so no padded copy of feats is made."""
    T = feats.shape[2]
    head = min(T, (w - a) % w)                                    # steps that finish the first, partial window
    whole = (T - head) // w * w
    parts = [feats[:, :, :head].sum(2, keepdim=True)] if head else []
    parts.append(feats[:, :, head:head + whole].unflatten(2, (whole // w, w)).sum(3))
    if head + whole < T:
        parts.append(feats[:, :, head + whole:].sum(2, keepdim=True))
    return torch.cat(parts, 2)


@register_attention("lavo")
class LavoAttention(Attention):
    """LAVO (Zhang et al. 2023): orthogonal-memory linear attention with context dissection and EPE"""

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
        self.fixed_gain = read_gain  # combine 'sum': the global branch's constant factor
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
        # log of the per-head factor on q before the read; the per-head gain of the global branch
        self.read_temp = None if read_temperature == 0 else \
            nn.Parameter(torch.full((num_heads,), math.log(read_temperature)))                 # [H]
        self.read_gain = nn.Parameter(torch.full((num_heads,), float(read_gain))) \
            if combine == "gain" and self.has_local else None                                   # [H]

    @property
    def encodes_position(self) -> bool:
        return self.epe is not None

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, num_bases={self.num_bases}, window_size={self.window_size}, "
                f"context_dissection={self.context_dissection}, position_encoding={self.epe is not None}, "
                f"memory_source={self.memory_source}, empty_memory={self.empty_memory}, "
                f"global_read={self.global_read}, "
                f"combine={self.combine}, read_gain={self.fixed_gain}, read_temperature={self.read_temp is not None}, "
                f"memory_norm={self.memory_norm}")

    # ------------------------------------------------------------------------------------------------ kernels
    def kernels(self, q: torch.Tensor) -> tuple[str, str]:
        """(local branch, memory read) kernels for queries q [B, H, T, d], decided here rather than in the helpers,
        and recorded for :attr:`mode`.

        - attention dropout in training: ('autograd', 'autograd'), the composable blocked ops, which keep their
          [T, 2w] and [T, r] probabilities for backward (the dropout mask must be the one backward sees);
        - CUDA, Triton importable, ``LAVO_ZOO_TRITON`` not 0, fp16/bf16/fp32: ('triton', 'triton'), the fused
          Triton kernels (``ops/window/triton.py``, ``lavo/triton.py``), streaming chunks included;
        - otherwise on CUDA, at least ``flex.MIN_QUERIES`` queries, ``LAVO_ZOO_FLEX`` not 0: ('flex', 'recompute'),
          the fused flex_attention kernel for the window (it saves q, k, v, its output and log-sum-exp);
        - otherwise ('recompute', 'recompute'): Functions that save q, k, v, the memory rows and the bases and
          recompute chunk by chunk in backward (O(T d) saved, nothing O(T w) or O(T r)).
        ``backend`` other than 'auto' forces the local kernel (dropout in training still forces 'autograd');
        'triton' where Triton cannot run (CPU outside its interpreter, fp64) falls back to 'recompute'.
        """
        chosen = self._choose(q)
        self._mode = chosen
        return chosen

    def _choose(self, q: torch.Tensor) -> tuple[str, str]:
        if self.dropout and self.training:
            return "autograd", "autograd"
        if self.backend == "triton" or (self.backend == "auto" and q.is_cuda):
            if triton_applies(q):
                return "triton", "triton"
            if self.backend == "triton":
                return "recompute", "recompute"
        if self.backend != "auto":
            return self.backend, "autograd" if self.backend == "autograd" else "recompute"
        return ("flex" if flex.enabled(q, 0.0, False) else "recompute"), "recompute"

    @property
    def mode(self) -> str:
        """The kernels of the last call ('triton', 'flex+recompute', 'recompute', 'autograd'; local+read when they
        differ); before any call, those a long sequence on the parameters' device and dtype would get."""
        local, read = getattr(self, "_mode", None) or self._choose(
            self.q_proj.weight.new_empty(1, self.num_heads, flex.MIN_QUERIES, self.head_dim))
        return local if local == read else f"{local}+{read}"

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)  # [B, T, D] -> [B, H, T, d]

    def _read(self, q: torch.Tensor, mem: torch.Tensor, kernel: str, offset: int = 0, group: int = 1
              ) -> torch.Tensor:
        """Read the orthogonal memory: q [B, H, T, d], mem [B, H, n, d] mean features (query t reads row
        (offset + t) // group; n == 1: every query the one row) -> [B, H, T, d] in the compute dtype. The reading's
        options act here, outside the kernels: the temperature scales q, ``memory_norm='rms'`` rescales the rows."""
        if self.read_temp is not None:
            q = q * self.read_temp.exp().to(q.dtype)[:, None, None]                 # [H, 1, 1] per head
        if self.memory_norm == "rms":
            mem = mem * torch.rsqrt(mem.square().mean(-1, keepdim=True) + RMS_EPS)   # [B, H, n, d]; zero rows stay 0
        if kernel == "autograd":
            return read_memory_autograd(q, mem, self.bases, offset, group, self.dropout, self.training)
        if kernel == "triton":
            from lavo_zoo.attention.lavo import triton as lavo_triton
            return lavo_triton.read_memory_triton(q, mem, self.bases, offset, group)
        return read_memory(q, mem, self.bases, offset, group, self.chunk_size)

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
        new_state = None
        if self.pattern == "cross":
            out = self._cross(q, context, context_mask)                              # [B, H, T, d]
        else:
            out, new_state = self._self(x, q, padding_mask, state, return_state)
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
        return (src.to(ct) * valid[..., None]).sum(2, keepdim=True) / valid.sum(-1).clamp(min=1)[..., None, None]

    def _cross(self, q: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor | None) -> torch.Tensor:
        """Cross attention: every query reads the one memory of its source (no local branch). [B, H, T, d]."""
        return self._read(q, self.cross_memory(context, context_mask), self.kernels(q)[1])

    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> LavoCrossCache:
        """Only the source's mean memory is kept: a decoding step costs the same for any source length."""
        super().cross_cache(context, context_mask)  # validates
        return LavoCrossCache(self.cross_memory(context, context_mask))

    def cross_step(self, x: torch.Tensor, cache: LavoCrossCache) -> torch.Tensor:
        if not isinstance(cache, LavoCrossCache) or cache.memory.shape[1:] != (self.num_heads, 1, self.head_dim):
            raise TypeError("cache must be the LavoCrossCache that this attention's cross_cache() returned")
        q = self._heads(self.q_proj(x))                                                  # [B, H, t, d]
        out = self._read(q, cache.memory, self.kernels(q)[1])                            # [B, H, t, d]
        return self.out_proj(out.transpose(1, 2).flatten(2).to(x.dtype))                 # [B, t, D]

    def _self(self, x: torch.Tensor, q: torch.Tensor, padding_mask: torch.Tensor | None, state: LavoState | None,
              return_state: bool) -> tuple[torch.Tensor, LavoState | None]:
        """Causal and noncausal self-attention: local window branch plus memory. Returns [B, H, T, d] and the new
        streaming state (when asked for)."""
        B, T, _ = x.shape
        ct = compute_dtype(x.dtype)
        local_kernel, read_kernel = self.kernels(q)
        if T == 1 and state is not None and padding_mask is None and self.context_dissection and \
                local_kernel != "autograd":
            return self._decode_one(x, q, state, read_kernel)
        k, v = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))              # [B, H, T, d]
        past_k, past_v = (state.keys, state.values) if state is not None else (None, None)  # [B, H, <w, d]
        prefix = None if state is None else (past_k, past_v)
        local = window_attention(q, k, v, self.window_size, causal=self.pattern == "causal", bias=self.epe,
                                 key_mask=padding_mask, prefix=prefix, dropout=self.dropout, training=self.training,
                                 backend=local_kernel, chunk=self.chunk_size or CHUNK)  # [B, H, T, d]
        valid = torch.ones(B, 1, T, dtype=ct, device=x.device) if padding_mask is None \
            else padding_mask[:, None].to(ct)                                        # [B, 1, T]
        if not self.global_read:  # the local window with the EPE bias alone; the state's sums stay zero
            if not return_state:
                return local, None
            zero = torch.zeros(B, self.num_heads, self.head_dim, dtype=ct, device=x.device)
            return local, LavoState(last_positions(past_k, k, self.window_size),
                                    last_positions(past_v, v, self.window_size), zero, zero.clone(),
                                    (state.position if state else 0) + T)
        feats = self._features(x, v, local)                                          # [B, H, T, d]
        if padding_mask is not None:
            feats = feats * valid[..., None]
        if self.pattern == "noncausal":
            mem = feats.sum(2, keepdim=True) / valid.sum(-1).clamp(min=1)[..., None, None]      # [B, H, 1, d]
            del feats
            return self._combine(local, self._read(q, mem, read_kernel), None,
                                 local_kernel == read_kernel == "recompute"), None
        inplace = local_kernel == read_kernel == "recompute"  # fresh outputs: combine overwrites them (_combine)
        if self.context_dissection:
            out, sums = self._dissected(q, local, feats, valid, state, read_kernel, inplace)
        else:
            out, sums = self._running(q, local, feats, valid, state, read_kernel, inplace)
        if not return_state:
            return out, None
        w = self.window_size  # fresh tensors: views would keep whole-chunk tensors alive inside the state
        return out, LavoState(last_positions(past_k, k, w), last_positions(past_v, v, w), *(s.clone() for s in sums),
                              (state.position if state else 0) + T)

    def _decode_one(self, x: torch.Tensor, q: torch.Tensor, state: LavoState, read_kernel: str
                    ) -> tuple[torch.Tensor, LavoState]:
        """One causal token after ``state`` (context dissection, no padding): the output and state of the chunked
        path in a handful of small operations, since a decoding step's cost is all fixed overhead. x [B, 1, D],
        q [B, H, 1, d] -> ([B, H, 1, d] in the compute dtype, the new state)."""
        ct = compute_dtype(x.dtype)
        w, pos = self.window_size, state.position
        k, v = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))              # [B, H, 1, d]
        keys, values = torch.cat([state.keys, k], 2).to(ct), torch.cat([state.values, v], 2).to(ct)  # [B, H, L, d]
        L = keys.shape[2]                                                            # keys t-L+1..t, L <= w
        scores = (q.to(ct) * self.head_dim ** -0.5) @ keys.transpose(-1, -2)         # [B, H, 1, L]
        if self.epe is not None:                                                     # key s: epe[s - t + w - 1]
            scores = scores + self.epe[:, w - L:w].to(ct)[None, :, None]
        local = scores.softmax(-1) @ values                                          # [B, H, 1, d]
        keys, values = last_positions(state.keys, k, w), last_positions(state.values, v, w)
        if not self.global_read:  # the local window alone; the state's sums stay zero
            return local, LavoState(keys, values, state.sum_complete, state.sum_partial, pos + 1)
        count = pos - pos % w                                                        # tokens of complete windows
        empty = torch.full((1, 1, 1, 1), count == 0, device=x.device)
        glob = self._read(q, state.sum_complete[:, :, None] / max(count, 1), read_kernel)  # zeros while empty
        partial = state.sum_partial + self._features(x, v, local)[:, :, 0]           # [B, H, d]
        complete = state.sum_complete
        if (pos + 1) % w == 0:                                                       # the window is complete
            complete, partial = complete + partial, torch.zeros_like(partial)
        return self._combine(local, glob, empty, inplace=False), LavoState(keys, values, complete, partial, pos + 1)

    def _features(self, x: torch.Tensor, v: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """The per-token features the memory averages (``memory_source``), [B, H, T, d] in the compute dtype."""
        if self.memory_source == "local_out":
            return local
        return (v if self.memory_source == "value" else self._heads(x)).to(local.dtype)

    def _combine(self, local: torch.Tensor, glob: torch.Tensor, empty: torch.Tensor | None, inplace: bool
                 ) -> torch.Tensor:
        """Join the branches (``combine``). 'half': 0.5 * (local + glob) where the memory is non-empty; local
        (empty_memory 'local') or 0.5 * local ('half') where it is empty (empty [B, 1, T, 1] bool or None). 'sum' /
        'gain': local + read_gain * glob / local + g_h * glob (glob is exactly zero where the memory is empty, so
        there the output is local). glob's gradient is zero at empty positions. ``inplace``: overwrite local and glob
        (fresh outputs of the recompute Functions, saved by nobody) instead of allocating more [B, H, T, d]
        tensors."""
        if self.combine != "half":  # no mask needed: an empty memory is a zero row, which reads exactly zero
            if self.read_gain is not None:
                glob = glob * self.read_gain.to(glob.dtype)[:, None, None]           # [H, 1, 1]; glob kept for grad
            elif self.fixed_gain != 1.0:
                glob = glob.mul_(self.fixed_gain) if inplace else glob * self.fixed_gain
            return local.add_(glob) if inplace else local + glob
        if empty is None:
            return local.add_(glob).mul_(0.5) if inplace else 0.5 * (local + glob)
        keep = (~empty).to(local.dtype)                                              # [B, 1, T, 1]
        coef = 0.5 + 0.5 * (1 - keep) if self.empty_memory == "local" else torch.full_like(keep, 0.5)
        if inplace:
            return local.mul_(coef).add_(glob.mul_(0.5 * keep))
        return glob * (0.5 * keep) + local * coef

    def _dissected(self, q: torch.Tensor, local: torch.Tensor, feats: torch.Tensor, valid: torch.Tensor,
                   state: LavoState | None, kernel: str, inplace: bool
                   ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Context dissection: window j reads the mean features of the complete windows before it (cumulative sums
        over windows, O(T r d)). Returns the output [B, H, T, d] and the state's (sum_complete, sum_partial)."""
        B, H, T, d = feats.shape
        w = self.window_size
        pos = state.position if state is not None else 0
        a = pos % w                                   # the chunk starts a tokens into its first window
        n = math.ceil((a + T) / w)
        end = n * w - a - T
        sums = window_sums(feats, a, w)                                             # [B, H, n, d] per window
        counts = F.pad(valid, (a, end)).unflatten(2, (n, w)).sum(3)                # [B, 1, n]
        prev = torch.zeros(B, H, d, dtype=feats.dtype, device=feats.device) if state is None else state.sum_complete
        if state is not None:
            sums = torch.cat([sums[:, :, :1] + state.sum_partial[:, :, None], sums[:, :, 1:]], 2)
            counts = torch.cat([counts[..., :1] + a, counts[..., 1:]], -1)
        before = prev[:, :, None] + F.pad(sums.cumsum(2), (0, 0, 1, 0))[:, :, :-1]  # [B, H, n, d] complete windows < j
        count = (pos - a) + F.pad(counts.cumsum(-1), (1, 0))[..., :-1]              # [B, 1, n]
        mem = before / count.clamp(min=1)[..., None]                                # [B, H, n, d]
        glob = self._read(q, mem, kernel, offset=a, group=w)                        # [B, H, T, d]
        empty = (count == 0)[..., None].expand(B, 1, n, w).flatten(2)[:, :, a:a + T, None]  # [B, 1, T, 1]
        out = self._combine(local, glob, empty, inplace)
        if (pos + T) % w == 0:
            return out, (before[:, :, -1] + sums[:, :, -1], torch.zeros_like(prev))
        return out, (before[:, :, -1], sums[:, :, -1])

    def _running(self, q: torch.Tensor, local: torch.Tensor, feats: torch.Tensor, valid: torch.Tensor,
                 state: LavoState | None, kernel: str, inplace: bool
                 ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Without context dissection (paper eq. 4): token t reads the running mean of features 0..t. The read saves
        these per-token means ([T, d]: this ablation's memory is one more [T, d] tensor than dissection's)."""
        B, H, _, d = feats.shape
        prev = torch.zeros(B, H, d, dtype=feats.dtype, device=feats.device) if state is None else state.sum_complete
        cum = prev[:, :, None] + feats.cumsum(2)                                    # [B, H, T, d] inclusive sums
        count = (state.position if state is not None else 0) + valid.cumsum(-1)     # [B, 1, T]
        glob = self._read(q, cum / count.clamp(min=1)[..., None], kernel)
        last = cum[:, :, -1]
        del cum
        return self._combine(local, glob, None, inplace), (last, torch.zeros_like(prev))
