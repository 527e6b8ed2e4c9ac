"""LAVO's self-attention on its Triton kernels as one operation: from the fused q, k, v projection [B, T, 3D] to
the joined output [B, T, D] that the output projection takes, forward and backward (the layer's ``triton`` kernel of
its ``layer`` op, ``ops.py``; docs/lavo.md, "Kernels").

Forward, three kernels: the window (``ops/window/triton.py``: the local branch and its log-sum-exp), the memory rows
(``triton_memory.py``: context dissection's cumulative sums, or the noncausal mean) and the read (``triton.py``: the
rms normalisation of the rows, the temperature, the read and ls local + g read, zero at padded queries), written in
the [B, T, D] layout the output projection reads. Backward, six: the read's (dq, the per-query dh, the parameters'
partial sums), the memory rows' (dh summed per row, through the bases, the rms and the counts, suffix-summed over
the windows), and the window's delta, dq (added to the read's), dk and dv, and EPE kernels, which build the local
branch's gradient (ls G + the memory's gradient of its feature) as they load it. q, k and v are strided views of
the projection and dq, dk and dv are written into one [B, T, 3D] gradient, so no head split, merge, cast or
cumulative sum runs in torch: about 20 torch operations in all (allocations, views, the parameters' sums), where the
composed path ran about 120.

It covers causal self-attention with context dissection and noncausal self-attention, each with the memory of the
local outputs, no streaming state in or out, combine 'sum' or 'gain' ('half' noncausal), padding (left-aligned,
as the layer gives it), the EPE, the read temperature, either memory norm and attention dropout. The layer composes
the kernels one by one for the rest (``LavoAttention._fusable``).

:class:`FusedLavoFunction` is the eager form; under torch.compile the same computation is the custom operator
``lavo_zoo::triton_lavo`` with its backward ``lavo_zoo::triton_lavo_backward`` and fake forms (no graph break).
A backward kernel that cannot be compiled on the device leaves the gradients to autograd over the PyTorch form of
the same computation (:func:`_pytorch_grads`, the kernels' dropout masks included).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from lavo_zoo.attention.common import heads_major_empty, split_qkv
from lavo_zoo.attention.lavo.memory import dissected_memory, mean_memory
from lavo_zoo.attention.lavo.read import RMS_EPS
from lavo_zoo.attention.lavo.triton import head_sums, read_backward, read_forward
from lavo_zoo.attention.lavo.triton_memory import memory_rows, memory_rows_backward
from lavo_zoo.attention.ops.dropout import new_seed
from lavo_zoo.attention.ops.triton_utils import KernelUnavailable, dropout_mask, rowmajor
from lavo_zoo.attention.ops.window.triton import int8_mask, window_backward, window_forward

Tensor = torch.Tensor


class FusedOptions(NamedTuple):
    """The fused operation's settings (the custom operator takes them one by one)."""

    heads: int
    window: int
    causal: bool
    rms: bool
    shared_gain: float  # g where no per-head gain is given
    local_scale: float  # ls: 1, or 0.5 for combine 'half'
    dropout: float
    seed_window: int
    seed_read: int
    block_m: int  # queries per program of every kernel, 0: autotuned (tests fix 16)


def _heads_strides(t: Tensor, heads: int) -> tuple[int, int, int]:
    """The (batch, head, time) strides of t [B, T, D] (unit column stride) seen as [B, H, T, D / H]."""
    return t.stride(0), t.shape[-1] // heads, t.stride(1)


