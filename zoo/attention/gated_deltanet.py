"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025, "Gated delta networks: improving Mamba2 with delta rule";
flash-linear-attention's ``GatedDeltaNet`` layer, its defaults: values twice as wide as keys, SiLU short
convolutions of 4 taps, L2-normalised queries and keys, a sigmoid write strength and a Mamba-2 decay per head,
per-head RMSNorm with a swish output gate).

    beta_t = sigmoid(w_b . x_t),   g_t = -exp(A_log) softplus(w_a . x_t + dt_bias)     (log decay, one per head)
    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t / sqrt(d_k)
    y_t = W_o (RMSNorm(o_t) * swish(W_g x_t))

The delta rule's overwrite (what DeltaNet adds to linear attention) with Mamba-2's forgetting (which lets it clear
the memory at once). Keys of width D / H, values of width ``expand_v`` D / H. Training runs the chunked form of
:mod:`lavo_zoo.attention.ops.delta_rule`; decoding carries S and the convolutions' last inputs. The slow
reference is :func:`lavo_zoo.attention.deltanet.naive` (the same recurrence with the gate).

Patterns: causal, noncausal (a forward and a backward scan combined; ``noncausal_form="final_state"``: the memory
after the whole sequence) and cross (the memory after the whole real source), see
:mod:`lavo_zoo.attention.recurrent`.
"""
from __future__ import annotations

from typing import Any, ClassVar

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.deltanet import DeltaRuleAttention, naive

__all__ = ["GatedDeltaNetAttention", "naive"]  # naive: the delta rule with the gate, token by token


@register_attention("gated_deltanet")
class GatedDeltaNetAttention(DeltaRuleAttention):
    """Gated DeltaNet (Yang et al. 2025): the delta rule with a data-dependent decay per head and an output gate.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head a d_k x d_v matrix
    (d_v = ``expand_v`` d_k), and the convolutions' last inputs.
    """

    gated = True
    family = "linear attention, gated delta rule"
    decoding_state = "H x (D/H) x (expand_v D/H) + (conv_size - 1) x (2 + expand_v) D conv inputs"
    description = "Gated DeltaNet (delta rule + Mamba-2 decay per head, output gate; chunked WY form, recurrent state)"
    test_options: ClassVar[dict[str, Any]] = {"chunk_size": 8, "expand_v": 1.0}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", expand_v: float = 2.0,
                 conv_size: int = 4, chunk_size: int = 64, norm_eps: float = 1e-5, kernels: str = "auto",
                 noncausal_form: str = "bidirectional") -> None:
        """Gated DeltaNet's layer (flash-linear-attention's ``GatedDeltaNet``; its defaults).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            expand_v: the values' total width as a multiple of ``embed_dim`` (d_v = expand_v D / H per head).
            conv_size: taps of the SiLU short convolutions on the query, key and value projections (0: none).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            norm_eps: the per-head RMSNorm's epsilon.
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA, in
                half precision); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: an ``expand_v`` that does not give a positive multiple of ``num_heads``, a ``chunk_size``
                below 1, a negative ``conv_size``, an unknown ``kernels`` or ``noncausal_form``.
        """
        super().__init__(embed_dim, num_heads, pattern, expand_v, conv_size, chunk_size, norm_eps, kernels,
                         noncausal_form)
