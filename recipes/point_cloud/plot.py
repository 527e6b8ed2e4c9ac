"""Side-by-side pictures of point clouds (partial / completed / ground truth) with matplotlib's Agg backend."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lavo_zoo.outputs import save_figure


def draw_clouds(clouds: Sequence[np.ndarray], titles: Sequence[str], path: str | Path, max_points: int = 8192,
                elev: float = 25.0, azim: float = 45.0) -> Path:
    """Write a PNG with one 3-D scatter per cloud [N, 3] (y up, PCN's convention), all on the same axes limits.

    Args:
        clouds: the clouds, [N, 3] each.
        titles: one title per cloud.
        path: the PNG to write.
        max_points: points drawn per cloud at most (a random subset beyond).
        elev: the view's elevation, in degrees.
        azim: the view's azimuth, in degrees.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4 * len(clouds), 4.2), dpi=100)
    stacked = np.concatenate([c for c in clouds if len(c)]) if any(len(c) for c in clouds) else np.zeros((1, 3))
    half = float(np.abs(stacked).max()) or 0.5
    rng = np.random.default_rng(0)
    for k, (cloud, title) in enumerate(zip(clouds, titles)):
        ax = fig.add_subplot(1, len(clouds), k + 1, projection="3d")
        shown = cloud[rng.permutation(len(cloud))[:max_points]] if len(cloud) > max_points else cloud
        # PCN is y-up: plot (x, z, y) so that matplotlib's vertical axis is the object's up
        ax.scatter(shown[:, 0], shown[:, 2], shown[:, 1], s=0.5, c=shown[:, 1], cmap="viridis", linewidths=0)
        ax.set_xlim(-half, half)
        ax.set_ylim(-half, half)
        ax.set_zlim(-half, half)
        ax.view_init(elev=elev, azim=azim)
        ax.set_axis_off()
        ax.set_title(f"{title} ({len(cloud)} points)", fontsize=10)
    fig.tight_layout()
    try:
        return save_figure(fig, Path(path), option="--png")
    finally:
        plt.close(fig)