def _forward(qkv: Tensor, bases: Tensor, bias: Tensor | None, log_temperature: Tensor | None, gain: Tensor | None,
             key_mask: Tensor | None, o: FusedOptions) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out [B, T, D] in qkv's dtype, and for backward: the local branch [B, H, T, d], its log-sum-exp [B H, T] and
    the memory rows [B, H, n, d] fp32)."""
    B, T, _ = qkv.shape
    q, k, v = split_qkv(qkv, o.heads)
    mask = int8_mask(key_mask)
    block = o.block_m or None
    local, lse = window_forward(q, k, v, bias, mask, o.window, o.causal, dropout=o.dropout, seed=o.seed_window,
                                block_m=block, block_n=block)
    mem = memory_rows(local, mask, o.window, o.causal)
    out = qkv.new_empty(B, T, qkv.shape[-1] // 3)
    read_forward(q, mem, bases, out, out_strides=_heads_strides(out, o.heads), log_temperature=log_temperature,
                 local=local, gain=gain, shared_gain=o.shared_gain, local_scale=o.local_scale,
                 group=o.window if o.causal else 1, block_m=block, dropout=o.dropout, seed=o.seed_read, rms=o.rms,
                 pad=mask)
    return out, local, lse, mem


def _backward(grad: Tensor, qkv: Tensor, bases: Tensor, bias: Tensor | None, log_temperature: Tensor | None,
              gain: Tensor | None, key_mask: Tensor | None, local: Tensor, lse: Tensor, mem: Tensor, o: FusedOptions,
              bias_grad: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """(dqkv [B, T, 3D], dbases [H, r, d] fp32, dbias [H, 2w - 1] fp32 or None, the temperature's and the gain's
    [H] fp32 or None) from grad [B, T, D], the output's gradient."""
    B = qkv.shape[0]
    H, r, d = bases.shape
    q, k, v = split_qkv(qkv, o.heads)
    g = rowmajor(grad.to(qkv.dtype)).unflatten(-1, (H, d)).transpose(1, 2)          # [B, H, T, d]
    dqkv = qkv.new_empty(qkv.shape)
    dq, dk, dv = split_qkv(dqkv, o.heads)
    mask = int8_mask(key_mask)
    block = o.block_m or None
    try:
        dh, part, part_head = read_backward(q, mem, bases, g, dq, log_temperature=log_temperature, gain=gain,
                                            shared_gain=o.shared_gain, has_local=True,
                                            group=o.window if o.causal else 1, block_m=block, dropout=o.dropout,
                                            seed=o.seed_read, rms=o.rms, pad=mask)
        dwin = memory_rows_backward(dh, bases, mem, mask, o.window, o.causal, o.rms)
        dbias = window_backward(q, k, v, bias, mask, local, lse, g, o.window, o.causal, dropout=o.dropout,
                                seed=o.seed_window, block_m=block, block_n=block, bias_grad=bias_grad, dq=dq, dk=dk,
                                dv=dv, memory_grad=(dwin, mem.shape[2], o.local_scale), accumulate_dq=True)[3]
    except KernelUnavailable:  # a backward kernel cannot be compiled here (warned once): autograd's gradients
        return _pytorch_grads(grad, qkv, bases, bias, log_temperature, gain, key_mask, o, bias_grad)
    dbases, per_head = head_sums(part, part_head, B, H, r, d)
    return (dqkv, dbases, dbias, per_head[0] if log_temperature is not None else None,
            per_head[1] if gain is not None else None)


def pytorch_form(qkv: Tensor, bases: Tensor, bias: Tensor | None, log_temperature: Tensor | None,
                 gain: Tensor | None, key_mask: Tensor | None, o: FusedOptions) -> Tensor:
    """The fused operation's output [B, T, D] computed by torch operations in the compute dtype, differentiable by
    autograd, under the kernels' dropout masks of the two seeds (:func:`dropout_mask`): the backward's fallback and
    the tests' reference.

    Args:
        qkv: [B, T, 3D] the q, k, v projections side by side.
        bases: [H, r, d] orthonormal rows per head.
        bias: the EPE [H, 2w - 1], or None.
        log_temperature: [H] the read's per-head log temperature, or None.
        gain: [H] the learned per-head gain, or None (``o.shared_gain`` then).
        key_mask: [B, T] bool, True = real token, or None.
        o: the operation's settings (heads, window, pattern, norm, gains, dropout and its seeds).
    """
    from lavo_zoo.attention.lavo.read import read_memory_autograd
    from lavo_zoo.attention.ops.window.blocked import window_autograd

    B, T, _ = qkv.shape
    H, r, d = bases.shape
    q, k, v = split_qkv(qkv, o.heads)
    keep = dropout_mask(o.seed_window, (B, H, T, 2 * o.window - 1), o.dropout, qkv.device) if o.dropout else None
    local = window_autograd(q, [k], [v], o.window, o.causal, bias, key_mask, 0, keep=keep)   # [B, H, T, d]
    valid = torch.ones(B, 1, T, dtype=local.dtype, device=local.device) if key_mask is None \
        else key_mask[:, None].to(local.dtype)                                               # [B, 1, T]
    feats = local * valid[..., None]
    mem = dissected_memory(feats, valid, o.window)[0] if o.causal else mean_memory(feats, valid)
    if o.rms:
        mem = mem * torch.rsqrt(mem.square().mean(-1, keepdim=True) + RMS_EPS)
    if log_temperature is not None:
        q = q * log_temperature.exp().to(q.dtype)[:, None, None]
    keep = dropout_mask(o.seed_read, (B, H, T, r), o.dropout, qkv.device) if o.dropout else None
    read = read_memory_autograd(q, mem, bases, 0, o.window if o.causal else 1, keep=keep)
    factor = gain.to(read.dtype)[:, None, None] if gain is not None else o.shared_gain
    out = (o.local_scale * local + factor * read) * valid[..., None]
    return out.transpose(1, 2).reshape(B, T, H * d)


