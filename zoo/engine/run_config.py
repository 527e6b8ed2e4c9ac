"""The run schema every recipe's config starts from: the recipe's name, the shared trainer's settings (``train:``)
and the shared evaluation settings (``eval:``). A recipe's config is a subclass of :class:`RunConfig` with its own
``model:`` and ``data:`` sections (docs/architecture.md, "The recipe contract"); :mod:`lavo_zoo.config` reads,
merges and validates any such dataclass without knowing what a run is."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from lavo_zoo.config import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Range
from lavo_zoo.errors import ConfigError


@dataclass
class TrainConfig:
    """The shared training engine's settings (every recipe has them under ``train:``)."""

    optimizer: Literal["adamw", "adam"] = "adamw"
    lr: PositiveFloat = 5e-4
    betas: list[Annotated[float, Range(ge=0, lt=1)]] = field(default_factory=lambda: [0.9, 0.98])
    eps: PositiveFloat = 1e-8
    weight_decay: NonNegativeFloat = 0.01
    # constant | inverse_sqrt (fairseq: linear warmup, then lr*sqrt(warmup/step)) | cosine (warmup, then to min_lr)
    # | exponential (lr * decay_gamma**epoch) | step (lr * decay_gamma**(step // decay_steps))
    schedule: Literal["constant", "inverse_sqrt", "cosine", "exponential", "step"] = "constant"
    warmup_steps: NonNegativeInt = 0
    warmup_init_lr: NonNegativeFloat = 0.0
    min_lr: NonNegativeFloat = 0.0
    decay_gamma: PositiveFloat = 0.5
    decay_steps: PositiveInt = 1000
    max_steps: PositiveInt = 1000
    max_epochs: PositiveInt | None = None
    batch_size: PositiveInt = 8
    grad_accum: PositiveInt = 1
    clip_grad_norm: NonNegativeFloat = 1.0  # 0 disables clipping
    seed: NonNegativeInt = 1
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    compile: bool = False
    log_every: PositiveInt = 10
    eval_every: NonNegativeInt = 500  # validate every N steps (0 = not by steps)
    eval_per_epoch: bool = False  # also validate at the end of every epoch
    eval_batches: NonNegativeInt = 20  # validation batches per periodic evaluation (0 = the whole split)
    early_stopping_patience: NonNegativeInt = 0  # stop after this many evaluations without a lower validation loss
    save_best: bool = True  # keep checkpoints/best: the weights with the lowest validation loss so far
    save_every: PositiveInt = 500
    keep_last: NonNegativeInt = 3  # step-N checkpoints kept (0 = all)
    tensorboard: bool = False
    num_workers: NonNegativeInt = 0

    def __post_init__(self) -> None:
        if len(self.betas) != 2:  # Adam's two decay rates; one more or less failed only at the first step
            raise ConfigError(f"config key 'train.betas' must hold two numbers (Adam's beta1 and beta2), e.g. "
                              f"[0.9, 0.98], got {len(self.betas)}: {self.betas}")
        if self.schedule == "cosine" and self.min_lr > self.lr:  # the cosine would climb from lr to min_lr
            raise ConfigError(f"config key 'train.min_lr' ({self.min_lr:g}) is above train.lr ({self.lr:g}): the "
                              "cosine schedule decays from train.lr to train.min_lr; lower min_lr (0 decays to zero)")


@dataclass
class EvalConfig:
    """Evaluation settings every recipe shares (a recipe that needs more subclasses this)."""

    batch_size: NonNegativeInt = 0  # examples per evaluation batch (0: train.batch_size)


@dataclass
class RunConfig:
    """The top level every recipe config shares: the recipe's name, the training and the evaluation settings."""

    recipe: str = ""
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
