"""The ``recall`` recipe: MQAR (Zoology), selective copying (Mamba) and induction heads with a small decoder over any
causal attention, noncausal MQAR with an encoder over any noncausal one, cross MQAR with an encoder-decoder over any
cross attention; cross-entropy and accuracy at the answer positions only, per task, key-to-query distance and
position of the recalled pair."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from lavo_zoo.engine.recipe import Recipe, register_recipe
from lavo_zoo.engine.run_config import RunConfig, TrainConfig
from lavo_zoo.evaluators import Evaluator, build_evaluator
from lavo_zoo.evaluators.classification import recall_groups
from lavo_zoo.recipes.recall.builtin import BuiltinRecall
from lavo_zoo.recipes.recall.data import IGNORE, TASKS, DataConfig, cached_examples, split_file
from lavo_zoo.recipes.recall.infer import Recaller, query_logits
from lavo_zoo.recipes.recall.model import ModelConfig, build_recall_model, check_task_model


def paper_train_config() -> TrainConfig:
    """Zoology's optimisation (its TrainConfig and the MQAR figure's settings): AdamW, lr 1e-3 (the figure sweeps
    1e-4 .. 1e-2), weight decay 0.1, cosine to 0 over 64 epochs, batch 512 (its size at 64 and 128 tokens), no
    clipping, validation on the whole split after every epoch. Zoology stops early at 99% validation accuracy; here
    the run keeps the checkpoint with the lowest validation loss."""
    return TrainConfig(optimizer="adamw", lr=1e-3, betas=[0.9, 0.999], weight_decay=0.1, schedule="cosine",
                       min_lr=0.0, max_epochs=64, max_steps=1_000_000, batch_size=512, clip_grad_norm=0.0,
                       eval_every=0, eval_per_epoch=True, eval_batches=0, save_every=1000, keep_last=1)


@dataclass
class RecallConfig(RunConfig):
    recipe: str = "recall"
    train: TrainConfig = field(default_factory=paper_train_config)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def __post_init__(self) -> None:
        """The task fixes the model, so ``model.attention`` (and ``model.binding``) are checked against the task's
        pattern here."""
        check_task_model(self.model, self.data.pattern, self.data.task)


@register_recipe("recall")
class RecallRecipe(Recipe):
    """Batches are dicts: tokens [B, T], targets [B, T] (the answer at each query, -100 elsewhere), distances [B, T]
    (the key-to-query distance at each query), positions [B, T] (the position of each query's source), task [B] (an
    index into ``TASKS``), and context [B, S] (the source) in cross recall."""

    description = ("Recall diagnostics: MQAR (Zoology), selective copying, induction heads; noncausal and cross MQAR "
                   "(accuracy by distance and position)")
    config_class = RecallConfig
    evaluator = "accuracy"  # accuracy, accuracy@<task>, accuracy@dist:<lo>-<hi>
    tiny_config = "recall/tiny-lavo"
    builtin = BuiltinRecall()
    task = ("other", "Associative recall diagnostics")
    limits = ("A probe of what an attention can recall on synthetic token sequences (one task, one length, one "
              "vocabulary): it answers nothing else and is no language model.")
    predictor = Recaller

    def resolve(self, cfg: RecallConfig) -> RecallConfig:
        """``model.vocab_size`` from ``data.vocab_size``."""
        cfg.model.vocab_size = cfg.data.vocab_size
        return cfg

    def build_model(self, cfg: RecallConfig) -> nn.Module:
        """The model of the task's pattern (``data.task``): a decoder, an encoder or an encoder-decoder."""
        return build_recall_model(self.resolve(cfg).model, cfg.data.pattern)

    def build_dataset(self, cfg: RecallConfig, split: str) -> Dataset:
        path = split_file(self.data_path(cfg.data), self.check_split(split))
        return cached_examples(path, self.cache_dir(cfg.data), cfg.data.vocab_size, cfg.data.seq_len,
                               pattern=cfg.data.pattern, target_len=cfg.data.target_len)

    def training_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits, answers = query_logits(model, batch)  # [N, V], [N]
        accuracy = float((logits.argmax(-1) == answers).float().mean())
        return F.cross_entropy(logits.float(), answers), {"accuracy": accuracy}

    def validation_step(self, model: nn.Module, batch: dict[str, torch.Tensor]
                        ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(cross-entropy at the answer positions, predicted ids [N], the evaluator's targets) in one pass."""
        logits, answers = query_logits(model, batch)  # [N, V], [N]
        return F.cross_entropy(logits.float(), answers), logits.argmax(-1), self._targets(batch, answers)

    def predict(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """(predicted ids [N], {"ids": answers [N], "groups": (task, distance bucket, position bucket) of each}) at
        the queries."""
        logits, answers = query_logits(model, batch)
        return logits.argmax(-1), self._targets(batch, answers)

    @staticmethod
    def _targets(batch: dict[str, torch.Tensor], answers: torch.Tensor) -> dict:
        select = batch["targets"] != IGNORE  # [B, T]
        tasks = batch["task"][:, None].expand_as(select)[select].tolist()  # [N]
        distances, positions = batch["distances"][select].tolist(), batch["positions"][select].tolist()  # [N]
        return {"ids": answers, "groups": [recall_groups(TASKS[t], d, p) for t, d, p in zip(tasks, distances,
                                                                                           positions)]}

    def build_evaluator(self, cfg: RecallConfig) -> Evaluator:
        """Accuracy without the confusion matrix (a vocabulary of thousands of classes)."""
        return build_evaluator(self.evaluator, confusion=False)
