"""Point-cloud completion inference: :func:`complete_clouds` (the recipe's evaluation) and :class:`Completer`, what
``lavo_zoo.load`` returns for a ``point_cloud`` checkpoint (``lavo-zoo complete`` calls it)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from lavo_zoo import limits
from lavo_zoo.engine.predictor import Predictor, as_batch
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


def is_cloud(value: Any) -> bool:
    """Whether ``value`` is one cloud (a numpy array [N, 3]), as opposed to a list of them."""
    return isinstance(value, np.ndarray) and value.ndim == 2


TRAINED_SCALE = "clouds normalised as PCN's, coordinates about [-1, 1]"  # what the models are trained on


class Completer(Predictor):
    """A trained PoinTr: ``complete`` turns partial clouds into dense ones (``lavo_zoo.load`` returns it for a
    ``point_cloud`` checkpoint)."""

    def memory_estimate(self, clouds: int) -> int:
        """Estimated bytes of completing ``clouds`` clouds at once: per cloud the grouper's edge features over the
        input points and the folding of the dense points, the largest activations of PoinTr."""
        m = self.cfg.model
        grouper = self.cfg.data.input_points * m.grouper_k * 256 * 4  # [N, k, C] edge features, C <= 256
        folding = m.num_pred * (m.global_dim + m.fold_hidden + m.embed_dim) * 4 * 2
        return clouds * (grouper + folding)

    @torch.no_grad()
    def complete(self, points: np.ndarray | list[np.ndarray], seed: int = 0, batch_size: int = 8
                 ) -> np.ndarray | list[np.ndarray]:
        """Complete partial point clouds.

        Args:
            points: a partial cloud, a numpy array [N, 3] (coordinates normalised as PCN's, y up), or a list of
                them. A cloud with more points than the model takes (``data.input_points``) is subsampled at
                random, as PoinTr's RandomSamplePoints.
            seed: seed of that subsampling.
            batch_size: clouds completed at once.

        Returns:
            The dense completion [M, 3] (float32), or a list of them for a list.

        Raises:
            InputError: ``points`` is not a cloud or a list of them, a cloud is not finite points [N, 3] with
                N >= 1, an option is outside its range, a batch would not fit in memory, or a completion is not
                finite (a cloud far outside the scale the model was trained on).
        """
        clouds, single = as_batch(points, is_cloud, "points", "a cloud (a numpy array [N, 3])")
        seed, batch_size = limits.SEED.check(seed), limits.BATCH_SIZE.check(batch_size)
        for i, cloud in enumerate(clouds):
            if cloud.shape[1] != 3 or len(cloud) == 0 or not np.issubdtype(cloud.dtype, np.number) or \
                    np.iscomplexobj(cloud) or not np.isfinite(cloud).all():
                raise InputError(f"cloud {i}: expected finite points [N, 3] with N >= 1, got shape "
                                 f"{list(cloud.shape)} of {cloud.dtype}")
            if np.abs(cloud).max() > np.finfo(np.float32).max:
                raise InputError(f"cloud {i}: its coordinates reach {np.abs(cloud).max():.3g}, beyond float32; "
                                 "normalise the cloud as PCN's (about [-1, 1])")
        for i, cloud in enumerate(clouds):
            self.warn_far_outside(cloud.reshape(-1, 1), 0.0, 1.0, f"cloud {i}", [TRAINED_SCALE])
        if clouds:
            self.check_fits(self.memory_estimate(min(batch_size, len(clouds))),
                            f"completing batches of {min(batch_size, len(clouds))} clouds", "lower batch_size")
        rng = np.random.default_rng(seed)
        sampled = [random_sample_points(c.astype(np.float32), self.cfg.data.input_points, rng) for c in clouds]
        out = []
        for start in range(0, len(clouds), batch_size):
            chunk = sampled[start:start + batch_size]
            partial = torch.from_numpy(np.stack([s[0] for s in chunk])).to(self.device)  # [b, P, 3]
            mask = torch.from_numpy(np.stack([s[1] for s in chunk])).to(self.device)     # [b, P]
            _, dense = complete_clouds(self.model, partial, mask)
            for j in range(len(chunk)):
                cloud = dense.cloud(j).float().cpu().numpy()  # [M, 3]
                scale = float(np.abs(clouds[start + j]).max())
                self.check_finite(cloud, f"cloud {start + j} (its coordinates reach {scale:.3g}; the model was "
                                         f"trained on {TRAINED_SCALE})")
                out.append(cloud)
        return out[0] if single else out
