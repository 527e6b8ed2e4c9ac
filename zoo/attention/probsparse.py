"""Informer's ProbSparse attention (Zhou et al., AAAI 2021): only the u = c*ceil(ln L_Q) "active" queries with the
largest sparsity score attend to every key; the other ("lazy") queries output the mean of the values.

Sparsity score of query i (the paper's max-mean measurement, estimated on U = c*ceil(ln L_K) sampled keys):
    M_i = max_j s_ij - mean_j s_ij,   s_ij = q_i . k_j   over the sampled j.
Patterns:
- ``noncausal`` / ``cross``: the top-u queries are active; lazy queries output mean(V) over the (valid) keys.
- ``causal`` (Informer's masked decoder variant): keys are sampled from the query's own past, a query is active when
  its score is among the u largest of queries 0..t (so that no future token decides it), active queries attend
  causally and lazy ones output the running mean of V. Informer's reference picks the global top-u (a later query can
  change whether an earlier one is active) and uses the running *sum* of V; both would break causality or scale.
When u >= L_Q every query is active and the result is exactly full softmax attention.

Sampling uses the global torch RNG in training and a fixed-seed generator in eval mode, so evaluation is
reproducible and a fixed function of the valid tokens. Padded batches are computed per sequence on its valid tokens.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import Attention
from lavo_zoo.attention.common import merge_heads, split_heads
from lavo_zoo.attention.ops.naive import heads, ones

_CHUNK_ELEMENTS = 1 << 24  # bound on the [B, H, chunk, L] scores of a block of queries in the sparsity measurement


def _chunk(B: int, H: int, L: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(1, B * H * L))


def _budget(factor: int, length: int) -> int:
    """min(L, factor * ceil(ln L)), at least 1: Informer's sample / top-query count."""
    return min(length, max(1, factor * math.ceil(math.log(length))))


def _causal_active(score: torch.Tensor, n_top: int, block: int = 256) -> torch.Tensor:
    """[B, H, L] -> bool [B, H, L]: query t is active when fewer than ``n_top`` earlier queries have a strictly larger
    score (equivalently, score_t >= the n_top-th largest of scores 0..t-1).

    Blocks of ``block`` queries at a time: each query is compared with the running top-n_top of the earlier blocks
    and with the earlier queries of its own block, O(L (n_top + block)) without a Python step per query.
    """
    B, H, L = score.shape
    top = score.new_full((B, H, n_top), float("-inf"))  # the n_top largest scores of the earlier blocks
    active = []
    for start in range(0, L, block):
        s = score[..., start:start + block]  # [B, H, c]
        c = s.shape[-1]
        above_top = (top[..., None, :] > s[..., None]).sum(-1)  # [B, H, c]
        earlier = torch.ones(c, c, dtype=torch.bool, device=score.device).tril(-1)  # [c, c]: j < t
        above_block = ((s[..., None, :] > s[..., None]) & earlier).sum(-1)  # [B, H, c]
        active.append(above_top + above_block < n_top)
        top = torch.cat([top, s], dim=-1).topk(n_top, dim=-1).values
    return torch.cat(active, dim=-1)


