"""The LAVO layer (registered ``lavo``): linear attention via orthogonal memory, as docs/lavo.md describes it.

Per head, r orthonormal bases B [r, d] compress a mean of features into r numbers H = B mean(f); a query reads them
with a softmax over the r slots. Causal self-attention (context dissection): an exact w-key sliding window (local
branch, with the embedded position encoding P [2w-1]) plus the memory of the local outputs of all complete windows
before the query's window; output local + global (causal default; the paper's 0.5 * (local + global) is the flag
``combine='half'``), the read sharpened by a learned temperature and taken from the rms-normalised mean (docs/lavo.md,
"Which reading makes the memory count"). Costs O((w + r) T d) time and O(T d) memory; the causal state (last w-1
keys/values, two fp32 sums, the position) is constant-size, so any length streams in chunks.

``memory='binding'`` (docs/lavo.md, "The binding memory") keeps the bases and the read's softmax over them and lets
the memory bind: per basis, the mean of the features weighted by the keys' projections on it, an [r, d] matrix per
head (the state's sums [B, H, r, d]), read by the same softmax over the r bases; the paper's mean stays the default.

The layer holds the projections, the parameters (bases, EPE, read temperature, gain), the streaming state and its
``kernels`` option: the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`, :data:`.ops.LAVO_KERNELS`) chooses the
kernels once per call and reports what ran (:attr:`LavoAttention.kernels_used`). The math is
stateless, beside it: the local branch is the shared window op (:mod:`lavo_zoo.attention.ops.window`), the memory
(its rows, the read, the joining of the branches) the op of :mod:`lavo_zoo.attention.lavo.ops`, whose read kernels
(``read.py``, ``triton.py``) save only q, the memory rows and the bases and recompute in backward.
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
from lavo_zoo.attention.common import compute_dtype, split_qkv
from lavo_zoo.attention.lavo import ops
from lavo_zoo.attention.lavo.ops import COMBINES, EMPTY_MEMORY, LAVO_KERNELS, MEMORIES, MEMORY_NORMS, MemoryState
from lavo_zoo.attention.ops.dispatch import Choice, Chosen, HasKernels
from lavo_zoo.attention.ops.padding import left_aligned
from lavo_zoo.attention.ops.window import CHUNK, last_positions, window_attention, window_attention_step

MEMORY_SOURCES = ("local_out", "value", "input")
DECODING_OPS = ("step",)  # what a decoding step chooses a kernel for (the step's kernel composes the rest)
CAUSAL_TEMPERATURE = 16.0  # the read temperature's default (initial value) in causal attention: docs/lavo.md
# parameters renamed since checkpoints were first written (old state_dict key -> new): old checkpoints keep loading
RENAMED_PARAMETERS = {"read_temp": "log_read_temperature", "read_gain": "learned_gain"}


@dataclass
class LavoState(StreamingState):
    """Causal streaming state of one layer (flash-linear-attention's initial_state / final_state convention).

    Its size does not grow with the sequence: ``position`` is the only thing that does. The memory H = B M is
    recomputed from ``sum_complete`` when read (r*d multiply-adds per head), so it is not stored. With the binding
    memory the sums are [B, H, r, d] (the items c_t f_t^T summed): still constant, r times the paper's.
    :func:`~lavo_zoo.attention.base.tensor_bytes` of a state is its size in bytes.
    """

    keys: torch.Tensor          # [B, H, L, d] the last L = min(w-1, position) keys (the local window's past)
    values: torch.Tensor        # [B, H, L, d]
    sum_complete: torch.Tensor  # [B, H, d] fp32+: memory features summed over complete windows (all tokens w/o cd);
    #                             the binding memory's [B, H, r, d]
    sum_partial: torch.Tensor   # [B, H, d] or [B, H, r, d] fp32+: ... over the current, incomplete window (0 w/o cd)
    position: int               # tokens consumed so far

    def detach(self) -> LavoState:
        """The same state cut from the autograd graph (truncated backpropagation through time)."""
        return LavoState(self.keys.detach(), self.values.detach(), self.sum_complete.detach(),
                         self.sum_partial.detach(), self.position)


    def static(self, window: int) -> LavoStaticState:
        """This state in fixed shapes, for a decoding step that a CUDA graph captures (:class:`LavoStaticState`):
        the keys and values padded in front to w - 1 (``window``: the layer's w), the position as a tensor."""
        B, L = self.keys.shape[0], self.keys.shape[2]
        if not isinstance(window, int) or isinstance(window, bool) or window < max(L + 1, 1):
            raise ValueError(f"window must be the layer's window_size (an int >= {L + 1}: this state holds {L} past "
                             f"keys of its window), got {window!r}")
        pad = (0, 0, window - 1 - L, 0)
        return LavoStaticState(F.pad(self.keys, pad), F.pad(self.values, pad), self.sum_complete.clone(),
                               self.sum_partial.clone(), torch.full((B,), self.position, device=self.keys.device))


@dataclass
class LavoStaticState(StreamingState):
    """A causal decoding state of fixed shapes that each one-token step updates in place (``attn.step(x, state)``
    returns the same object): the step reads its position from a tensor and branches on no value, so a CUDA graph
    can capture it once and replay it for every token. Made from a prefill's :class:`LavoState` by
    :meth:`LavoState.static`; one token per call, no padding."""

    keys: torch.Tensor          # [B, H, w-1, d] the last w-1 keys, oldest first (slots before the first token unread)
    values: torch.Tensor        # [B, H, w-1, d]
    sum_complete: torch.Tensor  # [B, H, d] fp32+, as LavoState's (the binding memory's [B, H, r, d])
    sum_partial: torch.Tensor   # [B, H, d] fp32+ (the binding memory's [B, H, r, d])
    position: torch.Tensor      # [B] int64: tokens consumed so far


@dataclass
class LavoCrossCache(StreamingState):
    """Cross-attention cache of one source: its mean memory features, d numbers per head (the binding memory: its
    r x d matrix per head), not the source tokens, so a decoding step costs the same for any source length."""

    memory: torch.Tensor  # [B, H, 1, d] mean over the real source tokens (compute dtype); binding: [B, H, 1, r, d]


@dataclass(frozen=True)
class LavoOptions:
    """A LAVO layer's options with the pattern's defaults filled in, checked in one place (:meth:`resolve`; the
    meaning of each: :class:`LavoAttention`'s Args)."""

    num_bases: int
    window_size: int
    memory: str
    context_dissection: bool
    position_encoding: bool
    memory_source: str
    bases_trainable: bool
    empty_memory: str
    global_read: bool
    combine: str
    read_gain: float
    read_temperature: float
    memory_norm: str
    bases_decay: bool
    dropout: float
    bias: bool
    kernels: str

    @classmethod
    def resolve(cls, pattern: str, embed_dim: int, num_heads: int, **given: Any) -> LavoOptions:
        """The options of a layer of this pattern and shape.

        Args:
            pattern: causal, noncausal or cross (the defaults and some checks depend on it).
            embed_dim: the layer's width D.
            num_heads: the layer's heads H (the head dim D / H bounds ``num_bases``).
            **given: every option of :class:`LavoAttention`, None where the pattern's default applies.

        Returns:
            The options, no None left.

        Raises:
            ValueError: a value the layer cannot take, or two options that contradict each other; the message
                names the option and what it may be.
        """
        o = dict(given)
        d = embed_dim // num_heads
        if o["num_bases"] is None:
            o["num_bases"] = min(64, d)
        r = o["num_bases"]
        if not 1 <= r <= d:
            raise ValueError(f"num_bases ({r}) must be between 1 and the head dim {d} (embed_dim {embed_dim} / "
                             f"num_heads {num_heads}): each head's {r} bases are orthonormal vectors in R^{d}")
        if o["window_size"] < 1:
            raise ValueError(f"window_size must be >= 1, got {o['window_size']}")
        _one_of("memory", o["memory"], MEMORIES)
        if o["memory_source"] is None:
            o["memory_source"] = "local_out" if o["context_dissection"] and pattern != "cross" else "value"
        _one_of("memory_source", o["memory_source"], MEMORY_SOURCES)
        if pattern == "cross" and o["memory_source"] == "local_out":
            raise ValueError("cross attention has no local branch: memory_source must be 'value' or 'input'")
        _one_of("empty_memory", o["empty_memory"], EMPTY_MEMORY)
        if o["combine"] is None:  # causal: 'half' halves the local branch at the first window boundary (docs/lavo.md)
            o["combine"] = "sum" if pattern == "causal" else "half"
        combine = _one_of("combine", o["combine"], COMBINES)
        if combine != "half" and o["empty_memory"] != "local":
            raise ValueError(f"empty_memory='{o['empty_memory']}' only applies to combine='half' (with '{combine}' "
                             "the global branch adds nothing where the memory is empty)")
        if combine == "half" and o["read_gain"] != 1.0:
            raise ValueError(f"read_gain ({o['read_gain']}) applies to combine='sum' or 'gain'; 'half' is 0.5 "
                             "(local + global)")
        if o["read_temperature"] is None:
            o["read_temperature"] = CAUSAL_TEMPERATURE if pattern == "causal" else 0.0
        if o["read_temperature"] < 0:
            raise ValueError(f"read_temperature must be positive (0: none), got {o['read_temperature']}")
        if o["memory_norm"] is None:
            o["memory_norm"] = "rms" if pattern == "causal" else "mean"
        _one_of("memory_norm", o["memory_norm"], MEMORY_NORMS)
        if pattern == "cross" and not o["global_read"]:
            raise ValueError("cross attention is the global read alone: global_read=False would leave nothing")
        if not 0.0 <= o["dropout"] < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {o['dropout']}")
        LAVO_KERNELS.check(o["kernels"])
        return cls(**o)


def _one_of(option: str, value: str, choices: tuple[str, ...]) -> str:
    """``value``, or the ValueError naming ``option`` and its choices."""
    if value not in choices:
        raise ValueError(f"{option} must be one of {', '.join(choices)}, got '{value}'")
    return value


@register_attention("lavo")
class LavoAttention(HasKernels, Attention):
    """LAVO (Zhang et al. 2023): orthogonal-memory linear attention with context dissection and EPE"""

    family = "orthogonal memory + sliding window"
    decoding_state = "2 (w-1) D window keys/values + 2 D feature sums (memory=binding: 2 r D, r x d per head)"
    patterns = PATTERNS
    streaming = True
    kernel_set = LAVO_KERNELS
    eval_options = ("global_read",)
    # the reading before the causal defaults changed (docs/lavo.md): configs saved earlier keep it
    former_defaults: ClassVar[dict[str, Any]] = {"combine": "half", "read_temperature": 0.0, "memory_norm": "mean"}
    test_options: ClassVar[dict[str, Any]] = {"num_bases": 3, "window_size": 5}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", num_bases: int | None = None,
                 window_size: int = 16, memory: str = "mean", context_dissection: bool = True,
                 position_encoding: bool = True, memory_source: str | None = None, bases_trainable: bool = True,
                 empty_memory: str = "local", global_read: bool = True, combine: str | None = None,
                 read_gain: float = 1.0, read_temperature: float | None = None, memory_norm: str | None = None,
                 bases_decay: bool = True, dropout: float = 0.0, bias: bool = True, kernels: str = "auto") -> None:
        """A LAVO layer; the options are checked by :meth:`LavoOptions.resolve`. None: the pattern's default (the
        reading of the memory: the measured one in causal attention, the paper's otherwise; docs/lavo.md, "Flags").

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            num_bases: r, the orthonormal bases per head (1 <= r <= head dim); None: min(64, head dim).
            window_size: w, the keys of the local window (2w - 1 noncausal) and the length of context dissection's
                windows.
            memory: what the memory keeps of the features: 'mean' (the paper's: their mean, read through its r
                coordinates h = B m) or 'binding' (per basis b_i, the mean of the features weighted by the keys'
                projections b_i . k: an r x d matrix per head, read by the same softmax over the bases; docs/lavo.md,
                "The binding memory"). The Triton kernels read 'mean' only (the PyTorch kernels run 'binding').
            context_dissection: causal: the memory of the complete windows before the query's window (True) or the
                running mean of every token up to the query (False, paper eq. 4). Noncausal attention reads the
                mean of every real token either way (this only picks the default ``memory_source``).
            position_encoding: the embedded position encoding, a learned [H, 2w - 1] bias on the local window's
                scores (none in cross attention, which has no local branch).
            memory_source: what the memory averages: 'local_out' (the local branch's output), 'value' or 'input';
                None: 'local_out' with context dissection, else (and in cross attention) 'value'.
            bases_trainable: learn the bases (initialised orthonormal) or keep them fixed (a buffer).
            empty_memory: combine 'half' only: where the memory is still empty, the local branch alone ('local') or
                halved ('half').
            global_read: False drops the global branch (the local window with the EPE bias: the control that prices
                the memory); an eval option (a trained checkpoint may be scored without it).
            combine: how the branches join: 'half' (the paper's 0.5 (local + global)), 'sum' (local + ``read_gain``
                x global) or 'gain' (local + g_h x global, g_h learned per head from ``read_gain``); None: causal
                'sum', else 'half'.
            read_gain: combine 'sum': the global branch's factor; 'gain': the learned gain's initial value.
            read_temperature: the initial value of a learned per-head factor on q before the read (the slot logits
                are the only place q enters it); 0: none; None: causal 16, else 0.
            memory_norm: read the mean m ('mean') or m / rms(m) ('rms'); None: causal 'rms', else 'mean'.
            bases_decay: False exempts trainable bases from weight decay.
            dropout: attention dropout on both branches' probabilities, in training.
            bias: biases in the q, k, v and output projections.
            kernels: 'auto' (right everywhere) or one kernel's name for both branches ('recompute', 'autograd',
                'flex', 'triton': tests and benchmarks); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`)
                chooses per call.

        Raises:
            ValueError: an option value the layer cannot take (the message names it and what it may be).
        """
        super().__init__(embed_dim, num_heads, pattern)
        o = LavoOptions.resolve(
            pattern, embed_dim, num_heads, num_bases=num_bases, window_size=window_size, memory=memory,
            context_dissection=context_dissection, position_encoding=position_encoding, memory_source=memory_source,
            bases_trainable=bases_trainable, empty_memory=empty_memory, global_read=global_read, combine=combine,
            read_gain=read_gain, read_temperature=read_temperature, memory_norm=memory_norm, bases_decay=bases_decay,
            dropout=dropout, bias=bias, kernels=kernels)
        self.kernels = o.kernels
        # queries per recomputed chunk; None: CHUNK for the window, read_chunk() for the memory read (tests set it
        # small to cross chunk boundaries)
        self.chunk_size: int | None = None
        self.num_bases, self.window_size, self.dropout = o.num_bases, o.window_size, o.dropout
        self.memory = o.memory
        self.binding = o.memory == "binding"  # the ops' switch: the keys' projections weight the features
        self.context_dissection, self.memory_source, self.empty_memory = (o.context_dissection, o.memory_source,
                                                                          o.empty_memory)
        self.global_read, self.combine, self.memory_norm = o.global_read, o.combine, o.memory_norm
        self.read_gain = o.read_gain  # combine 'sum': the global branch's constant factor; 'gain': its initial value
        self.has_local = pattern != "cross"
        D = embed_dim
        self.q_proj = nn.Linear(D, D, bias=o.bias)
        self.k_proj = nn.Linear(D, D, bias=o.bias) if self.has_local or self.binding else None  # binding: its keys
        self.v_proj = nn.Linear(D, D, bias=o.bias) if self.has_local or o.memory_source == "value" else None
        self.out_proj = nn.Linear(D, D, bias=o.bias)
        bases = torch.empty(num_heads, o.num_bases, self.head_dim)
        for h in range(num_heads):  # per head: orthogonal_ on the 3-D tensor would orthogonalise the wrong axes
            nn.init.orthogonal_(bases[h])
        if o.bases_trainable:
            self.bases = nn.Parameter(bases)                       # [H, r, d]
            self.bases.no_weight_decay = not o.bases_decay         # honoured by lavo_zoo.engine.optim
        else:
            self.register_buffer("bases", bases)
        self.epe = nn.Parameter(torch.zeros(num_heads, 2 * o.window_size - 1)) \
            if o.position_encoding and self.has_local else None    # [H, 2w-1]
        # log of the learned per-head factor on q before the read ('read_temp' in older checkpoints)
        self.log_read_temperature = None if o.read_temperature == 0 else \
            nn.Parameter(torch.full((num_heads,), math.log(o.read_temperature)))               # [H]
        # combine 'gain': the learned per-head gain of the global branch ('read_gain' in older checkpoints)
        self.learned_gain = nn.Parameter(torch.full((num_heads,), float(o.read_gain))) \
            if o.combine == "gain" and self.has_local else None                                 # [H]
        self.register_load_state_dict_pre_hook(_load_renamed_parameters)

    @property
    def encodes_position(self) -> bool:
        return self.epe is not None

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, num_bases={self.num_bases}, window_size={self.window_size}, "
                f"memory={self.memory}, "
                f"context_dissection={self.context_dissection}, position_encoding={self.epe is not None}, "
                f"memory_source={self.memory_source}, empty_memory={self.empty_memory}, "
                f"global_read={self.global_read}, "
                f"combine={self.combine}, read_gain={self.read_gain}, "
                f"read_temperature={self.log_read_temperature is not None}, "
                f"memory_norm={self.memory_norm}")

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)  # [B, T, D] -> [B, H, T, d]

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention's q, k and v projections as one product (one input cast and one kernel, forward and
        backward, where three ran): x [B, T, D] -> [B, T, 3D]. The parameters stay the three projections'."""
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])       # [3D, D]
        bias = None if self.q_proj.bias is None else \
            torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])                  # [3D]
        return F.linear(x, weight, bias)

    def _fusable(self, state: LavoState | None, return_state: bool) -> bool:
        """Whether the fused operation (the ``layer`` op's kernel, ``fused.py``) covers a self-attention call: the
        memory of the local outputs read with the local window, no streaming state in or out, causal attention with
        context dissection and combine 'sum' or 'gain', or noncausal attention."""
        if state is not None or return_state or not self.global_read or self.memory_source != "local_out":
            return False
        return self.pattern == "noncausal" or (self.context_dissection and self.combine != "half")

    def _output(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The output projection of out [B, T, D] (:meth:`_output_dtype`)."""
        return self.out_proj(self._output_dtype(out, x))

    @staticmethod
    def _output_dtype(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """out in x's dtype, for the output projection; as it is under autocast, which casts it itself."""
        return out if torch.is_autocast_enabled(x.device.type) else out.to(x.dtype)

    def _decodes(self, x: torch.Tensor, padding_mask: torch.Tensor | None, state: LavoState | None) -> bool:
        """Whether a call is one causal token after a state that the decoding step covers (context dissection, no
        padding, no dropout: the step has none)."""
        return x.shape[1] == 1 and state is not None and padding_mask is None and self.context_dissection and \
            self.pattern == "causal" and not (self.dropout and self.training)

    def _project_token(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [B, H, 1, d] of one token x [B, 1, D], by the three projections (a decoding step: joining their
        weights would copy 3 D^2 numbers for one token; as [B, D] rows, each is one product and one view)."""
        B, _, D = x.shape
        rows, shape = x.view(B, D), (B, self.num_heads, 1, self.head_dim)
        return tuple(F.linear(rows, proj.weight, proj.bias).view(shape)   # as the training path, without the
                     for proj in (self.q_proj, self.k_proj, self.v_proj))  # module call's overhead

    def _gain(self) -> float | torch.Tensor:
        """The global branch's factor: the learned per-head gain [H] ('gain'), else the constant ``read_gain``."""
        return self.learned_gain if self.learned_gain is not None else self.read_gain

    def _read(self, q: torch.Tensor, mem: torch.Tensor, kernel: str | Chosen, offset: int = 0, group: int = 1
              ) -> torch.Tensor:
        """Read the orthogonal memory with this layer's bases and reading options (:func:`.ops.read`): q [B, H, T, d],
        mem [B, H, n, d] mean features, or the binding memory's [B, H, n, r, d] rows (query t reads row
        (offset + t) // group; n == 1: every query the one row) -> [B, H, T, d] in the compute dtype."""
        return ops.read(q, mem, self.bases, kernel, offset=offset, group=group, binding=self.binding,
                        log_temperature=self.log_read_temperature, memory_norm=self.memory_norm,
                        chunk=self.chunk_size, dropout=self.dropout, training=self.training)

    def _check_state(self, state: object, x: torch.Tensor) -> None:
        if isinstance(state, LavoStaticState):
            if not self.context_dissection:  # static_step reads complete windows only: it would answer wrongly
                raise ValueError("a LavoStaticState steps a layer with context dissection (the memory of the complete "
                                 "windows before the query's); this layer has context_dissection=False: continue "
                                 "with the LavoState that return_state=True gave")
            if state.keys.shape[2] != self.window_size - 1 or x.shape[1] != 1:
                raise ValueError(f"a LavoStaticState decodes one token per call with this layer's window "
                                 f"({self.window_size}); got {x.shape[1]} tokens and keys for a window of "
                                 f"{state.keys.shape[2] + 1}: make it with LavoState.static({self.window_size})")
        elif not isinstance(state, LavoState):
            raise TypeError(f"state must be the LavoState returned by this attention, got {type(state).__name__}")
        if state.keys.shape[:2] != (x.shape[0], self.num_heads) or state.keys.shape[-1] != self.head_dim:
            raise ValueError(f"state is for batch/heads/head_dim {list(state.keys.shape[:2])}/{state.keys.shape[-1]},"
                             f" input has batch {x.shape[0]} and this layer {self.num_heads} heads of {self.head_dim}")
        sums = tuple(state.sum_complete.shape[2:])
        if sums != self._item():
            held = "the binding memory's" if len(sums) == 2 else "the paper's mean memory's"
            raise ValueError(f"state holds {held} sums of {list(sums)} per head; this layer (memory='{self.memory}', "
                             f"r = {self.num_bases}) keeps {list(self._item())}: continue a sequence with the state "
                             "of a layer of the same memory and num_bases")

    def _item(self) -> tuple[int, ...]:
        """The shape of a memory row per head: (d,) for the paper's mean, (r, d) for the binding memory."""
        return (self.num_bases, self.head_dim) if self.binding else (self.head_dim,)

    # ------------------------------------------------------------------------------------------------ forward
    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: LavoState | None, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, LavoState]:
        if padding_mask is not None and self.pattern == "causal":  # causal windows start at a row's first real token
            return left_aligned(self._attend, x, padding_mask, context, context_mask, state, return_state)
        return self._attend(x, padding_mask, context, context_mask, state, return_state)

    def _attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
                context_mask: torch.Tensor | None, state: LavoState | None, return_state: bool
                ) -> torch.Tensor | tuple[torch.Tensor, LavoState]:
        B, T, D = x.shape
        if state is not None:
            self._check_state(state, x)
        if T == 0:
            y = x.new_empty(B, 0, D)
            return (y, state) if return_state else y
        new_state = None
        if isinstance(state, LavoStaticState):                                       # a step in place
            out = self._output_dtype(self._decode_static(x, state).reshape(B, D), x)
            y = F.linear(out, self.out_proj.weight, self.out_proj.bias).unsqueeze(1)
            return (y, state) if return_state else y
        if self._decodes(x, padding_mask, state):                                    # one token after a state
            q, k, v = self._project_token(x)                                         # [B, H, 1, d]
            out, new_state = self._decode_one(x, q, k, v, state, self.start_kernels(q, only=DECODING_OPS))
            out = F.linear(self._output_dtype(out.reshape(B, D), x), self.out_proj.weight, self.out_proj.bias)
            y = out.unsqueeze(1)                                                     # [B, 1, D]
            return (y, new_state) if return_state else y
        if self.pattern == "cross":
            q = self._heads(self.q_proj(x))                                          # [B, H, T, d]
            out = self._read(q, self.cross_memory(context, context_mask), self.start_kernels(q).read)
        else:
            qkv = self._qkv(x)                                                       # [B, T, 3D]
            q, k, v = split_qkv(qkv, self.num_heads)                                 # [B, H, T, d] views
            run = self.start_kernels(q)                                              # the one choice, recorded
            if self._fusable(state, return_state):
                fused = run.layer(qkv, self.bases, self.window_size, heads=self.num_heads,
                                  causal=self.pattern == "causal", bias=self.epe,
                                  log_temperature=self.log_read_temperature, gain=self._gain(), combine=self.combine,
                                  memory_norm=self.memory_norm, key_mask=padding_mask, binding=self.binding,
                                  dropout=self.dropout if self.training else 0.0)    # [B, T, D] or None
                if fused is not None:
                    y = self._output(fused, x)
                    return (y, None) if return_state else y
            out, new_state = self._self(x, q, k, v, padding_mask, state, return_state, run)
        if padding_mask is not None:
            out = out * padding_mask[:, None, :, None]
        y = self._output(out.transpose(1, 2).reshape(B, T, D), x)  # a view when out is laid out [B, T, H, d]
        return (y, new_state) if return_state else y

    # ------------------------------------------------------------------------------------------ cross attention
    def cross_memory(self, context: torch.Tensor, context_mask: torch.Tensor | None) -> torch.Tensor:
        """Cross attention's memory: mean over the valid source tokens of v (or the raw heads), [B, H, 1, d] in the
        compute dtype (the binding memory: weighted per basis by the source keys' projections on it,
        [B, H, 1, r, d]). It depends on the source only: compute it once per source and reuse it every decoding
        step."""
        ct = compute_dtype(context.dtype)
        B, S = context.shape[:2]
        src = self._heads(self.v_proj(context) if self.v_proj is not None else context)     # [B, H, S, d]
        valid = torch.ones(B, 1, S, dtype=ct, device=context.device) if context_mask is None \
            else context_mask[:, None].to(ct)                                                # [B, 1, S]
        weights = ops.key_weights(self._heads(self.k_proj(context)), self.bases) if self.binding else None
        return ops.mean_memory(src.to(ct) * valid[..., None], valid, weights)

    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> LavoCrossCache:
        """Only the source's mean memory is kept: a decoding step costs the same for any source length."""
        super().cross_cache(context, context_mask)  # validates
        return LavoCrossCache(self.cross_memory(context, context_mask))

    def cross_step(self, x: torch.Tensor, cache: LavoCrossCache) -> torch.Tensor:
        if not isinstance(cache, LavoCrossCache):
            raise TypeError(f"cache must be the LavoCrossCache that this attention's cross_cache() returned, got "
                            f"{type(cache).__name__} (another mechanism's cache)")
        if cache.memory.shape[1:] != (self.num_heads, 1, *self._item()):
            held, mine = list(cache.memory.shape[1:]), [self.num_heads, 1, *self._item()]
            raise ValueError(f"cache holds a memory of shape {held} per sequence, this layer's (memory="
                             f"'{self.memory}') is {mine}: the cache is from a layer of another configuration; "
                             "decode with the cache this layer's cross_cache() returned")
        q = self._heads(self.q_proj(x))                                                  # [B, H, t, d]
        out = self._read(q, cache.memory, self.start_kernels(q).read)                    # [B, H, t, d]
        return self.out_proj(out.transpose(1, 2).flatten(2).to(x.dtype))                 # [B, t, D]

    # --------------------------------------------------------------------------------------------- self-attention
    def _self(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              padding_mask: torch.Tensor | None, state: LavoState | None, return_state: bool, run: Choice
              ) -> tuple[torch.Tensor, LavoState | None]:
        """Causal and noncausal self-attention of q, k, v [B, H, T, d]: local window branch plus memory, on the
        call's kernels ``run``, composed op by op. Returns [B, H, T, d] and the new streaming state (when asked
        for)."""
        B, T, _ = x.shape
        w = self.window_size
        past_k, past_v = (state.keys, state.values) if state is not None else (None, None)  # [B, H, <w, d]
        prefix = None if state is None else (past_k, past_v)
        local = window_attention(q, k, v, w, causal=self.pattern == "causal", bias=self.epe,
                                 key_mask=padding_mask, prefix=prefix, dropout=self.dropout, training=self.training,
                                 kernel=run.window, chunk=self.chunk_size or CHUNK)  # [B, H, T, d]
        position = (state.position if state is not None else 0) + T
        if not self.global_read:  # the local window with the EPE bias alone; the state's sums stay zero
            if not return_state:
                return local, None
            zero = torch.zeros(B, self.num_heads, *self._item(), dtype=compute_dtype(x.dtype), device=x.device)
            return local, LavoState(last_positions(past_k, k, w), last_positions(past_v, v, w), zero, zero.clone(),
                                    position)
        initial = None if state is None else MemoryState(state.sum_complete, state.sum_partial, state.position)
        out, final = ops.memory_branch(
            q, local, self._features(x, v, local), self.bases, w, padding_mask=padding_mask,
            causal=self.pattern == "causal", context_dissection=self.context_dissection, combine=self.combine,
            gain=self._gain(), empty_memory=self.empty_memory, log_temperature=self.log_read_temperature,
            memory_norm=self.memory_norm, kernel=run.read, chunk=self.chunk_size, dropout=self.dropout,
            training=self.training, initial_state=initial, output_final_state=return_state and self.pattern == "causal",
            inplace=run.window.fresh and run.read.fresh,  # fresh outputs: combine may overwrite them
            keys=k if self.binding else None)
        if final is None:
            return out, None
        return out, LavoState(last_positions(past_k, k, w), last_positions(past_v, v, w), final.sum_complete,
                              final.sum_partial, final.position)

    def _decode_one(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: LavoState,
                    run: Choice) -> tuple[torch.Tensor, LavoState]:
        """One causal token after ``state`` (context dissection, no padding): the output and state of the chunked
        path by the decoding step's kernel (``run.step``: the fused Triton kernel, or the PyTorch step in about 25
        operations, since a decoding step's cost is all fixed overhead). x [B, 1, D], q, k, v [B, H, 1, d] ->
        ([B, H, 1, d] in the compute dtype, the new state)."""
        w = self.window_size
        if not self.global_read:  # the local window alone; the state's sums stay zero
            local = window_attention_step(q, k, v, w, prefix=(state.keys, state.values), bias=self.epe)
            return local, LavoState(last_positions(state.keys, k, w), last_positions(state.values, v, w),
                                    state.sum_complete, state.sum_partial, state.position + 1)
        feat = None if self.memory_source == "local_out" else (v if self.memory_source == "value" else self._heads(x))
        out, keys, values, memory = run.step(
            q, k, v, state.keys, state.values, MemoryState(state.sum_complete, state.sum_partial, state.position),
            self.bases, w, bias=self.epe, feat=feat, log_temperature=self.log_read_temperature,
            memory_norm=self.memory_norm, combine=self.combine, gain=self._gain(), empty_memory=self.empty_memory,
            binding=self.binding)
        return out, LavoState(keys, values, memory.sum_complete, memory.sum_partial, memory.position)

    def _decode_static(self, x: torch.Tensor, state: LavoStaticState) -> torch.Tensor:
        """One token x [B, 1, D] after a :class:`LavoStaticState`, written back into it (:func:`.ops.static_step`:
        PyTorch operations on every device; under a CUDA graph their launches cost the host nothing) -> [B, H, 1, d]
        in the compute dtype."""
        q, k, v = self._project_token(x)
        feat = None if self.memory_source == "local_out" else (v if self.memory_source == "value" else self._heads(x))
        return ops.static_step(q, k, v, state.keys, state.values, state.sum_complete, state.sum_partial,
                               state.position, self.bases, self.window_size, bias=self.epe, feat=feat,
                               global_read=self.global_read, log_temperature=self.log_read_temperature,
                               memory_norm=self.memory_norm, combine=self.combine, gain=self._gain(),
                               empty_memory=self.empty_memory, binding=self.binding)

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
