"""Slow, obviously-correct reference formulas for the baseline mechanisms (tests only; never registered).

Each function takes a built module (to share its parameters) and the same inputs as ``module(...)`` and computes the
output from the mechanism's defining formula: quadratic forms, per-query loops, the recurrence. Use float64.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _heads(m, t: torch.Tensor) -> torch.Tensor:
    B, T, _ = t.shape
    return t.view(B, T, m.num_heads, m.head_dim).transpose(1, 2)  # [B, H, T, d]


def _qkv(m, x, context):
    src = x if context is None else context
    return _heads(m, m.q_proj(x)), _heads(m, m.k_proj(src)), _heads(m, m.v_proj(src))


def _merge(m, o: torch.Tensor) -> torch.Tensor:
    B, H, T, d = o.shape
    return m.out_proj(o.transpose(1, 2).reshape(B, T, H * d))


def _ones(B: int, T: int) -> torch.Tensor:
    return torch.ones(B, T, dtype=torch.bool)


def _allowed_keys(m, t: int, S: int, key_mask_b: torch.Tensor) -> list[int]:
    """Indices of keys query t may see (causal: s <= t)."""
    return [s for s in range(S) if bool(key_mask_b[s]) and (m.pattern != "causal" or s <= t)]


def _segments(T: int, C: int) -> list[list[int]]:
    C = min(C, T)
    return [[t for t in range(T) if t * C // T == c] for c in range(C)]


def _seg_means(x: torch.Tensor, mask_b: torch.Tensor, C: int) -> tuple[torch.Tensor, list[bool]]:
    """x [T, d] of one sequence/head -> landmark means [C', d] over real tokens, and their validity."""
    rows, ok = [], []
    for seg in _segments(x.shape[0], C):
        idx = [t for t in seg if bool(mask_b[t])]
        rows.append(x[idx].mean(0) if idx else x.new_zeros(x.shape[1]))
        ok.append(bool(idx))
    return torch.stack(rows), ok


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None = None,
                      causal: bool = False) -> torch.Tensor:
    """Per-query loop softmax attention: q [B,H,T,d], k, v [B,H,S,d] -> [B,H,T,d] (scale d^-1/2)."""
    B, _, T, d = q.shape
    S = k.shape[2]
    out = torch.zeros_like(q)
    for b in range(B):
        for t in range(T):
            idx = [s for s in range(S) if (key_mask is None or bool(key_mask[b, s])) and (not causal or s <= t)]
            if idx:
                p = torch.softmax(q[b, :, t, None, :] @ k[b, :, idx].transpose(-1, -2) * d ** -0.5, -1)  # [H,1,n]
                out[b, :, t] = (p @ v[b, :, idx])[:, 0]
    return out


def vanilla_reference(m, x, padding_mask=None, context=None, context_mask=None):
    q, k, v = _qkv(m, x, context)
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    return _merge(m, softmax_attention(q, k, v, key_mask, m.pattern == "causal"))


def abc_reference(m, x, padding_mask=None, context=None, context_mask=None):
    """ABC: for each query t, slot memory K~_t = sum_i softmax_i(s_i) k_i over the keys it may see (cumulative in
    the causal case), then softmax(q_t K~_t^T / sqrt(d)) V~_t."""
    q, k, v = _qkv(m, x, context)
    src = x if context is None else context
    B, H, T, d = q.shape
    S = k.shape[2]
    s = m.slot_proj(src).view(B, S, H, m.num_slots).transpose(1, 2)  # [B, H, S, n]
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    key_mask = _ones(B, S) if key_mask is None else key_mask
    out = torch.zeros_like(q)
    for b in range(B):
        for t in range(T):
            idx = _allowed_keys(m, t, S, key_mask[b])
            if not idx:
                continue
            alpha = torch.softmax(s[b, :, idx], dim=1)  # [H, n_keys, n]
            k_mem = alpha.transpose(-1, -2) @ k[b, :, idx]  # [H, n, d]
            v_mem = alpha.transpose(-1, -2) @ v[b, :, idx]
            p = torch.softmax(k_mem @ q[b, :, t, :, None] * d ** -0.5, dim=1)  # [H, n, 1]
            out[b, :, t] = (p.transpose(-1, -2) @ v_mem)[:, 0]
    return _merge(m, out)


def performer_reference(m, x, padding_mask=None, context=None, context_mask=None):
    """FAVOR+ quadratic form with the module's random features: A = phi(Q) phi(K)^T (causally masked),
    o = A V / A 1, phi(x) = exp(W x' - |x'|^2/2), x' = d^(-1/4) x (no stabilisation)."""
    q, k, v = _qkv(m, x, context)
    _, _, T, d = q.shape
    S = k.shape[2]
    w = m.features.to(q.dtype)  # [H, mf, d]

    def phi(z):
        z = z * d ** -0.25
        return torch.exp(torch.einsum("bhtd,hfd->bhtf", z, w) - 0.5 * (z * z).sum(-1, keepdim=True))

    a = phi(q) @ phi(k).transpose(-1, -2)  # [B, H, T, S]
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    if key_mask is not None:
        a = a * key_mask[:, None, None, :]
    if m.pattern == "causal":
        a = a * torch.ones(T, S, dtype=torch.bool).tril()
    den = a.sum(-1, keepdim=True)
    return _merge(m, (a @ v) / torch.where(den == 0, torch.ones_like(den), den))