def _pytorch_grads(grad, qkv, bases, bias, log_temperature, gain, key_mask, o, bias_grad):
    """:func:`_backward`'s results by autograd over :func:`pytorch_form`."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() if t is not None else None
                  for t in (qkv, bases, bias if bias_grad else None, log_temperature, gain)]
        out = pytorch_form(leaves[0], leaves[1], leaves[2] if bias_grad else bias, *leaves[3:], key_mask, o)
        used = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(out, used, grad.to(out.dtype), allow_unused=True, materialize_grads=True))
    dqkv, dbases, dbias, dtemp, dgain = (next(grads).to(t.dtype) if t is not None else None for t in leaves)
    return dqkv, dbases, dbias, dtemp, dgain


class FusedLavoFunction(torch.autograd.Function):
    """forward(qkv [B, T, 3D], bases [H, r, d], bias [H, 2w - 1] | None, log_temperature [H] | None, gain [H] | None,
    key_mask [B, T] bool | None, options) -> [B, T, D] in qkv's dtype. Saves qkv, the parameters, the local branch,
    its log-sum-exp and the memory rows ([T / w, d]); the dropout masks are regenerated from the options' seeds."""

    @staticmethod
    def forward(ctx, qkv, bases, bias, log_temperature, gain, key_mask, options):
        """The three forward kernels; its arguments are stated on `pytorch_form` (``options``: its ``o``)."""
        qkv, bases = rowmajor(qkv), rowmajor(bases)
        out, local, lse, mem = _forward(qkv, bases, bias, log_temperature, gain, key_mask, options)
        ctx.save_for_backward(qkv, bases, bias, log_temperature, gain, key_mask, local, lse, mem)
        ctx.options = options
        return out

    @staticmethod
    def backward(ctx, grad):
        qkv, bases, bias, log_temperature, gain, key_mask, local, lse, mem = ctx.saved_tensors
        grads = _backward(grad, qkv, bases, bias, log_temperature, gain, key_mask, local, lse, mem, ctx.options,
                          bias is not None and ctx.needs_input_grad[2])
        return (*grads, None, None)


