"""Optimisers and the learning-rate schedules the paper's recipes use, built from ``TrainConfig``."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from lavo_zoo.engine.run_config import TrainConfig


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (decoupled decay) or Adam; weight decay skips biases, norms and other 1-D parameters, and any parameter
    whose attribute ``no_weight_decay`` is true (e.g. LAVO's bases with ``bases_decay=False``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    exempt = [p.dim() < 2 or getattr(p, "no_weight_decay", False) for p in params]
    decay = [p for p, e in zip(params, exempt) if not e]
    no_decay = [p for p, e in zip(params, exempt) if e]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)


def lr_factor(cfg: TrainConfig, steps_per_epoch: int) -> Callable[[int], float]:
    """step -> multiplier of ``cfg.lr`` (``step`` counts completed optimiser steps, from 0)."""
    base, warm = cfg.lr, cfg.warmup_steps

    def warmup(step: int) -> float | None:
        if warm > 0 and step < warm:
            return (cfg.warmup_init_lr + (base - cfg.warmup_init_lr) * (step + 1) / warm) / base
        return None

    def factor(step: int) -> float:
        w = warmup(step)
        if w is not None:
            return w
        if cfg.schedule == "constant":
            return 1.0
        if cfg.schedule == "inverse_sqrt":  # fairseq: lr * sqrt(warmup) / sqrt(step) after warmup
            return math.sqrt(max(warm, 1)) / math.sqrt(max(step + 1, 1)) if warm else 1.0 / math.sqrt(step + 1)
        if cfg.schedule == "cosine":
            progress = min(1.0, (step - warm) / max(1, cfg.max_steps - warm))
            return (cfg.min_lr + (base - cfg.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))) / base
        if cfg.schedule == "exponential":  # per epoch, as Informer's "type1" (halve every epoch with gamma 0.5)
            return cfg.decay_gamma ** (step // max(1, steps_per_epoch))
        if cfg.schedule == "step":
            return cfg.decay_gamma ** (step // max(1, cfg.decay_steps))
        raise ValueError(f"unknown schedule {cfg.schedule}")

    return factor


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                    steps_per_epoch: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning-rate schedule of ``cfg`` (``schedule``, warm-up, decay; :func:`lr_factor`) as a LambdaLR stepped
    once per optimiser step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg, steps_per_epoch))


def apply_schedule(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR,
                   cfg: TrainConfig) -> None:
    """After loading a saved optimiser and scheduler: make ``cfg.lr`` and ``cfg``'s schedule (already in the
    scheduler's lambda) the ones in force, from the restored step on. With the saved settings unchanged this
    reproduces the saved learning rates exactly (the same ``base * factor(step)`` as LambdaLR)."""
    scheduler.base_lrs = [cfg.lr for _ in optimizer.param_groups]
    for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas):
        group["initial_lr"] = cfg.lr
        group["lr"] = cfg.lr * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