def cosformer_reference(m, x, padding_mask=None, context=None, context_mask=None):
    """cosFormer quadratic form: sim_ij = relu(q_i).relu(k_j) cos(pi/2 (i-j)/M), positions counting real tokens."""
    q, k, v = _qkv(m, x, context)
    B, _, T, _ = q.shape
    S = k.shape[2]
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    qm = _ones(B, T) if padding_mask is None else padding_mask
    km = _ones(B, S) if key_mask is None else key_mask
    out = torch.zeros_like(q)
    for b in range(B):
        pq = qm[b].long().cumsum(0).double()
        pk = km[b].long().cumsum(0).double()
        if m.pattern == "causal":
            M = float(m.max_length)
        elif m.pattern == "cross":
            M = float(max(int(qm[b].sum()), int(km[b].sum()), 1))
        else:
            M = float(max(int(km[b].sum()), 1))
        rew = torch.cos(math.pi / 2 * (pq[:, None] - pk[None, :]) / M)  # [T, S]
        sim = torch.relu(q[b]) @ torch.relu(k[b]).transpose(-1, -2) * rew * km[b]  # [H, T, S]
        if m.pattern == "causal":
            sim = sim * torch.ones(T, S, dtype=torch.bool).tril()
        out[b] = (sim @ v[b]) / sim.sum(-1, keepdim=True).clamp_min(m.eps)
    return _merge(m, out)


def longshort_reference(m, x, padding_mask=None, context=None, context_mask=None):
    """Transformer-LS per query: one softmax over [window keys (LN_short); projected keys (LN_long)]."""
    q, k, v = _qkv(m, x, None)
    B, H, T, d = q.shape
    w = m.window_size
    mask = _ones(B, T) if padding_mask is None else padding_mask
    logits = torch.einsum("bhtd,hdr->bhtr", k, m.dyn_proj)  # [B, H, T, r]
    ks, vs = m.ln_short(k), m.ln_short(v)
    out = torch.zeros_like(q)
    for b in range(B):
        real = [s for s in range(T) if bool(mask[b, s])]
        if m.pattern == "noncausal" and real:
            p = torch.softmax(logits[b, :, real], dim=1)  # [H, n, r]
            kl_all = m.ln_long(p.transpose(-1, -2) @ k[b, :, real])  # [H, r, d]
            vl_all = m.ln_long(p.transpose(-1, -2) @ v[b, :, real])
        for t in range(T):
            j = t // w
            if m.pattern == "noncausal":
                lo, hi = j * w - w // 2, (j + 1) * w + w // 2
                win = [s for s in range(max(lo, 0), min(hi, T)) if bool(mask[b, s])]
                kl, vl = (kl_all, vl_all) if real else (q.new_zeros(H, 0, d),) * 2
            else:
                win = [s for s in range(max((j - 1) * w, 0), t + 1) if bool(mask[b, s])]
                kls, vls = [], []
                for jj in range(j):  # complete earlier segments, each projected on its own
                    seg = [s for s in range(jj * w, (jj + 1) * w) if bool(mask[b, s])]
                    if seg:
                        p = torch.softmax(logits[b, :, seg], dim=1)  # [H, n, rk]
                        kls.append(m.ln_long(p.transpose(-1, -2) @ k[b, :, seg]))
                        vls.append(m.ln_long(p.transpose(-1, -2) @ v[b, :, seg]))
                kl = torch.cat(kls, 1) if kls else q.new_zeros(H, 0, d)
                vl = torch.cat(vls, 1) if vls else q.new_zeros(H, 0, d)
            keys = torch.cat([ks[b, :, win], kl], 1)  # [H, n, d]
            vals = torch.cat([vs[b, :, win], vl], 1)
            if keys.shape[1]:
                p = torch.softmax(keys @ q[b, :, t, :, None] * d ** -0.5, dim=1)  # [H, n, 1]
                out[b, :, t] = (p.transpose(-1, -2) @ vals)[:, 0]
    return _merge(m, out)


