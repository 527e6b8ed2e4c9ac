"""The training loop every recipe shares.

One optimiser step = ``train.grad_accum`` micro-batches from :class:`EpochBatches`; AdamW/Adam with the configured
schedule; gradient clipping; bf16 autocast on CUDA (fp32 on CPU); optional ``torch.compile``; periodic validation
(mean loss + the recipe's evaluator) with early stopping; atomic checkpoints every ``save_every`` steps keeping the
newest ``keep_last``. ``--resume auto`` restores weights, optimiser, scheduler, every rank's RNG and the exact data
position, so a killed run finishes with the same weights as an uninterrupted one. Under ``torchrun`` the model is
wrapped in DistributedDataParallel and only rank 0 writes files.
"""
from __future__ import annotations

import contextlib
import math
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from lavo_zoo.config import save_config
from lavo_zoo.engine.checkpoint import (load_train_state, load_weights, read_config, read_meta, save_checkpoint,
                                        verify_weights)
from lavo_zoo.engine.data import EpochBatches
from lavo_zoo.engine.distributed import barrier, init_distributed, local_device, mean_across, shutdown
from lavo_zoo.engine.env import pick_device
from lavo_zoo.engine.logging import MetricsLog, Progress
from lavo_zoo.engine.optim import apply_schedule, build_optimizer, build_scheduler
from lavo_zoo.engine.run_dir import last_good_checkpoint, resume_changes, resume_source
from lavo_zoo.errors import CheckpointError, DataError, UsageError, ZooError
from lavo_zoo.recipes.base import Recipe, to_device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """This process's RNG states in types ``torch.load(weights_only=True)`` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Trainer:
    """Trains ``recipe``'s model with config ``cfg`` into ``out_dir`` (see the module docstring)."""

    def __init__(self, recipe: Recipe, cfg: Any, out_dir: Path, device: str | None = None,
                 resume: str | None = None) -> None:
        self.recipe, self.cfg, self.tc, self.out = recipe, cfg, cfg.train, Path(out_dir)
        self.ckpt_root = self.out / "checkpoints"
        base = pick_device(device)
        self.dist = init_distributed(base)
        self.device = local_device(base, self.dist)
        self.resume = resume
        if self.tc.grad_accum < 1 or self.tc.batch_size < 1 or self.tc.max_steps < 0:
            raise UsageError("train.batch_size and train.grad_accum must be >= 1 and train.max_steps >= 0")
        precision = self.tc.precision
        self.autocast_dtype = torch.bfloat16 if precision == "bf16" or (
            precision == "auto" and self.device.type == "cuda") else None
        self._val_loader: DataLoader | None = None
        self._val_missing = False

    # ------------------------------------------------------------------------------------------------ resume
    def _resume_path(self) -> Path | None:
        return resume_source(self.out, self.resume)

    def _recover_interrupted_save(self) -> None:
        """Undo what a process killed mid-save left behind (temporary dirs; a step swapped out but not back)."""
        if not self.ckpt_root.is_dir():
            return
        for p in self.ckpt_root.glob(".old-*"):
            final = self.ckpt_root / p.name[len(".old-"):].rsplit("-", 1)[0]
            if final.exists():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.rename(final)
        for p in self.ckpt_root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        for p in self.ckpt_root.glob(".last-*"):
            p.unlink()

    def _check_same_run(self, path: Path) -> None:
        self._resume_changes = resume_changes(read_config(path)[1], self.cfg, path)

    # -------------------------------------------------------------------------------------------------- data
    def _train_batches(self, ds: Dataset, plan: EpochBatches, epoch: int, offset: int
                       ) -> Iterator[tuple[int, int, Any]]:
        """(epoch, batches consumed in that epoch, batch) from position (epoch, offset) on, epoch after epoch."""
        while self.tc.max_epochs is None or epoch < self.tc.max_epochs:
            remaining = plan.epoch(epoch)[offset:]
            # Its own generator: a DataLoader iterator otherwise draws its base seed from the global RNG, which
            # would make the RNG stream depend on when an epoch's loader was created (and break exact resume).
            loader = DataLoader(ds, batch_sampler=remaining, collate_fn=self.recipe.collate,
                                num_workers=self.tc.num_workers,
                                generator=torch.Generator().manual_seed(self.tc.seed * 1_000_003 + epoch + 1))
            for batch in loader:
                offset += 1
                yield epoch, offset, batch
            epoch, offset = epoch + 1, 0

    def _validation_loader(self) -> DataLoader | None:
        if self._val_loader is None and not self._val_missing:
            try:
                ds = self.recipe.build_dataset(self.cfg, "validation")
            except DataError as e:
                self._val_missing = True
                self.progress.message(f"no validation split, periodic validation is off: {e}")
                return None
            self._val_loader = DataLoader(ds, batch_size=self.recipe.eval_batch_size(self.cfg), shuffle=False,
                                          collate_fn=self.recipe.collate, num_workers=self.tc.num_workers)
        return self._val_loader

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float]:
        """Mean training loss and the evaluator's metrics over up to ``eval_batches`` validation batches."""
        loader = self._validation_loader()
        if loader is None:
            return {}
        limit = self.tc.eval_batches or None
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            model.eval()
            losses = []
            with self._autocast():
                for i, batch in enumerate(loader):
                    if limit and i >= limit:
                        break
                    losses.append(float(self.recipe.training_loss(model, to_device(batch, self.device))[0]))
                evaluator = self.recipe.evaluate(model, self.cfg, "validation", self.device, max_batches=limit,
                                                 batches=iter(loader))
            model.train()
        metrics = {"loss": sum(losses) / max(1, len(losses))}
        for name, value in evaluator.compute().items():  # the evaluator's metrics, kept apart from the loss
            metrics[f"eval_{name}" if name in metrics else name] = float(value)
        return {k: mean_across(v, self.dist) for k, v in metrics.items()}

    # --------------------------------------------------------------------------------------------------- fit
    def fit(self) -> dict[str, float]:
        """Train until ``max_steps``, ``max_epochs`` or early stopping; returns the last validation metrics."""
        try:
            return self._fit()
        finally:
            shutdown(self.dist)

    def _fit(self) -> dict[str, float]:
        tc, main = self.tc, self.dist.is_main
        if main:
            self._recover_interrupted_save()
        barrier(self.dist)
        resume_from = self._resume_path()
        barrier(self.dist)  # every rank checks the run directory before rank 0 writes config.yaml into it

        seed_everything(tc.seed)
        model = self.recipe.build_model(self.cfg).to(self.device)
        if self.dist.enabled:
            torch.manual_seed(tc.seed + 7919 * self.dist.rank)  # distinct dropout per rank; init came from rank 0
        train_ds = self.recipe.build_dataset(self.cfg, "train")
        plan = EpochBatches(len(train_ds), tc.batch_size, tc.seed, self.dist.rank, self.dist.world_size)
        steps_per_epoch = max(1, len(plan) // tc.grad_accum)
        optimizer = build_optimizer(model, tc)
        scheduler = build_scheduler(optimizer, tc, steps_per_epoch)
        pos = {"step": 0, "epoch": 0, "offset": 0, "best_val_loss": math.inf, "bad_evals": 0}
        self._saved_step = 0

        if resume_from is not None:
            self._check_same_run(resume_from)
            verify_weights(resume_from, read_meta(resume_from))
            load_weights(model, resume_from)
            state = load_train_state(resume_from)
            if state.get("world_size", 1) != self.dist.world_size:
                raise CheckpointError(f"{resume_from} was written by {state.get('world_size')} process(es); "
                                      f"resume it with the same number (now {self.dist.world_size})")
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            apply_schedule(optimizer, scheduler, tc)  # a changed lr / schedule takes effect from here
            restore_rng(state["rng"][self.dist.rank])
            pos.update({k: state[k] for k in pos})
            self._saved_step = pos["step"]
        total = tc.max_steps if tc.max_epochs is None else min(tc.max_steps, tc.max_epochs * steps_per_epoch)
        self.progress = Progress(total, pos["step"], main, tc.log_every)
        if resume_from is not None:
            self.progress.message(f"resumed from {resume_from} at step {pos['step']}")
        elif self.resume == "auto":
            self.progress.message(f"--resume auto: no checkpoint in {self.ckpt_root}, starting from scratch")

        log = MetricsLog(self.out, main, tc.tensorboard)
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            save_config(self.cfg, self.out / "config.yaml")
            log.truncate_after(pos["step"])
            if resume_from is not None and self._resume_changes:
                log.log({"step": pos["step"], "split": "resume", "checkpoint": str(resume_from),
                         "changed": self._resume_changes})
        if resume_from is not None and self._resume_changes:
            self.progress.message("changed on resume: " + "; ".join(
                f"{k}: {c['from']!r} -> {c['to']!r}" for k, c in self._resume_changes.items()))
        train_model: torch.nn.Module = model
        if self.dist.enabled:
            train_model = DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda"
                                                  else None)
        if tc.compile:
            train_model = torch.compile(train_model)

        stream = self._train_batches(train_ds, plan, pos["epoch"], pos["offset"])
        window: list[float] = []
        val_metrics: dict[str, float] = {}
        t0 = time.time()
        model.train()
        while pos["step"] < tc.max_steps:
            optimizer.zero_grad(set_to_none=True)
            losses, extras = [], {}
            for micro in range(tc.grad_accum):
                try:
                    epoch, offset, batch = next(stream)
                except StopIteration:
                    break
                sync = (train_model.no_sync() if self.dist.enabled and micro < tc.grad_accum - 1
                        else contextlib.nullcontext())
                with sync:
                    with self._autocast():
                        loss, logs = self.recipe.training_loss(train_model, to_device(batch, self.device))
                    if not torch.isfinite(loss):
                        last = last_good_checkpoint(self.ckpt_root, pos["step"] + 1)
                        advice = (f" (resume from it with --resume {last} and a lower train.lr or a "
                                  "train.clip_grad_norm)" if last else "")
                        raise ZooError(f"the training loss is {float(loss.detach())} at step {pos['step'] + 1} (epoch "
                                       f"{epoch}); stopped without saving. Last good checkpoint: {last or 'none'}"
                                       f"{advice}. Lower train.lr, set train.clip_grad_norm, or check the data for "
                                       "bad values")
                    (loss / tc.grad_accum).backward()
                losses.append(float(loss.detach()))
                for k, v in logs.items():
                    extras[k] = extras.get(k, 0.0) + float(v) / tc.grad_accum
                pos["epoch"], pos["offset"] = epoch, offset
            if len(losses) < tc.grad_accum:  # the last epoch ran out: a partial step is not taken
                break
            grad_norm = (torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_grad_norm)
                         if tc.clip_grad_norm > 0 else None)
            optimizer.step()
            scheduler.step()
            pos["step"] += 1
            step = pos["step"]
            window.append(sum(losses) / len(losses))
            self.progress.update(step, {"loss": window[-1], "lr": scheduler.get_last_lr()[0]})

            if step % tc.log_every == 0 or step == tc.max_steps:
                record = {"step": step, "split": "train", "epoch": pos["epoch"],
                          "loss": mean_across(sum(window) / len(window), self.dist),
                          "lr": scheduler.get_last_lr()[0], "time": round(time.time() - t0, 3), **extras}
                if grad_norm is not None:
                    record["grad_norm"] = float(grad_norm)
                log.log(record)
                window = []

            stop = False
            end_of_epoch = tc.eval_per_epoch and step % steps_per_epoch == 0
            if (tc.eval_every and step % tc.eval_every == 0) or end_of_epoch or (
                    step == tc.max_steps and (tc.eval_every or tc.eval_per_epoch)):
                val_metrics = self.validate(model)
                if val_metrics:
                    log.log({"step": step, "split": "validation", "epoch": pos["epoch"], **val_metrics})
                    self.progress.message(f"step {step} validation: " +
                                          " ".join(f"{k}={v:.4g}" for k, v in val_metrics.items()))
                    if val_metrics["loss"] < pos["best_val_loss"]:
                        pos["best_val_loss"], pos["bad_evals"] = val_metrics["loss"], 0
                        if tc.save_best and self.dist.is_main:
                            save_checkpoint(self.ckpt_root, step, model, self.cfg, self.recipe.name,
                                            metrics=val_metrics, name="best")
                    else:
                        pos["bad_evals"] += 1
                        stop = 0 < tc.early_stopping_patience <= pos["bad_evals"]
                        if stop:
                            self.progress.message(f"early stopping: no better validation loss in "
                                                  f"{pos['bad_evals']} evaluations")
            if step % tc.save_every == 0 or step == tc.max_steps or stop:
                self._save(model, optimizer, scheduler, pos, val_metrics)
            if stop:
                break
        if pos["step"] != self._saved_step:  # the epochs ran out before max_steps
            self._save(model, optimizer, scheduler, pos, val_metrics)
        self.progress.close()
        log.close()
        return val_metrics

    def _save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, pos: dict[str, Any],
              metrics: dict[str, float]) -> None:
        rng = capture_rng()
        if self.dist.enabled:
            gathered: list[Any] = [None] * self.dist.world_size
            dist.all_gather_object(gathered, rng)
        else:
            gathered = [rng]
        if self.dist.is_main:
            state = {**pos, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                     "rng": gathered, "world_size": self.dist.world_size}
            path = save_checkpoint(self.ckpt_root, pos["step"], model, self.cfg, self.recipe.name, metrics=metrics,
                                   train_state=state, keep_last=self.tc.keep_last)
            self.progress.message(f"saved {path}")
        self._saved_step = pos["step"]
        barrier(self.dist)
