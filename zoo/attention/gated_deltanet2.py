"""Gated DeltaNet-2 (NVIDIA, 2026, "Gated DeltaNet-2: decoupling erase and write in linear attention";
flash-linear-attention's ``GatedDeltaNet2`` layer, adapted there from NVlabs/GatedDeltaNet-2, its defaults): KDA with
its one write strength per head split into a channel-wise erase gate on the keys and a write gate on the values.

    b_t = sigmoid(W_b x_t)          (erase gate, one per key channel)
    w_t = sigmoid(W_w x_t)          (write gate, one per value channel)
    g_t = -exp(A_log) softplus(W_f2 W_f1 x_t + dt_bias)                       (log decays, one per key channel)
    S_t = (I - k_t (b_t . k_t)^T) diag(exp(g_t)) S_{t-1} + k_t (w_t . v_t)^T,   o_t = S_t^T q_t / sqrt(d_k)
    y_t = W_o (RMSNorm(o_t) * sigmoid(W_g2 W_g1 x_t + b_g))

The rest is KDA's layer (:mod:`lavo_zoo.attention.kda`: short convolutions, L2-normalised queries and keys, the
decay's low-rank projection, A_log and dt_bias, the sigmoid-gated norm). With b_t = w_t = beta_t (the gates tied:
every row of a head's W_b and W_w equal to KDA's w_b) it is KDA exactly, and with the decay also equal over a head's
key channels, Gated DeltaNet's recurrence. ``allow_neg_eigval`` doubles the erase gate only, as the reference layer
does. The recurrence is the op of :mod:`lavo_zoo.attention.ops.delta_rule` with erase and write strengths per channel
(flash-linear-attention's ``chunk_gdn2`` on CUDA). Deliberate differences from the reference layer: the heads are
the contract's (no grouped value heads), and flash-linear-attention's kernel-speed options (``safe_gate``,
``lower_bound``) are not taken.

Patterns: causal, noncausal (a forward and a backward scan combined; ``noncausal_form="final_state"``: the state
after the whole sequence) and cross (the state after the whole real source), see
:mod:`lavo_zoo.attention.recurrent`.
"""
from __future__ import annotations

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.kda import KDAAttention, reference_inputs, reference_output
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.recurrent import naive_source_reading, real_rows, split_heads


@register_attention("gated_deltanet2")
class GatedDeltaNet2Attention(KDAAttention):
    """Gated DeltaNet-2 (2026): KDA's decay per key channel with an erase gate per key channel and a write gate per
    value channel.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head a d_k x d_v matrix
    (d_v = ``expand_v`` d_k), and the convolutions' last inputs.
    """

    family = "linear attention, gated delta rule (erase and write gates per channel)"
    description = "Gated DeltaNet-2 (KDA's decay per key channel, erase gate per key and write gate per value channel)"

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", expand_v: float = 1.0,
                 conv_size: int = 4, chunk_size: int = 64, norm_eps: float = 1e-5, allow_neg_eigval: bool = False,
                 kernels: str = "auto", noncausal_form: str = "bidirectional") -> None:
        """Gated DeltaNet-2's layer (flash-linear-attention's ``GatedDeltaNet2``; its defaults).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            expand_v: the values' total width as a multiple of ``embed_dim`` (d_v = expand_v D / H per head).
            conv_size: taps of the SiLU short convolutions on the query, key and value projections (0: none, SiLU
                only).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            norm_eps: the per-head RMSNorm's epsilon.
            allow_neg_eigval: double the erase gate (b in [0, 2]; the write gate stays in [0, 1]).
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA, in
                half precision); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: an ``expand_v`` that does not give a positive multiple of ``num_heads``, a ``chunk_size``
                below 1, a negative ``conv_size``, an unknown ``kernels`` or ``noncausal_form``, a ``norm_eps``
                that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, expand_v, conv_size, chunk_size, norm_eps, allow_neg_eigval,
                         kernels, noncausal_form)
        self.b_proj = nn.Linear(embed_dim, embed_dim, bias=False)        # erase gate, per key channel
        self.w_proj = nn.Linear(embed_dim, self.value_dim, bias=False)   # write gate, per value channel

    def gates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The erase gate beta [B, H, T, d_k], the log decay g [B, H, T, d_k] and the write gate [B, H, T, d_v] of
        x [B, T, D]."""
        return {"beta": split_heads(self.strengths(self.b_proj(x)), self.num_heads), "g": self.log_decay(x),
                "write": split_heads(torch.sigmoid(self.w_proj(x)), self.num_heads)}


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Per row, its real tokens alone, by the recurrence token by token (:func:`~lavo_zoo.attention.ops.delta_rule.
    naive.naive_delta_rule`: S <- diag(exp(g_t)) S, then S <- S + k_t (w_t . v_t - S^T (b_t . k_t))^T): causal reads
    S_t at t, noncausal and cross as :func:`~lavo_zoo.attention.recurrent.naive_source_reading` reads.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    out = torch.zeros_like(x)
    for b, rows, xq, xs in real_rows(m, x, padding_mask, context, context_mask):
        q, k, v, g = reference_inputs(m, xq, xs)
        erase = split_heads(torch.sigmoid(m.b_proj(xs)) * (2 if m.allow_neg_eigval else 1), m.num_heads)
        write = split_heads(torch.sigmoid(m.w_proj(xs)), m.num_heads)
        if m.pattern == "causal":
            o, _ = naive_delta_rule(q, k, v, erase, g, write=write)
        else:
            o = naive_source_reading(m, naive_delta_rule, q, k, v, beta=erase, g=g, write=write)
        out[b, rows] = reference_output(m, o, xq)[0]
    return out
