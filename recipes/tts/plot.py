"""One PNG per synthesised utterance: synthesised and reference log-mels, the stop probability and, where the
cross attention has explicit weights (softmax mechanisms), the last decoder layer's text-to-frame alignment."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from lavo_zoo.recipes.tts.model import TransformerTTS, shift_right


@torch.no_grad()
def teacher_forced_view(model: TransformerTTS, tokens: torch.Tensor, grouped: torch.Tensor
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """For one synthesised utterance (tokens [1, S], the groups fed back [1, T / r, r * n_mels]): the stop
    probabilities [T / r] and the head-averaged weights [T / r, S] of the last decoder layer's cross attention
    (fairseq's alignment), from one teacher-forced pass over the fed-back groups; the alignment is None when the
    cross mechanism has no explicit softmax weights (linear attentions)."""
    attn = model.decoder.layers[-1].cross_attn
    explicit = type(attn).__name__ in ("SDPAttention", "VanillaAttention") and hasattr(attn, "q_proj")
    captured = {}

    def hook(module, args, kwargs):
        captured["x"], captured["context"] = args[0], kwargs["context"]

    handle = attn.register_forward_pre_hook(hook, with_kwargs=True) if explicit else None
    try:
        _, _, stop = model(tokens, tokens != 0, shift_right(grouped))  # stop [1, T / r]
    finally:
        if handle is not None:
            handle.remove()
    probs = torch.sigmoid(stop[0]).float().cpu().numpy()
    if not explicit:
        return probs, None
    H, d = attn.num_heads, attn.head_dim
    q = attn.q_proj(captured["x"]).view(1, -1, H, d).transpose(1, 2)  # [1, H, T, d]
    k = attn.k_proj(captured["context"]).view(1, -1, H, d).transpose(1, 2)  # [1, H, S, d]
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)  # [1, H, T, S]
    return probs, weights.mean(1)[0].float().cpu().numpy()


def plot_utterance(path: Path, mel: np.ndarray, target: np.ndarray | None, stop: np.ndarray,
                   alignment: np.ndarray | None = None, title: str = "") -> Path:
    """PNG of the synthesised log-mel [T, n_mels], the reference [T', n_mels] (optional), the stop probability
    [T / r] and the alignment [T / r, S] (optional)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("synthesised log-mel", mel)] + ([("reference log-mel", target)] if target is not None else [])
    rows = len(panels) + 1 + (alignment is not None)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.2 * rows), squeeze=False)
    axes = axes[:, 0]
    for ax, (name, m) in zip(axes, panels):
        ax.imshow(m.T, origin="lower", aspect="auto", interpolation="none")
        ax.set(title=name, ylabel="mel band")
    ax = axes[len(panels)]
    ax.plot(stop)
    ax.set(title="stop probability (teacher-forced pass over the output)", xlabel="decoder step",
           ylim=(-0.05, 1.05))
    if alignment is not None:
        ax = axes[-1]
        ax.imshow(alignment.T, origin="lower", aspect="auto", interpolation="none")
        ax.set(title="alignment (last decoder layer, heads averaged)", xlabel="decoder step", ylabel="token")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
