"""One PNG per synthesised utterance: synthesised and reference log-mels, the stop probability and, where the
cross attention has explicit weights (softmax mechanisms), the last decoder layer's text-to-frame alignment (both
from :func:`~lavo_zoo.recipes.tts.infer.teacher_forced_view`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lavo_zoo.outputs import save_figure


def plot_utterance(path: Path, mel: np.ndarray, target: np.ndarray | None, stop: np.ndarray,
                   alignment: np.ndarray | None = None, title: str = "") -> Path:
    """PNG of the synthesised log-mel [T, n_mels], the reference [T', n_mels] (optional), the stop probability
    [T / r] and the alignment [T / r, S] (optional).

    Args:
        path: the PNG to write.
        mel: [T, n_mels] the synthesised log-mel.
        target: [T', n_mels] the reference, or None.
        stop: [T / r] the stop probability per step.
        alignment: [T / r, S] the cross-attention alignment, or None.
        title: the figure's title ('' for none).
    """
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
    try:
        return save_figure(fig, Path(path), option="--png", dpi=80)
    finally:
        plt.close(fig)
