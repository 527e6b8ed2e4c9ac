"""The ``point_cloud`` recipe: PoinTr completing partial scans (PCN, or the built-in procedural shapes), trained with
CD-L1(coarse) + CD-L1(dense) and scored with PoinTr's Chamfer distances and F-score per category."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lavo_zoo.engine.recipe import Recipe, register_recipe
from lavo_zoo.engine.run_config import EvalConfig, RunConfig, TrainConfig
from lavo_zoo.evaluators.chamfer import PointClouds, chamfer_l1
from lavo_zoo.nn.points import nearest_sq_distances
from lavo_zoo.recipes.point_cloud.builtin import BuiltinShapes
from lavo_zoo.recipes.point_cloud.data import CompletionDataset, DataConfig
from lavo_zoo.recipes.point_cloud.infer import Completer, complete_clouds
from lavo_zoo.recipes.point_cloud.model import ModelConfig, PoinTr


def paper_train_config() -> TrainConfig:
    """PoinTr on PCN: AdamW lr 5e-4, weight decay 5e-4, lr x0.9 every 21 epochs, batch 48, 300 epochs (PCN's 28,974
    training models make 603 steps per epoch). The reference's floor of 0.02 x lr is never reached in 300 epochs
    (0.9^14 = 0.23)."""
    return TrainConfig(optimizer="adamw", lr=5e-4, betas=[0.9, 0.999], weight_decay=5e-4, schedule="step",
                       decay_gamma=0.9, decay_steps=21 * 603, max_steps=300 * 603, batch_size=48, clip_grad_norm=0.0,
                       eval_every=5 * 603, eval_batches=0, save_every=603, log_every=50)


@dataclass
class PointCloudConfig(RunConfig):
    recipe: str = "point_cloud"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(batch_size=8))  # 16,384-point clouds: small batches


@register_recipe("point_cloud")
class PointCloudRecipe(Recipe):
    """PoinTr point-cloud completion; batches are dicts of partial, partial_mask, gt, category, model_id."""

    description = "PoinTr point-cloud completion (CD-L1, CD-L2, F-Score@1%)"
    config_class = PointCloudConfig
    tiny_config = "point_cloud/tiny-lavo"
    evaluator = "chamfer"
    builtin = BuiltinShapes()
    task = ("point-cloud-completion", "Point cloud completion")
    limits = ("It completes partial clouds of the categories and the point density it was trained on; other "
              "categories or real scans with other noise are outside what it learnt.")
    predictor = Completer

    def build_model(self, cfg: PointCloudConfig) -> PoinTr:
        return PoinTr(cfg.model)

    def build_dataset(self, cfg: PointCloudConfig, split: str) -> CompletionDataset:
        return CompletionDataset(self.data_path(cfg.data), self.check_split(split), cfg.data)

    def training_loss(self, model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """CD-L1(coarse, gt) + CD-L1(dense, gt), each averaged over the batch (PoinTr's loss, padding included)."""
        coarse, dense = model(batch["partial"])
        return self._loss(coarse, dense, batch["gt"])

    @staticmethod
    def _loss(coarse: torch.Tensor, dense: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        loss_coarse = chamfer_l1(*nearest_sq_distances(coarse.float(), gt)).mean()
        loss_dense = chamfer_l1(*nearest_sq_distances(dense.float(), gt)).mean()
        return loss_coarse + loss_dense, {"cd_l1_coarse": float(loss_coarse.detach()) * 1000,
                                          "cd_l1_dense": float(loss_dense.detach()) * 1000}

    def predict(self, model: nn.Module, batch: dict[str, Any]) -> tuple[PointClouds, PointClouds]:
        """(dense completion without the partial's zero padding, ground truth with categories)."""
        _, dense = complete_clouds(model, batch["partial"], batch["partial_mask"])
        return dense, PointClouds(batch["gt"], categories=list(batch["category"]))

    def validation_step(self, model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, PointClouds, PointClouds]:
        """(training loss, predictions, targets) from one forward pass."""
        coarse, dense = complete_clouds(model, batch["partial"], batch["partial_mask"])
        loss, _ = self._loss(coarse, dense.points, batch["gt"])
        return loss, dense, PointClouds(batch["gt"], categories=list(batch["category"]))
