"""Point-cloud completion inference: :func:`complete_clouds` (the recipe's evaluation) and :class:`Completer`, what
``lavo_zoo.load`` returns for a ``point_cloud`` checkpoint (``lavo-zoo complete`` calls it)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.errors import InputError
from lavo_zoo.evaluators.chamfer import PointClouds
from lavo_zoo.recipes.point_cloud.data import random_sample_points


def complete_clouds(model: nn.Module, partial: torch.Tensor, partial_mask: torch.Tensor
                    ) -> tuple[torch.Tensor, PointClouds]:
    """(coarse [B, Mc, 3], dense PointClouds whose mask drops the partial's zero padding) for partial [B, N, 3]."""
    coarse, dense = model(partial)  # [B, Mc, 3], [B, Md + N, 3]
    folded = dense.shape[1] - partial.shape[1]
    mask = torch.cat([partial_mask.new_ones(partial.shape[0], folded), partial_mask], dim=1)  # [B, Md + N]
    return coarse, PointClouds(dense, mask)




class Completer(Predictor):
    """A trained PoinTr: ``complete`` turns partial clouds into dense ones (``lavo_zoo.load`` returns it for a
    ``point_cloud`` checkpoint)."""

    @torch.no_grad()
    def complete(self, points: np.ndarray | Sequence[np.ndarray], seed: int = 0) -> np.ndarray | list[np.ndarray]:
        """Complete partial point clouds.

        Args:
            points: a partial cloud [N, 3] (coordinates normalised as PCN's, y up), or a list of them (completed as
                one batch). A cloud with more points than the model takes (``data.input_points``) is subsampled at
                random, as PoinTr's RandomSamplePoints.
            seed: seed of that subsampling.

        Returns:
            The dense completion [M, 3] (float32), or a list of them for a list.

        Raises:
            InputError: a cloud is not finite points [N, 3] with N >= 1.
        """
        single = isinstance(points, np.ndarray) and points.ndim == 2
        clouds = [np.asarray(points, np.float32)] if single else [np.asarray(p, np.float32) for p in points]
        for i, cloud in enumerate(clouds):
            if cloud.ndim != 2 or cloud.shape[1] != 3 or len(cloud) == 0 or not np.isfinite(cloud).all():
                raise InputError(f"cloud {i}: expected finite points [N, 3] with N >= 1, got shape "
                                 f"{list(cloud.shape)}")
        rng = np.random.default_rng(seed)
        sampled = [random_sample_points(c, self.cfg.data.input_points, rng) for c in clouds]
        partial = torch.from_numpy(np.stack([s[0] for s in sampled])).to(self.device)  # [B, P, 3]
        mask = torch.from_numpy(np.stack([s[1] for s in sampled])).to(self.device)     # [B, P]
        _, dense = complete_clouds(self.model, partial, mask)
        out = [dense.cloud(i).float().cpu().numpy() for i in range(len(clouds))]
        return out[0] if single else out