# ------------------------------------------------------------------------------- the custom operators (torch.compile)
@torch.library.custom_op("lavo_zoo::triton_lavo", mutates_args=())
def _lavo_op(qkv: Tensor, bases: Tensor, bias: Tensor | None, log_temperature: Tensor | None, gain: Tensor | None,
             key_mask: Tensor | None, heads: int, window: int, causal: bool, rms: bool, shared_gain: float,
             local_scale: float, dropout: float, seed_window: int, seed_read: int, block_m: int
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    o = FusedOptions(heads, window, causal, rms, shared_gain, local_scale, dropout, seed_window, seed_read, block_m)
    return _forward(rowmajor(qkv), rowmajor(bases), bias, log_temperature, gain, key_mask, o)


@_lavo_op.register_fake
def _(qkv, bases, bias, log_temperature, gain, key_mask, heads, window, causal, rms, shared_gain, local_scale,
      dropout, seed_window, seed_read, block_m):
    B, T, D3 = qkv.shape
    d = D3 // (3 * heads)
    n = -(-T // window) if causal else 1
    return (qkv.new_empty(B, T, D3 // 3), heads_major_empty(B, heads, T, d, qkv, qkv.dtype),
            qkv.new_empty(B * heads, T, dtype=torch.float32), qkv.new_empty(B, heads, n, d, dtype=torch.float32))


@torch.library.custom_op("lavo_zoo::triton_lavo_backward", mutates_args=())
def _lavo_backward_op(grad: Tensor, qkv: Tensor, bases: Tensor, bias: Tensor | None, log_temperature: Tensor | None,
                      gain: Tensor | None, key_mask: Tensor | None, local: Tensor, lse: Tensor, mem: Tensor,
                      heads: int, window: int, causal: bool, rms: bool, shared_gain: float, local_scale: float,
                      dropout: float, seed_window: int, seed_read: int, block_m: int, bias_grad: bool
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dqkv, dbases, dbias, dtemperature, dgain: empty where not asked for)."""
    o = FusedOptions(heads, window, causal, rms, shared_gain, local_scale, dropout, seed_window, seed_read, block_m)
    grads = _backward(grad, rowmajor(qkv), rowmajor(bases), bias, log_temperature, gain, key_mask, local, lse, mem,
                      o, bias_grad)
    return tuple(t if t is not None else qkv.new_empty(0) for t in grads)


@_lavo_backward_op.register_fake
def _(grad, qkv, bases, bias, log_temperature, gain, key_mask, local, lse, mem, heads, window, causal, rms,
      shared_gain, local_scale, dropout, seed_window, seed_read, block_m, bias_grad):
    f32 = torch.float32  # the shapes and strides of the real gradients: new (contiguous) tensors
    dbias = bias.new_empty(bias.shape, dtype=f32) if bias is not None and bias_grad else qkv.new_empty(0)
    return (qkv.new_empty(qkv.shape), bases.new_empty(bases.shape, dtype=f32), dbias,
            *(t.new_empty(t.shape, dtype=f32) if t is not None else qkv.new_empty(0) for t in (log_temperature, gain)))


def _lavo_setup(ctx, inputs, output):
    qkv, bases, bias, log_temperature, gain, key_mask, *options = inputs
    ctx.save_for_backward(qkv, bases, bias, log_temperature, gain, key_mask, *output[1:])
    ctx.options = options


def _lavo_op_backward(ctx, grad, *_unused):
    qkv, bases, bias, log_temperature, gain, key_mask, local, lse, mem = ctx.saved_tensors
    bias_grad = bias is not None and ctx.needs_input_grad[2]
    dqkv, dbases, dbias, dtemp, dgain = torch.ops.lavo_zoo.triton_lavo_backward(
        grad, qkv, bases, bias, log_temperature, gain, key_mask, local, lse, mem, *ctx.options, bias_grad)
    return (dqkv, dbases, dbias if bias_grad else None, dtemp if log_temperature is not None else None,
            dgain if gain is not None else None, None, *([None] * len(ctx.options)))


_lavo_op.register_autograd(_lavo_op_backward, setup_context=_lavo_setup)


def fused_self_attention(qkv: Tensor, bases: Tensor, window: int, *, heads: int, causal: bool,
                         bias: Tensor | None = None, log_temperature: Tensor | None = None,
                         gain: float | Tensor = 1.0, combine: str = "sum", memory_norm: str = "mean",
                         key_mask: Tensor | None = None, dropout: float = 0.0, block_m: int | None = None) -> Tensor:
    """LAVO's self-attention from the fused projection on the Triton kernels (module docstring).

    Args:
        qkv: [B, T, 3D] the q, k, v projections side by side (fp16 / bf16 / fp32).
        bases: [H, r, d].
        window: w.
        heads: H.
        causal: causal (context dissection) or noncausal.
        bias: the EPE [H, 2w - 1] or None.
        log_temperature: [H] or None.
        gain: the read's factor: a number, or (combine 'gain') the per-head [H] tensor.
        combine: 'sum' (local + gain read), 'gain' (``gain`` the per-head [H] tensor) or 'half'
            (0.5 (local + read); noncausal only: the causal 'half' keeps the local branch whole in window 0).
        memory_norm: 'mean' or 'rms'.
        key_mask: [B, T] bool, True = real token (a causal row left-aligned), or None.
        dropout: attention dropout p on both branches (0 outside training).
        block_m: queries per program of every kernel, or None (autotuned on a GPU; tests fix 16).

    Returns:
        [B, T, D] in qkv's dtype, zero at padded positions: what the output projection takes.

    Raises:
        :class:`~lavo_zoo.attention.ops.KernelUnavailable`: a forward kernel cannot be compiled on this device (the
        dispatch composes the call from the PyTorch kernels then).
    """
    if combine == "half" and causal:
        raise ValueError("fused_self_attention: combine 'half' is fused for noncausal attention only")
    per_head = gain if isinstance(gain, Tensor) else None
    half = combine == "half"
    shared = 0.5 if half else (1.0 if per_head is not None else float(gain))
    seeds = (new_seed(), new_seed()) if dropout else (0, 0)
    o = FusedOptions(heads, window, causal, memory_norm == "rms", shared, 0.5 if half else 1.0, float(dropout),
                     *seeds, block_m or 0)
    if torch.compiler.is_compiling():
        return torch.ops.lavo_zoo.triton_lavo(qkv, bases, bias, log_temperature, per_head, key_mask, *o)[0]
    return FusedLavoFunction.apply(qkv, bases, bias, log_temperature, per_head, key_mask, o)
