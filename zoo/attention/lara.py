"""LARA, linear randomized attention (Zheng, Wang, Kong; ICML 2022, "Linear complexity randomized self-attention
mechanism").

Softmax attention is an expectation over random features omega; LARA estimates it by self-normalised multiple
importance sampling with C Gaussian proposals N(mu_c, I) whose means are landmarks, mu_c = q_bar_c + k_bar_c (means
of C contiguous segments of the real scaled queries and keys), one sample omega_c per proposal (omega_c = mu_c +
noise in training, omega_c = mu_c in eval). With xi(x, w) = exp(w.x - |x|^2/2) (q, k scaled by d^(-1/4)):

    V_bar_c = sum_m softmax_m(log xi(k_m, omega_c)) v_m                                    (landmark reads keys)
    l_nc    = q_n.mu_c + log xi(q_n, omega_c) + logsumexp_m log xi(k_m, omega_c) - log xi(mu_c, omega_c)
    o_n     = sum_c softmax_c(l_nc) V_bar_c

(q_n.mu_c: query-specific mixture weights; the last term is the proposal density ratio N(w;0,I)/N(w;mu_c,I).)
Cost O(T C d). The output is random in training mode and deterministic in eval mode.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.common import ProjectedAttention, masked_softmax, segment_means
from lavo_zoo.attention.ops.naive import merge, ones, qkv, seg_means


@register_attention("lara")
class LARAAttention(ProjectedAttention):
    """LARA (Zheng et al. 2022): randomized attention with ``num_landmarks`` importance-sampling proposals."""

    family = "linear attention (randomised, landmarks)"
    decoding_state = "none (no causal pattern)"
    patterns = ("noncausal", "cross")
    streaming = False
    mixes_queries = ("cross",)  # proposals are means of query segments
    description = "LARA linear randomized attention (multiple importance sampling, segment-mean proposals)"
    test_options: ClassVar[dict[str, Any]] = {"num_landmarks": 6}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "noncausal", num_landmarks: int = 64,
                 bias: bool = True) -> None:
        """LARA.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            num_landmarks: C, the segment-mean proposals (at most the sequence length is used).
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if num_landmarks <= 0:
            raise ValueError(f"num_landmarks must be positive, got {num_landmarks}")
        self.num_landmarks = num_landmarks

    def proposals(self, q: torch.Tensor, k: torch.Tensor, q_mask: torch.Tensor | None,
                  k_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Scaled q [B,H,T,d], k [B,H,S,d] -> mu [B,H,C,d], omega [B,H,C,d], valid [B,C].

        Args:
            q: scaled queries [B, H, T, d].
            k: scaled keys [B, H, S, d].
            q_mask: [B, T] bool, True = real query, or None.
            k_mask: [B, S] bool, True = real key, or None.

        Returns:
            The proposals' means mu (the sum of the C query and key segment means), their draws omega (mu itself in
            eval mode, mu plus standard normal noise in training) and which of the C proposals are real.
        """
        C = min(self.num_landmarks, q.shape[2], k.shape[2])
        nq = q_mask.sum(1) if q_mask is not None else torch.full((q.shape[0],), q.shape[2], device=q.device)
        nk = k_mask.sum(1) if k_mask is not None else torch.full((k.shape[0],), k.shape[2], device=k.device)
        per_row = torch.minimum(nq, nk).clamp(max=C)  # [B] one count for both: mu pairs query and key segment c
        q_bar, q_ok = segment_means(q, q_mask, C, per_row)
        k_bar, k_ok = segment_means(k, k_mask, C, per_row)
        mu = q_bar + k_bar
        omega = mu + torch.randn_like(mu) if self.training else mu
        return mu, omega, q_ok | k_ok

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool) -> torch.Tensor:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        q = q * self.head_dim ** -0.25
        k = k * self.head_dim ** -0.25
        key_mask = context_mask if self.pattern == "cross" else padding_mask
        if q.shape[2] == 0 or k.shape[2] == 0:
            return self.output(q.new_zeros(q.shape))
        mu, omega, ok = self.proposals(q, k, padding_mask, key_mask)  # [B, H, C, d], [B, C]
        log_xk = k @ omega.transpose(-1, -2) - 0.5 * (k * k).sum(-1, keepdim=True)  # [B, H, S, C]
        allowed = ok[:, None, None, :]  # [B, 1, 1, C]
        if key_mask is not None:
            # finite fill (not -inf) keeps logsumexp and its gradient finite even with no real key
            log_xk = log_xk.masked_fill(~key_mask[:, None, :, None], torch.finfo(log_xk.dtype).min)
            allowed = allowed & key_mask.any(1)[:, None, None, None]
        v_bar = torch.softmax(log_xk, dim=2).transpose(-1, -2) @ v  # [B, H, C, d]
        log_z = torch.logsumexp(log_xk, dim=2)  # [B, H, C]
        log_xmu = (omega * mu).sum(-1) - 0.5 * (mu * mu).sum(-1)  # [B, H, C]
        # log xi(q_n, omega_c) without -|q_n|^2/2, a per-query constant that cancels in the softmax over c
        logits = q @ mu.transpose(-1, -2) + q @ omega.transpose(-1, -2) + (log_z - log_xmu)[:, :, None, :]
        return self.output(masked_softmax(logits, allowed) @ v_bar)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """LARA in its importance-sampling form (eval mode, omega_c = mu_c): for each query n,
    o_n = sum_c w_nc S_c / sum_c w_nc z_c, S_c = sum_m xi(k_m, w_c) v_m, z_c = sum_m xi(k_m, w_c),
    w_nc = alpha_nc xi(q_n, w_c) N(w_c; 0, I) / N(w_c; mu_c, I), alpha_nc = softmax_c(q_n . mu_c).

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    assert not m.training
    q, k, v = qkv(m, x, context)
    B, H, T, d = q.shape
    S = k.shape[2]
    q, k = q * d ** -0.25, k * d ** -0.25
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    qm = ones(B, T) if padding_mask is None else padding_mask
    km = ones(B, S) if key_mask is None else key_mask

    def xi(z, om):  # z [n, d], om [C, d] -> [n, C]
        return torch.exp(z @ om.T - 0.5 * (z * z).sum(-1, keepdim=True))

    def log_normal(om, mean):  # log N(om; mean, I) up to the shared constant
        return -0.5 * ((om - mean) ** 2).sum(-1)

    out = torch.zeros_like(q)
    for b in range(B):
        keys = [s for s in range(S) if bool(km[b, s])]
        if not keys:
            continue
        C = min(m.num_landmarks, int(qm[b].sum()), len(keys))  # segments of the real queries and keys
        if C == 0:
            continue
        for h in range(H):
            qb, _ = seg_means(q[b, h], qm[b], C)
            kb, _ = seg_means(k[b, h], km[b], C)
            mu = qb + kb  # [C, d]
            om = mu
            xk = xi(k[b, h, keys], om)  # [n, C']
            s_c = xk.T @ v[b, h, keys]  # [C', d]
            z_c = xk.sum(0)  # [C']
            ratio = torch.exp(log_normal(om, torch.zeros_like(om)) - log_normal(om, mu))  # [C']
            for n in range(T):
                alpha = torch.softmax(mu @ q[b, h, n], 0)  # [C']
                wts = alpha * xi(q[b, h, n][None], om)[0] * ratio
                out[b, h, n] = (wts @ s_c) / (wts @ z_c)
    return merge(m, out)
