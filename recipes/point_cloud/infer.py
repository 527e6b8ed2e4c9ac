"""Point-cloud completion inference: a trained PoinTr completes partial clouds (``lavo-zoo complete`` and the
recipe's evaluation call :func:`complete_clouds`)."""
from __future__ import annotations

import torch
from torch import nn

from lavo_zoo.evaluators.chamfer import PointClouds


def complete_clouds(model: nn.Module, partial: torch.Tensor, partial_mask: torch.Tensor
                    ) -> tuple[torch.Tensor, PointClouds]:
    """(coarse [B, Mc, 3], dense PointClouds whose mask drops the partial's zero padding) for partial [B, N, 3]."""
    coarse, dense = model(partial)  # [B, Mc, 3], [B, Md + N, 3]
    folded = dense.shape[1] - partial.shape[1]
    mask = torch.cat([partial_mask.new_ones(partial.shape[0], folded), partial_mask], dim=1)  # [B, Md + N]
    return coarse, PointClouds(dense, mask)


