"""LAVO's memory as a stateless op: pure functions of tensors, no parameters and no module (the layer,
``layer.py``, holds those and passes them in). docs/lavo.md has the equations.

Given the queries q, the local branch's output and the features the memory averages ([B, H, T, d] each), the op
builds the memory rows the queries read, reads them through the orthogonal bases and joins the two branches:

- the memory rows (``memory.py``): :func:`dissected_memory` (causal with context dissection: window j reads the
  mean features of the complete windows before it), :func:`running_memory` (causal without: token t reads the
  running mean of features 0..t), :func:`mean_memory` (noncausal and cross attention: one mean per sequence);
- :func:`read`: the rms-normalised memory, then the read kernel (:data:`READ`: :func:`recompute_read`,
  :func:`autograd_read` over ``read.py``, :func:`triton_read` over ``triton.py``; each applies the temperature on q);
  the binding memory (``binding=True``: rows of [r, d], docs/lavo.md "The binding memory") is read by the two
  PyTorch kernels over ``binding.py``, and the Triton kernels declare that they do not cover it
  (:func:`paper_memory`, the one place that says so), so the dispatch gives such a call the PyTorch fallback;
- :func:`combine_branches`: local + global as ``combine`` says;
- :func:`memory_branch`: all of the above for a chunk of self-attention, with the streaming state in and out
  (:class:`MemoryState`, flash-linear-attention's initial_state / output_final_state convention);
  :func:`memory_step`: the same for one causal token (a decoding step), in a handful of small operations;
- the kernels of each op, declared for the dispatch (:data:`LAVO_KERNELS`): the window's, the read's, the decoding
  step's fused kernel and the whole self-attention call's (:func:`triton_layer`, ``fused.py``).

``naive.py`` holds the per-position forms of :func:`memory_branch` and :func:`read` that the tests compare with.
Sums, counts and the read run in the compute dtype (fp32, fp64 for fp64 inputs), whatever the dtype of the features
and the local branch (the Triton kernels return half outputs for half inputs): a sum reads half features and
accumulates in fp32 without a cast copy.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.lavo.binding import read_binding, read_binding_autograd
from lavo_zoo.attention.lavo.memory import (  # noqa: F401 (window_sums: the op's names, as the tests use them)
    MemoryState,
    dissected_memory,
    mean_memory,
    running_memory,
    window_sums,
)
from lavo_zoo.attention.lavo.read import RMS_EPS, read_memory, read_memory_autograd
from lavo_zoo.attention.ops.dispatch import Chosen, Kernel, KernelSet, Op, triton_auto, triton_runs
from lavo_zoo.attention.ops.dropout import new_seed
from lavo_zoo.attention.ops.window import WINDOW

COMBINES = ("half", "sum", "gain")
EMPTY_MEMORY = ("local", "half")
MEMORY_NORMS = ("mean", "rms")
MEMORIES = ("mean", "binding")  # the paper's memory (a mean of features) / the binding memory (an [r, d] matrix)


def paper_memory(*args: Any, binding: bool = False, **kwargs: Any) -> bool:
    """The Triton kernels' declared limit (their ``applies``: the read's, the decoding step's and the fused
    layer's): they read the paper's memory only, so a call on the binding memory (``binding=True``) takes the op's
    PyTorch fallback (the fused layer has none: the layer composes the call), and ``kernels_used`` reports what
    ran."""
    return not binding


def key_weights(keys: torch.Tensor, bases: torch.Tensor) -> torch.Tensor:
    """The binding memory's weights: each key's projections on the bases, c_t = B k_t. keys [B, H, T, d], bases
    [H, r, d] -> [B, H, T, r] in the compute dtype."""
    ct = compute_dtype(keys.dtype)
    return keys.to(ct) @ bases.to(ct).mT


# -------------------------------------------------------------------------------------------- the read kernels
# Each: q [B, H, T, d] reads mem [B, H, n, d] (query t: row (offset + t) // group; n == 1: the one row) through
# bases [H, r, d], q scaled by exp(log_temperature) per head; with ``local``, local + gain * read. ``dropout`` p is
# already 0 outside training; ``chunk`` and ``inplace`` are the recompute kernel's (the others ignore them).
# ``binding``: mem holds the binding memory's rows [B, H, n, r, d] (the PyTorch kernels only).
def recompute_read(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1, *,
                   binding: bool = False, log_temperature: torch.Tensor | None = None, dropout: float = 0.0,
                   chunk: int | None = None, local: torch.Tensor | None = None, gain: float | torch.Tensor = 1.0,
                   inplace: bool = False) -> torch.Tensor:
    """The read that recomputes in backward (:func:`.read.read_memory`; the binding memory's
    :func:`.binding.read_binding`): [B, H, T, d] in the compute dtype, a fresh tensor; ``inplace``: local may be
    overwritten (a fresh output of the recompute window).

    Its arguments are stated on `read` (``dropout`` already 0 outside training).
    """
    seed = new_seed() if dropout else 0
    read_rows = read_binding if binding else read_memory
    glob = read_rows(_tempered(q, log_temperature), mem, bases, offset, group, chunk, dropout, seed)
    return glob if local is None else combine_branches(local, glob, None, combine="sum", gain=gain, inplace=inplace)


def autograd_read(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1, *,
                  binding: bool = False, log_temperature: torch.Tensor | None = None, dropout: float = 0.0,
                  chunk: int | None = None, local: torch.Tensor | None = None, gain: float | torch.Tensor = 1.0,
                  inplace: bool = False) -> torch.Tensor:
    """The read left to autograd (:func:`.read.read_memory_autograd`; the binding memory's
    :func:`.binding.read_binding_autograd`; both keep the [T, r] probabilities).

    Its arguments are stated on `read` (``dropout`` already 0 outside training; ``chunk`` and ``inplace`` unused).
    """
    read_rows = read_binding_autograd if binding else read_memory_autograd
    glob = read_rows(_tempered(q, log_temperature), mem, bases, offset, group, dropout, dropout > 0)
    return glob if local is None else combine_branches(local, glob, None, combine="sum", gain=gain)


def triton_read(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1, *,
                binding: bool = False, log_temperature: torch.Tensor | None = None, dropout: float = 0.0,
                chunk: int | None = None, local: torch.Tensor | None = None, gain: float | torch.Tensor = 1.0,
                inplace: bool = False) -> torch.Tensor:
    """The Triton read (:func:`.triton.read_memory_triton`; temperature and the joining inside the kernel): [B, H, T,
    d] in q's dtype. Raises :class:`~lavo_zoo.attention.ops.KernelUnavailable` where it cannot be compiled.

    Its arguments are stated on `read` (``dropout`` already 0 outside training; ``binding`` False: the Triton read
    has the paper's memory only; ``chunk`` and ``inplace`` unused).
    """
    from lavo_zoo.attention.lavo import triton as lavo_triton

    return lavo_triton.read_memory_triton(q, mem, bases, offset, group, dropout=dropout,
                                          seed=new_seed() if dropout else 0, log_temperature=log_temperature,
                                          local=local, gain=gain)


def _tempered(q: torch.Tensor, log_temperature: torch.Tensor | None) -> torch.Tensor:
    """q scaled by the per-head read temperature exp(t_h) (log_temperature [H]), or q itself."""
    return q if log_temperature is None else q * log_temperature.exp().to(q.dtype)[:, None, None]


def triton_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                memory: MemoryState, bases: torch.Tensor, window: int, **reading: Any
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, MemoryState]:
    """One causal token after a state, in one Triton kernel (:func:`.triton.decode_step_triton`, whose arguments
    ``reading`` holds): the output [B, H, 1, d], the new last keys and values, the new :class:`MemoryState`.

    Its arguments are stated on `torch_step`.
    """
    from lavo_zoo.attention.lavo import triton as lavo_triton

    reading.pop("binding", None)  # the paper's memory only: paper_memory, its declared limit, sent the binding one
    #                               to the PyTorch step
    out, keys, values, complete, partial = lavo_triton.decode_step_triton(
        q, k, v, keys, values, memory.sum_complete, memory.sum_partial, memory.position, bases, window, **reading)
    return out, keys, values, MemoryState(complete, partial, memory.position + 1)


def triton_layer(qkv: torch.Tensor, bases: torch.Tensor, window: int, **options: Any) -> torch.Tensor:
    """A whole self-attention call from the fused q, k, v projection [B, T, 3D] to the joined output [B, T, D] on the
    Triton kernels (:func:`.fused.fused_self_attention`, whose arguments ``options`` holds). Raises
    :class:`~lavo_zoo.attention.ops.KernelUnavailable` where a forward kernel cannot be compiled.

    Its arguments are stated on `lavo_zoo.attention.lavo.fused.fused_self_attention`.
    """
    from lavo_zoo.attention.lavo import fused

    options.pop("binding", None)  # the paper's memory only: paper_memory, its declared limit, left the binding one
    #                               to the composed call
    return fused.fused_self_attention(qkv, bases, window, **options)


def _step_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                  memory: MemoryState, *args: Any, **kwargs: Any) -> bool:
    """The fused step covers a token after the first (a memory to read) with no autograd graph to record, on the
    paper's memory (:func:`paper_memory`)."""
    return memory.position > 0 and not torch.is_grad_enabled() and paper_memory(**kwargs)


RECOMPUTE_READ = Kernel("recompute", recompute_read, fresh=True)
AUTOGRAD_READ = Kernel("autograd", autograd_read)
TRITON_READ = Kernel("triton", triton_read, runs=triton_runs, auto=triton_auto, compiled=True, applies=paper_memory)
READ = Op("memory read", (RECOMPUTE_READ, AUTOGRAD_READ, TRITON_READ), fallback=RECOMPUTE_READ)


def read(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, kernel: str | Chosen = "recompute", *,
         offset: int = 0, group: int = 1, binding: bool = False, log_temperature: torch.Tensor | None = None,
         memory_norm: str = "mean", chunk: int | None = None, dropout: float = 0.0, training: bool = False,
         local: torch.Tensor | None = None, gain: float | torch.Tensor = 1.0, inplace: bool = False) -> torch.Tensor:
    """Read the orthogonal memory (docs/lavo.md, "Reading the orthogonal memory"; the binding memory: "The binding
    memory").

    Args:
        q: [B, H, T, d] queries.
        mem: [B, H, n, d] mean features (the binding memory: [B, H, n, r, d] rows); query t reads row
            (offset + t) // group (n == 1: every query the one row).
        bases: [H, r, d] orthonormal rows per head.
        offset: the position of query 0 within its memory group (context dissection: the position in the window).
        group: queries per memory row (context dissection: the window w; 1: one row per query).
        binding: False: the paper's memory (slot i is h_i b_i, h = B m); True: the binding memory (slot i is keyed
            by b_i and holds row i of the [r, d] matrix).
        kernel: a kernel of :data:`READ` by name ('recompute', 'autograd', 'triton'), or the one a layer chose
            (its :class:`~lavo_zoo.attention.ops.dispatch.Choice`'s ``read``); the dispatch falls back where it
            cannot run.
        log_temperature: [H], the log of a per-head factor on q before the read (the slot logits are the only place
            q enters it), or None. The Triton kernels apply it inside.
        memory_norm: 'mean' reads mem as it is, 'rms' reads m / rms(m) per row (zero rows stay zero; the binding
            memory: per basis, each [d] row of its matrices).
        chunk: queries per recomputed chunk of the 'recompute' kernel (None: :func:`.read.read_chunk`).
        dropout: attention dropout p on the slot probabilities, in training (every kernel; the recompute and Triton
            kernels regenerate the call's mask in backward). The kernels themselves take p already 0 outside
            training.
        training: whether the call is in training (False: no dropout).
        local: [B, H, T, d] or None: with it, return local + gain * read (``combine`` 'sum', or 'gain' with a
            per-head [H] gain): the Triton kernels join the branches inside, the others by
            :func:`combine_branches`.
        gain: the read's factor with ``local``: a number, or the learned per-head [H] gain.
        inplace: with ``local``, the recompute kernel may overwrite local (a fresh output of the recompute window).

    Returns:
        [B, H, T, d]: in the compute dtype, or in q's dtype from the Triton kernels.
    """
    run = READ.bind(kernel)
    if memory_norm == "rms":
        mem = mem * torch.rsqrt(mem.square().mean(-1, keepdim=True) + RMS_EPS)   # [B, H, n, (r,) d]; 0 stays 0
    return run(q, mem, bases, offset, group, binding=binding, log_temperature=log_temperature,
               dropout=dropout if training else 0.0, chunk=chunk, local=local, gain=gain, inplace=inplace)


def combine_branches(local: torch.Tensor, glob: torch.Tensor, empty: torch.Tensor | None, *, combine: str = "half",
                     gain: float | torch.Tensor = 1.0, empty_memory: str = "local", inplace: bool = False
                     ) -> torch.Tensor:
    """Join the local branch and the memory read, local and glob [B, H, T, d] -> [B, H, T, d].

    Args:
        local: [B, H, T, d] the local branch's output.
        glob: [B, H, T, d] the memory read's output (exactly zero where the memory is empty).
        empty: [B, 1, T, 1] bool, where the memory has no real token, or None (nowhere).
        combine: 'half': 0.5 * (local + glob) where the memory is non-empty; local (``empty_memory`` 'local') or
            0.5 * local ('half') where it is empty. 'sum' / 'gain': local + gain * glob (glob is exactly zero where
            the memory is empty, so there the output is local).
        gain: 'sum': a constant factor; 'gain': the learned per-head gain [H].
        empty_memory: 'local' or 'half', what combine 'half' gives where the memory is empty (above).
        inplace: overwrite local and glob (fresh outputs of the recompute kernels, saved by nobody) instead of
            allocating more [B, H, T, d] tensors.

    Returns:
        [B, H, T, d]; glob's gradient is zero at empty positions.
    """
    if combine != "half":  # no mask needed: an empty memory is a zero row, which reads exactly zero
        if isinstance(gain, torch.Tensor):
            glob = glob * gain.to(glob.dtype)[:, None, None]                    # [H, 1, 1]; glob kept for grad
        elif gain != 1.0:
            glob = glob.mul_(gain) if inplace else glob * gain
        return local.add_(glob) if inplace else local + glob
    if empty is None:
        return local.add_(glob).mul_(0.5) if inplace else 0.5 * (local + glob)
    keep = (~empty).to(local.dtype)                                              # [B, 1, T, 1]
    coef = 0.5 + 0.5 * (1 - keep) if empty_memory == "local" else torch.full_like(keep, 0.5)
    if inplace:
        return local.mul_(coef).add_(glob.mul_(0.5 * keep))
    return glob * (0.5 * keep) + local * coef


def memory_branch(q: torch.Tensor, local: torch.Tensor, feats: torch.Tensor, bases: torch.Tensor, window: int, *,
                  padding_mask: torch.Tensor | None = None, causal: bool = True, context_dissection: bool = True,
                  combine: str = "sum", gain: float | torch.Tensor = 1.0, empty_memory: str = "local",
                  log_temperature: torch.Tensor | None = None, memory_norm: str = "mean",
                  kernel: str | Chosen = "recompute",
                  chunk: int | None = None, dropout: float = 0.0, training: bool = False,
                  initial_state: MemoryState | None = None, output_final_state: bool = False,
                  inplace: bool = False, keys: torch.Tensor | None = None) -> tuple[torch.Tensor, MemoryState | None]:
    """LAVO's self-attention output from its local branch: the memory rows, their read, the two branches joined.

    Args:
        q: [B, H, T, d] queries.
        local: [B, H, T, d] the local branch's output (compute dtype).
        feats: [B, H, T, d] the features the memory averages (compute dtype; the layer's ``memory_source``).
        bases: [H, r, d].
        window: w, the window length of context dissection.
        padding_mask: [B, T] bool, True for real tokens, or None.
        causal: causal (the memory of the tokens before: :func:`dissected_memory` or :func:`running_memory`) or
            noncausal (one memory of every real token: :func:`mean_memory`).
        context_dissection: causal only; see above.
        combine: how the branches join, as :func:`combine_branches`.
        gain: the read's factor, as :func:`combine_branches`.
        empty_memory: where the memory is empty, as :func:`combine_branches`.
        log_temperature: the per-head read temperature, as :func:`read`.
        memory_norm: 'mean' or 'rms', as :func:`read`.
        kernel: the read kernel, as :func:`read`.
        chunk: queries per recomputed chunk, as :func:`read`.
        dropout: attention dropout p on the slot probabilities, as :func:`read`.
        training: whether the call is in training, as :func:`read`.
        initial_state: causal streaming: the state after the previous chunk, or None.
        output_final_state: causal: return the state after this chunk (fresh tensors), else None.
        inplace: :func:`combine_branches` (only where local and the read's output are fresh outputs: the ``fresh``
            kernels of the window and the read).
        keys: the binding memory: [B, H, T, d] the keys whose projections on the bases weight the features
            (:func:`key_weights`); the rows are then [r, d] matrices and the state's sums [B, H, r, d]. None: the
            paper's memory.

    Returns:
        [B, H, T, d] in the compute dtype, and the :class:`MemoryState` after the chunk (or None).
    """
    B, _, T, _ = feats.shape
    weights = None if keys is None else key_weights(keys, bases)                 # [B, H, T, r]
    ct = compute_dtype(feats.dtype)
    valid = torch.ones(B, 1, T, dtype=ct, device=feats.device) if padding_mask is None \
        else padding_mask[:, None].to(ct)                                        # [B, 1, T]
    if padding_mask is not None:
        feats = feats * padding_mask[:, None, :, None].to(feats.dtype)          # zero at padded positions
    reading = {"log_temperature": log_temperature, "memory_norm": memory_norm, "chunk": chunk, "dropout": dropout,
               "training": training, "binding": keys is not None}
    joined = combine != "half"  # the read joins local + gain x read itself (an empty memory reads exactly 0)
    if joined:
        reading.update(local=local, gain=gain, inplace=inplace)
    joining = {"combine": combine, "gain": gain, "empty_memory": empty_memory, "inplace": inplace}
    if not causal:
        mem = mean_memory(feats, valid, weights)                                 # [B, H, 1, (r,) d]
        del feats
        glob = read(q, mem, bases, kernel, **reading)
        return (glob if joined else combine_branches(local, glob, None, **joining)), None
    if context_dissection:
        mem, empty, sums = dissected_memory(feats, valid, window, initial_state, weights)
        position = initial_state.position if initial_state is not None else 0
        glob = read(q, mem, bases, kernel, offset=position % window, group=window, **reading)  # [B, H, T, d]
    else:
        mem, sums = running_memory(feats, valid, initial_state, weights)
        empty = None
        glob = read(q, mem, bases, kernel, **reading)
    del mem
    out = glob if joined else combine_branches(local, glob, empty, **joining)
    if not output_final_state:
        return out, None
    position = (initial_state.position if initial_state is not None else 0) + T
    return out, MemoryState(sums[0].clone(), sums[1].clone(), position)  # views would keep per-chunk tensors alive


def memory_step(q: torch.Tensor, local: torch.Tensor, feat: torch.Tensor, bases: torch.Tensor, window: int,
                state: MemoryState, *, combine: str = "sum", gain: float | torch.Tensor = 1.0,
                empty_memory: str = "local", log_temperature: torch.Tensor | None = None, memory_norm: str = "mean",
                key: torch.Tensor | None = None) -> tuple[torch.Tensor, MemoryState]:
    """One causal token after ``state`` with context dissection, no padding (a decoding step): what
    :func:`memory_branch` gives for a one-token chunk, in about 15 small operations (a step's cost is its count of
    operations: a read kernel's chunk loop would cost more than the arithmetic).

    The read is softmax attention of q over the r rows K_i = h_i b_i (the score scale h_i (b_i . q) is scale q . K_i,
    the output sum_i p_i h_i b_i is sum_i p_i K_i), so one ``scaled_dot_product_attention`` call does it; the rms of
    the mean S / count is ``rms_norm`` of the sum S with eps count^2, which is the same. The binding memory's read is
    softmax attention of q over the keys b_i and the values M_i, the rows of its [r, d] matrix: one call too.

    Args:
        q: [B, H, 1, d] the token's query (compute dtype).
        local: [B, H, 1, d] the token's local output (compute dtype).
        feat: [B, H, 1, d] the token's memory feature (compute dtype).
        bases: [H, r, d], as :func:`memory_branch`.
        window: w, as :func:`memory_branch`.
        state: the memory's state before the token.
        combine: as :func:`memory_branch`.
        gain: as :func:`memory_branch`.
        empty_memory: as :func:`memory_branch`.
        log_temperature: as :func:`memory_branch`.
        memory_norm: as :func:`memory_branch`.
        key: the binding memory: [B, H, 1, d] the token's key (compute dtype); None: the paper's memory.

    Returns:
        [B, H, 1, d] in the compute dtype, and the state after the token.
    """
    w, pos = window, state.position
    count = max(pos - pos % w, 1)                                                # tokens of complete windows
    total = state.sum_complete                                                   # [B, H, d] or [B, H, r, d]
    if memory_norm == "rms":                                                     # rms(S / c) = rms_norm(S, eps c^2)
        m = F.rms_norm(total, total.shape[-1:], eps=RMS_EPS * count * count)
    else:
        m = total / count
    if log_temperature is not None:
        q = q * _as(log_temperature.exp(), q.dtype).view(-1, 1, 1)
    if key is None:
        h = (bases * m.unsqueeze(-2)).sum(-1)                                    # [B, H, r]  h = B m
        rows = h.unsqueeze(-1) * bases                                           # [B, H, r, d]  K_i = h_i b_i
        glob = F.scaled_dot_product_attention(q, rows, rows)                     # [B, H, 1, d]; 0 while empty
    else:                                                                        # keys b_i, values M_i; 0 while empty
        glob = F.scaled_dot_product_attention(q, bases.expand(q.shape[0], -1, -1, -1), m)
    if combine == "half":
        out = (local + glob) * 0.5 if pos >= w else local * (0.5 if empty_memory == "half" else 1.0)
    elif isinstance(gain, torch.Tensor):
        out = local + glob * gain.to(glob.dtype)[:, None, None]
    else:
        out = torch.add(local, glob, alpha=gain)
    item = feat[:, :, 0] if key is None else (key @ bases.mT).mT @ feat          # [B, H, d] or c f^T [B, H, r, d]
    partial = state.sum_partial + item
    complete = state.sum_complete
    if (pos + 1) % w == 0:                                                       # the window is complete
        complete, partial = complete + partial, torch.zeros_like(partial)
    return out, MemoryState(complete, partial, pos + 1)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in ``dtype`` (``Tensor.to`` costs a decoding step about a microsecond even where there is nothing to do)."""
    return t if t.dtype == dtype else t.to(dtype)


def torch_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               memory: MemoryState, bases: torch.Tensor, window: int, *, bias: torch.Tensor | None = None,
               feat: torch.Tensor | None = None, **reading: Any
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, MemoryState]:
    """One causal token after a state in about 25 PyTorch operations: the decoding step's kernel wherever the Triton
    one does not run (differentiable).

    Args:
        q: [B, H, 1, d] the step's query.
        k: [B, H, 1, d] the step's key.
        v: [B, H, 1, d] the step's value.
        keys: [B, H, L, d], L = min(w - 1, position): the last keys before the step.
        values: [B, H, L, d]: the last values before the step.
        memory: the memory's state before the step.
        bases: [H, r, d].
        window: w.
        bias: the EPE [H, 2w - 1] or None.
        feat: [B, H, 1, d] the step's memory feature, or None for the local output (``memory_source='local_out'``).
        **reading: log_temperature, memory_norm, combine, gain, empty_memory (:func:`memory_step`); binding: True
            for the binding memory (k's projections on the bases weight the feature).

    Returns:
        The output [B, H, 1, d] in the compute dtype, the new last keys and values [B, H, min(w - 1, L + 1), d], the
        new :class:`MemoryState`.
    """
    if torch.is_autocast_enabled(q.device.type):  # the softmaxes in the compute dtype: no autocast to half inside
        with torch.autocast(q.device.type, enabled=False):
            return torch_step(q, k, v, keys, values, memory, bases, window, bias=bias, feat=feat, **reading)
    ct = compute_dtype(q.dtype)
    H, L = keys.shape[1], keys.shape[2]
    keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)            # [B, H, L + 1, d]
    mask = None
    if bias is not None:  # key s scores + bias[s - t + w - 1]: a [1, H, 1, L + 1] view of the EPE, in one operation
        # (detached where no grad is recorded: a view of a parameter requires grad even under no_grad, and sdpa
        # takes its fused kernel only for a mask that does not)
        bias = _as(bias if torch.is_grad_enabled() else bias.detach(), ct)
        mask = bias.as_strided((1, H, 1, L + 1), (0, bias.stride(0), 0, bias.stride(1)),
                               bias.storage_offset() + (window - 1 - L) * bias.stride(1))
    q = _as(q, ct)
    local = F.scaled_dot_product_attention(q, _as(keys, ct), _as(values, ct), attn_mask=mask)  # [B, H, 1, d]
    key = _as(k, ct) if reading.pop("binding", False) else None
    out, memory = memory_step(q, local, local if feat is None else _as(feat, ct), _as(bases, ct), window, memory,
                              key=key, **reading)
    if L + 1 == window:                                                          # keep the last w - 1
        keys, values = keys[:, :, 1:], values[:, :, 1:]
    return out, keys, values, memory


def static_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                sum_complete: torch.Tensor, sum_partial: torch.Tensor, position: torch.Tensor, bases: torch.Tensor,
                window: int, *, bias: torch.Tensor | None = None, feat: torch.Tensor | None = None,
                global_read: bool = True, log_temperature: torch.Tensor | None = None, memory_norm: str = "mean",
                combine: str = "sum", gain: float | torch.Tensor = 1.0, empty_memory: str = "local",
                binding: bool = False) -> torch.Tensor:
    """One causal token after a state of fixed shapes, written back into that state (a CUDA graph can capture it:
    static shapes, the position read from a tensor, no value read to the host, no branch on one).

    Args:
        q: [B, H, 1, d] the step's query.
        k: [B, H, 1, d] the step's key.
        v: [B, H, 1, d] the step's value.
        keys: [B, H, w - 1, d] the last w - 1 keys, oldest first (a slot before the sequence's first token is not
            read); updated in place.
        values: [B, H, w - 1, d] the last w - 1 values, as ``keys``; updated in place.
        sum_complete: [B, H, d] the sum over the complete windows (compute dtype; the binding memory's
            [B, H, r, d]); updated in place.
        sum_partial: [B, H, d] the sum over the current window so far (as ``sum_complete``); updated in place.
        position: [B] int64, tokens before the step; incremented in place.
        bases: [H, r, d], as :func:`torch_step`.
        window: w, as :func:`torch_step`.
        bias: the EPE [H, 2w - 1] or None, as :func:`torch_step`.
        feat: as :func:`torch_step`.
        global_read: False: the local branch only, and the sums are left as they are.
        log_temperature: as :func:`memory_step`.
        memory_norm: as :func:`memory_step`.
        combine: as :func:`memory_step`.
        gain: as :func:`memory_step`.
        empty_memory: as :func:`memory_step`.
        binding: the binding memory (k's projections on the bases weight the feature), else the paper's.

    Returns:
        The output [B, H, 1, d] in the compute dtype: :func:`torch_step`'s, to rounding.
    """
    if torch.is_autocast_enabled(q.device.type):  # the softmaxes in the compute dtype: no autocast to half inside
        with torch.autocast(q.device.type, enabled=False):
            return static_step(q, k, v, keys, values, sum_complete, sum_partial, position, bases, window, bias=bias,
                               feat=feat, global_read=global_read, log_temperature=log_temperature,
                               memory_norm=memory_norm, combine=combine, gain=gain, empty_memory=empty_memory,
                               binding=binding)
    ct, w, B, H = compute_dtype(q.dtype), window, q.shape[0], q.shape[1]
    all_keys, all_values = torch.cat([keys, k.to(keys.dtype)], 2), torch.cat([values, v.to(values.dtype)], 2)
    real = torch.arange(w, device=q.device) >= (w - 1 - position).view(B, 1, 1, 1)  # [B, 1, 1, w] slot j: p - w + 1 + j
    scores = q.new_zeros((), dtype=ct) if bias is None else bias[:, :w].to(ct).view(1, H, 1, w)
    mask = torch.where(real, scores, float("-inf"))                                  # [B, H, 1, w]
    q = q.to(ct)
    out = F.scaled_dot_product_attention(q, all_keys.to(ct), all_values.to(ct), attn_mask=mask)  # the local branch
    if global_read:
        count = (position - position % w).to(ct).view(B, 1, 1)                      # tokens of complete windows
        item_dims = sum_complete.dim() - 2                                           # [d]: 1; binding [r, d]: 2
        m = sum_complete / count.clamp(min=1).view(B, *[1] * (item_dims + 1))       # [B, H, (r,) d]
        if memory_norm == "rms":
            m = m * torch.rsqrt(m.square().mean(-1, keepdim=True) + RMS_EPS)
        b = bases.to(ct)
        if log_temperature is not None:
            q = q * log_temperature.exp().to(ct).view(-1, 1, 1)
        if binding:                                                                  # keys b_i, values M_i
            glob = F.scaled_dot_product_attention(q, b.expand(B, -1, -1, -1), m)    # 0 while the memory is empty
        else:
            rows = (b * m.unsqueeze(-2)).sum(-1).unsqueeze(-1) * b                   # [B, H, r, d] h_i b_i, h = B m
            glob = F.scaled_dot_product_attention(q, rows, rows)                     # 0 while the memory is empty
        local = out
        if combine == "half":
            empty = local * (0.5 if empty_memory == "half" else 1.0)
            out = torch.where(count.view(B, 1, 1, 1) > 0, (local + glob) * 0.5, empty)
        elif isinstance(gain, torch.Tensor):
            out = local + glob * gain.to(ct).view(-1, 1, 1)
        else:
            out = torch.add(local, glob, alpha=gain)
        f = (local if feat is None else feat.to(ct))                                 # [B, H, 1, d]
        partial = sum_partial + (f[:, :, 0] if not binding else (k.to(ct) @ b.mT).mT @ f)  # + f, or + c f^T
        completes = ((position + 1) % w == 0).view(B, *[1] * (item_dims + 1))       # the step ends a window
        sum_complete.add_(torch.where(completes, partial, 0.0))
        sum_partial.copy_(torch.where(completes, 0.0, partial))
    keys.copy_(all_keys[:, :, 1:])
    values.copy_(all_values[:, :, 1:])
    position.add_(1)
    return out


# one causal token after a state: the Triton kernel (inference), else the PyTorch step (either PyTorch request)
TORCH_STEP = Kernel("recompute", torch_step, dropout=False)
STEP = Op("decoding step", (Kernel("triton", triton_step, runs=triton_runs, auto=triton_auto, dropout=False,
                                   compiled=True, applies=_step_applies), TORCH_STEP,
                            Kernel("autograd", torch_step, dropout=False)), fallback=TORCH_STEP, shortcut=True)
# a shortcut: the whole self-attention call in one operation where it covers the call (the layer's ``_fusable``);
# elsewhere the layer composes it from the window's and the read's kernels
LAYER = Op("fused layer", (Kernel("triton", triton_layer, runs=triton_runs, auto=triton_auto, compiled=True,
                                   applies=paper_memory),), fallback=None, shortcut=True)
LAVO_KERNELS = KernelSet("lavo", window=WINDOW, read=READ, step=STEP, layer=LAYER)