def s4d_reference(m, x, padding_mask=None, context=None, context_mask=None, state=None, return_state=False):
    """S4D by its recurrence h_t = A_bar h_{t-1} + u_t, y_t = 2 Re(C' h_t) + D u_t (noncausal: plus the same
    recurrence run backwards with the second parameter set), then out_proj(GELU(y))."""
    if padding_mask is not None:
        x = x * padding_mask[..., None]
    B, T, D = x.shape
    dtA, cb = m.discretize()
    a_bar = torch.exp(dtA)  # [ndir, D, N2]
    y = torch.zeros(B, T, D, dtype=x.dtype)
    h = torch.zeros(B, D, a_bar.shape[-1], dtype=a_bar.dtype) if state is None else state
    for t in range(T):
        h = a_bar[0] * h + x[:, t, :, None]
        y[:, t] = 2 * (cb[0] * h).sum(-1).real
    h_last = h
    if m.pattern == "noncausal":
        h = torch.zeros_like(h)
        for t in reversed(range(T)):
            h = a_bar[1] * h + x[:, t, :, None]
            y[:, t] += 2 * (cb[1] * h).sum(-1).real
    y = m.out_proj(F.gelu(y + m.skip * x))
    return (y, h_last) if return_state else y


def s4d_kernel_reference(dtA: torch.Tensor, cb: torch.Tensor, L: int) -> torch.Tensor:
    """The direct Vandermonde form K_l = 2 Re(sum_n C'_n exp(dtA_n l)): [..., N2] -> [..., L]."""
    pos = torch.arange(L).to(dtA.dtype)
    return 2 * (cb[..., None] * torch.exp(dtA[..., None] * pos)).sum(-2).real


def lara_reference(m, x, padding_mask=None, context=None, context_mask=None):
    """LARA in its importance-sampling form (eval mode, omega_c = mu_c): for each query n,
    o_n = sum_c w_nc S_c / sum_c w_nc z_c, S_c = sum_m xi(k_m, w_c) v_m, z_c = sum_m xi(k_m, w_c),
    w_nc = alpha_nc xi(q_n, w_c) N(w_c; 0, I) / N(w_c; mu_c, I), alpha_nc = softmax_c(q_n . mu_c)."""
    assert not m.training
    q, k, v = _qkv(m, x, context)
    B, H, T, d = q.shape
    S = k.shape[2]
    q, k = q * d ** -0.25, k * d ** -0.25
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    qm = _ones(B, T) if padding_mask is None else padding_mask
    km = _ones(B, S) if key_mask is None else key_mask
    C = min(m.num_landmarks, T, S)

    def xi(z, om):  # z [n, d], om [C, d] -> [n, C]
        return torch.exp(z @ om.T - 0.5 * (z * z).sum(-1, keepdim=True))

    def log_normal(om, mean):  # log N(om; mean, I) up to the shared constant
        return -0.5 * ((om - mean) ** 2).sum(-1)

    out = torch.zeros_like(q)
    for b in range(B):
        keys = [s for s in range(S) if bool(km[b, s])]
        if not keys:
            continue
        for h in range(H):
            qb, qok = _seg_means(q[b, h], qm[b], C)
            kb, kok = _seg_means(k[b, h], km[b], C)
            keep = [c for c in range(C) if qok[c] or kok[c]]
            mu = (qb + kb)[keep]  # [C', d]
            om = mu
            xk = xi(k[b, h, keys], om)  # [n, C']
            s_c = xk.T @ v[b, h, keys]  # [C', d]
            z_c = xk.sum(0)  # [C']
            ratio = torch.exp(log_normal(om, torch.zeros_like(om)) - log_normal(om, mu))  # [C']
            for n in range(T):
                alpha = torch.softmax(mu @ q[b, h, n], 0)  # [C']
                wts = alpha * xi(q[b, h, n][None], om)[0] * ratio
                out[b, h, n] = (wts @ s_c) / (wts @ z_c)
    return _merge(m, out)


def nystromformer_reference(m, x, padding_mask=None, context=None, context_mask=None):
    """Nystrom formula with explicitly looped landmarks and the exact pseudo-inverse."""
    q, k, v = _qkv(m, x, context)
    B, H, T, d = q.shape
    S = k.shape[2]
    q = q * d ** -0.5
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    qm = _ones(B, T) if padding_mask is None else padding_mask
    km = _ones(B, S) if key_mask is None else key_mask
    out = torch.zeros_like(q)
    for b in range(B):
        keys = [s for s in range(S) if bool(km[b, s])]
        for h in range(H):
            ql, qok = _seg_means(q[b, h], qm[b], m.num_landmarks)
            kl, kok = _seg_means(k[b, h], km[b], m.num_landmarks)
            ql = ql[[c for c, ok in enumerate(qok) if ok]]
            kl = kl[[c for c, ok in enumerate(kok) if ok]]
            f = torch.softmax(q[b, h] @ kl.T, -1)
            a = torch.softmax(ql @ kl.T, -1)
            bm = torch.softmax(ql @ k[b, h, keys].T, -1)
            out[b, h] = f @ torch.linalg.pinv(a) @ bm @ v[b, h, keys]
    return _merge(m, out)


REFERENCES = {
    "vanilla": vanilla_reference,
    "abc": abc_reference,
    "performer": performer_reference,
    "cosformer": cosformer_reference,
    "longshort": longshort_reference,
    "s4d": s4d_reference,
    "lara": lara_reference,
    "nystromformer": nystromformer_reference,
}
