"""The language model's plot: perplexity against context length (``eval.plot``)."""
from __future__ import annotations

from pathlib import Path

from lavo_zoo.outputs import save_figure


def plot_perplexity(metrics: dict[str, float], path: Path) -> None:
    """PNG of perplexity against context length: evaluation lengths and streamed context buckets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    lengths = sorted((int(k[4:]), v) for k, v in metrics.items() if k[4:].isdigit())
    if lengths:
        ax.plot(*zip(*lengths), "o-", label="blocks of this length")
    buckets = [(int(k.rsplit("-", 1)[1]), v) for k, v in metrics.items() if k.startswith("ppl@ctx:")]
    if buckets:
        ax.plot(*zip(*sorted(buckets)), "s-", label="streaming, by context length")
    ax.set(xscale="log", xlabel="context length (tokens)", ylabel="perplexity", title="Perplexity vs context")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    try:
        save_figure(fig, Path(path), option="eval.plot", dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