@register_attention("probsparse")
class ProbSparseAttention(Attention):
    """Informer's ProbSparse attention: top-u queries by max-mean score attend fully, lazy queries take mean(V)."""

    family = "sparse softmax (top-u queries)"
    decoding_state = "T D inputs (no streaming: re-runs the prefix)"
    patterns = ("causal", "noncausal", "cross")
    streaming = False
    mixes_queries = ("causal", "cross")  # the top-u active queries and the sample sizes depend on the number of queries
    deterministic = True  # eval mode samples with a fixed seed and pads per sequence: a fixed function of valid tokens
    test_options: ClassVar[dict[str, Any]] = {"factor": 2}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", factor: int = 5,
                 eval_seed: int = 0) -> None:
        """ProbSparse attention.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            factor: c, Informer's sampling factor: c ceil(ln L) sampled keys and active queries.
            eval_seed: the seed of the key sample in eval mode (a fixed function of the inputs there).
        """
        super().__init__(embed_dim, num_heads, pattern)
        if factor < 1:
            raise ValueError(f"probsparse factor must be >= 1, got {factor}")
        self.factor = factor
        self.eval_seed = eval_seed
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, factor={self.factor}"

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool) -> torch.Tensor:
        source, source_mask = (x, padding_mask) if context is None else (context, context_mask)
        if (padding_mask is None or bool(padding_mask.all())) and (source_mask is None or bool(source_mask.all())):
            return self._dense(x, source)
        outputs = []
        for b in range(x.shape[0]):  # padded batches: each sequence on its own valid tokens
            q_idx = (torch.arange(x.shape[1], device=x.device) if padding_mask is None
                     else padding_mask[b].nonzero()[:, 0])
            s_idx = (torch.arange(source.shape[1], device=x.device) if source_mask is None
                     else source_mask[b].nonzero()[:, 0])
            y = x.new_zeros(x.shape[1:])  # [T, D], zeros at padded queries
            if len(q_idx) and len(s_idx):
                y = y.index_copy(0, q_idx, self._dense(x[b, q_idx][None], source[b, s_idx][None])[0].to(y.dtype))
            outputs.append(y)
        return torch.stack(outputs)

    def _dense(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """x [B, Lq, D], source [B, Lk, D] (no padding) -> [B, Lq, D]."""
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(source)), self._heads(self.v_proj(source))
        out = self._probsparse(q, k, v)  # [B, H, Lq, d]
        return self.out_proj(merge_heads(out).to(x.dtype))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """[B, L, D] -> contiguous [B, H, L, d]."""
        return split_heads(t, self.num_heads).contiguous()

    def _sample_keys(self, Lq: int, Lk: int, n: int, device: torch.device) -> torch.Tensor:
        """[Lq, n] key indices per query (shared over batch and heads, as Informer); causal: from the query's past."""
        gen = None if self.training else torch.Generator().manual_seed(self.eval_seed)
        if self.pattern == "causal":
            upper = torch.arange(1, Lq + 1)[:, None]  # [Lq, 1]: query t samples from [0, t]
            idx = (torch.rand(Lq, n, generator=gen) * upper).long().minimum(upper - 1)
        else:
            idx = torch.randint(Lk, (Lq, n), generator=gen)
        return idx.to(device)

    @staticmethod
    def _sparsity(q: torch.Tensor, k: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """max - mean of q_i . k_j over the sampled keys idx [Lq, U] -> [B, H, Lq].

        Short sources: blocks of queries against all keys, then a gather (one large matmul, O(Lq Lk d) but fast).
        Long sources (Lk > 64 U): the U sampled keys are gathered per block of queries, O(Lq U d); the matmul form
        made the measurement quadratic and dominated the run time from about 4K tokens on.
        """
        B, H, Lq, d = q.shape
        Lk, U = k.shape[2], idx.shape[1]
        scores = []
        if Lk <= 64 * U:
            chunk = _chunk(B, H, Lk)
            for start in range(0, Lq, chunk):
                full = q[:, :, start:start + chunk] @ k.transpose(-2, -1)  # [B, H, c, Lk]
                scores.append(full.gather(-1, idx[start:start + chunk].expand(B, H, -1, -1)))  # [B, H, c, U]
        else:
            chunk = max(1, _CHUNK_ELEMENTS // max(1, B * H * U * d))
            for start in range(0, Lq, chunk):
                keys = k[:, :, idx[start:start + chunk]]  # [B, H, c, U, d]
                scores.append((keys @ q[:, :, start:start + chunk, :, None])[..., 0])  # [B, H, c, U]
        sampled = torch.cat(scores, dim=2)  # [B, H, Lq, U]
        return sampled.amax(-1) - sampled.mean(-1)

    def _probsparse(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [B, H, Lq, d], k/v [B, H, Lk, d] -> [B, H, Lq, d] in fp32 (fp64 for fp64 inputs)."""
        causal = self.pattern == "causal"
        Lq, Lk, d = q.shape[2], k.shape[2], q.shape[3]
        dtype = torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        n_top = _budget(self.factor, Lq)
        with torch.no_grad():  # the selection is not differentiable
            idx = self._sample_keys(Lq, Lk, _budget(self.factor, Lk), q.device)
            score = self._sparsity(q, k, idx)  # [B, H, Lq]
            if causal:
                active = _causal_active(score, n_top)  # [B, H, Lq]
                n_sel = int(active.sum(-1).max())
                sel = torch.argsort((~active).to(torch.int8), dim=-1, stable=True)[..., :n_sel]  # active first
                sel_active = active.gather(-1, sel)  # [B, H, n]
            else:
                sel = score.topk(n_top, dim=-1, sorted=False).indices  # [B, H, n]
        if causal:
            lazy = v.cumsum(2) / torch.arange(1, Lk + 1, device=v.device, dtype=dtype)[:, None]  # running mean
        else:
            lazy = v.mean(2, keepdim=True).expand(-1, -1, Lq, -1)
        sel_d = sel[..., None].expand(-1, -1, -1, d)  # [B, H, n, d]
        scores = q.gather(2, sel_d) @ k.transpose(-2, -1) / math.sqrt(d)  # [B, H, n, Lk]
        if causal:
            scores = scores.masked_fill(torch.arange(Lk, device=q.device) > sel[..., None], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, n, d]
        if causal:
            out = torch.where(sel_active[..., None], out, lazy.gather(2, sel_d))
        return lazy.scatter(2, sel_d, out.to(lazy.dtype))  # under autocast the products come out in bf16


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """ProbSparse by its definition, one sequence (on its real tokens), head and query at a time. Eval mode: the
    sampled keys are the module's fixed-seed draw (the one random part, shared like the parameters). Query i's score
    is max - mean of q_i . k_j over its sampled keys; it is active when fewer than u queries score strictly higher
    (causal: among queries 0..i-1); active queries take softmax attention over their keys (causal: 0..i), lazy ones
    the mean of those values. Padded query rows are zero.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    assert not m.training
    source, source_mask = (x, padding_mask) if context is None else (context, context_mask)
    B, T, D = x.shape
    S = source.shape[1]
    causal = m.pattern == "causal"
    qm = ones(B, T) if padding_mask is None else padding_mask
    km = ones(B, S) if source_mask is None else source_mask
    y = torch.zeros(B, T, D, dtype=x.dtype)
    for b in range(B):
        qi = [t for t in range(T) if bool(qm[b, t])]
        ki = [s for s in range(S) if bool(km[b, s])]
        if not qi or not ki:
            continue
        q = heads(m, m.q_proj(x[b, qi][None]))[0].double()       # [H, Lq, d]
        k = heads(m, m.k_proj(source[b, ki][None]))[0].double()  # [H, Lk, d]
        v = heads(m, m.v_proj(source[b, ki][None]))[0].double()
        H, Lq, d = q.shape
        Lk = k.shape[1]
        n_top = min(Lq, max(1, m.factor * math.ceil(math.log(Lq))))
        idx = m._sample_keys(Lq, Lk, min(Lk, max(1, m.factor * math.ceil(math.log(Lk)))), torch.device("cpu"))
        out = torch.zeros(H, Lq, d, dtype=torch.float64)
        for h in range(H):
            score = []
            with torch.no_grad():  # the selection is not differentiable
                for i in range(Lq):
                    sampled = k[h, idx[i]] @ q[h, i]                   # [U]
                    score.append(float(sampled.max() - sampled.mean()))
            for i in range(Lq):
                rivals = range(i) if causal else range(Lq)
                keys = list(range(i + 1)) if causal else list(range(Lk))
                if sum(score[j] > score[i] for j in rivals) < n_top:  # active
                    p = torch.softmax(k[h, keys] @ q[h, i] / math.sqrt(d), 0)
                    out[h, i] = p @ v[h, keys]
                else:
                    out[h, i] = v[h, keys].mean(0)
        y[b, qi] = m.out_proj(out.transpose(0, 1).reshape(Lq, D).to(x.dtype))
    return y
