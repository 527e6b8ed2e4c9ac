"""LRA inference: class scores of a batch of (one or two) token sequences with a trained classifier (the recipe's
evaluation and prediction)."""
from __future__ import annotations

import torch
from torch import nn


def class_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits [B, C] of a collated batch: tokens [B, L], mask [B, L] (True = real), and for Retrieval tokens2 and
    mask2, the second document of each pair."""
    return model(batch["tokens"], batch["mask"], batch.get("tokens2"), batch.get("mask2"))
