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
import dataclasses
import math
import random
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from lavo_zoo.atomic import write_file
from lavo_zoo.config import config_yaml
from lavo_zoo.engine.checkpoint_io import (
    CONFIG,
    WEIGHTS,
    load_train_state,
    load_weights,
    read_config,
    read_meta,
    save_checkpoint,
    verify_checkpoint,
)
from lavo_zoo.engine.data import EpochBatches, epoch_steps
from lavo_zoo.engine.distributed import barrier, init_distributed, local_device, mean_across, shutdown
from lavo_zoo.engine.env import machine, pick_device
from lavo_zoo.engine.interrupt import Interrupts, TrainingInterrupted, deferred_interrupts
from lavo_zoo.engine.logging import MetricsLog, Progress, phase
from lavo_zoo.engine.memory import check_model_fits, is_out_of_memory
from lavo_zoo.engine.optim import apply_schedule, build_optimizer, build_scheduler
from lavo_zoo.engine.precision import autocast, autocast_dtype
from lavo_zoo.engine.recipe import Recipe, to_device
from lavo_zoo.engine.run_dir import (
    RunLock,
    check_run_length,
    last_good_checkpoint,
    recover_run_dir,
    resume_changes,
    resume_source,
    run_total,
)
from lavo_zoo.errors import CheckpointError, InputError, MissingSplit, UsageError, ZooError
from lavo_zoo.outputs import check_folder_writable


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's random generators with ``seed``."""
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
    """Restore the random generators' states that :func:`capture_rng` captured (CUDA's where available)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainingState:
    """Where training stands; saved in every checkpoint's train_state.pt (with the optimiser, schedule and RNG)."""

    step: int = 0  # optimiser steps taken
    epoch: int = 0  # the epoch the next batch comes from
    offset: int = 0  # batches of that epoch already consumed (the exact data position)
    best_val_loss: float = math.inf
    bad_evals: int = 0  # validations in a row without a lower loss (early stopping)


@dataclass
class _Run:
    """What one call of :meth:`Trainer.fit` works with."""

    model: torch.nn.Module  # the plain model (weights are saved from it)
    train_model: torch.nn.Module  # the model as trained: DDP- and/or torch.compile-wrapped
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_ds: Dataset
    plan: EpochBatches
    steps_per_epoch: int
    total: int  # the step this run ends at (train.max_steps, or fewer where train.max_epochs ends it first)
    state: TrainingState
    progress: Progress  # the progress bar / log lines of the run
    saved_step: int = 0  # the step of the newest checkpoint of this run (or of the one it resumed from)


class StepObserver(Protocol):
    """Told when each optimiser step of a run starts and ends (``lavo-zoo compare`` measures steps with it)."""

    def step_started(self, step: int) -> None:
        """Step ``step`` (1-based) is about to load its micro-batches."""

    def step_ended(self, step: int) -> None:
        """Step ``step`` has updated the weights (before its logging, validation and checkpoint)."""


class Trainer:
    """Trains ``recipe``'s model with config ``cfg`` into ``out_dir`` (see the module docstring)."""

    def __init__(self, recipe: Recipe, cfg: Any, out_dir: Path, device: str | None = None,
                 resume: str | None = None, command: str | None = None,
                 step_observer: StepObserver | None = None) -> None:
        """A trainer for one run; :meth:`fit` trains. The config is resolved here (:meth:`Recipe.resolve`: the sizes
        that come from the data), so config.yaml and every checkpoint hold the complete config.

        Args:
            recipe: the recipe whose model, data and loss are trained.
            cfg: the recipe's validated config (``resolve_config``); its ``train:`` section sets the run.
            out_dir: the run folder (config.yaml, metrics.jsonl, checkpoints/); an earlier run in it is refused
                unless ``resume`` continues it.
            device: ``cpu``, ``cuda`` or ``cuda:N`` (default: CUDA when available); under ``torchrun`` each process
                takes its own GPU.
            resume: ``auto`` (the newest checkpoint of ``out_dir``, or a fresh start when there is none), a
                checkpoint folder, or None (a fresh run).
            command: the command line that runs this training, recorded in every checkpoint's meta.json (for model
                cards); by default the process's own when it is ``lavo-zoo``.
            step_observer: told when each optimiser step starts and ends (validation and checkpoints are outside).

        Raises:
            UsageError: a batch size or gradient accumulation below 1, or a device this machine does not have.
        """
        # data-derived model sizes, resolved once here so config.yaml and every checkpoint hold them
        self.recipe, self.cfg, self.tc, self.out = recipe, recipe.resolve(cfg), cfg.train, Path(out_dir)
        self.ckpt_root = self.out / "checkpoints"
        base = pick_device(device)
        self.dist = init_distributed(base)
        self.device = local_device(base, self.dist)
        self.resume = resume
        if self.tc.grad_accum < 1 or self.tc.batch_size < 1 or self.tc.max_steps < 0:
            raise UsageError("train.batch_size and train.grad_accum must be >= 1 and train.max_steps >= 0")
        self.autocast_dtype = autocast_dtype(self.tc.precision, self.device)
        self._val_loader: DataLoader | None = None
        self._val_missing = False
        self._resume_changes: dict[str, dict[str, Any]] = {}  # changeable settings a resume changed
        if command is None and Path(sys.argv[0]).name == "lavo-zoo":
            command = shlex.join(["lavo-zoo", *sys.argv[1:]])
        self.provenance = {"command": command, "machine": machine(self.device), "seed": self.tc.seed}
        self.step_observer = step_observer

    # ------------------------------------------------------------------------------------------------ resume
    def _resume_path(self) -> Path | None:
        return resume_source(self.out, self.resume)

    def _check_same_run(self, path: Path) -> None:
        """Refuse a resume whose model/data differ; remember the changeable settings that did change."""
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

    def _validation_loader(self, say: Callable[[str], None]) -> DataLoader | None:
        if self._val_loader is None and not self._val_missing:
            try:
                with phase("preparing the validation split", self.dist.is_main, say):
                    ds = self.recipe.build_dataset(self.cfg, "validation")
            except MissingSplit as e:  # absent; a malformed one stops the run (a DataError)
                self._val_missing = True
                if self.dist.is_main:
                    say(f"no validation split, periodic validation is off: {e}")
                return None
            self._val_loader = DataLoader(ds, batch_size=self.recipe.eval_batch_size(self.cfg), shuffle=False,
                                          collate_fn=self.recipe.collate, num_workers=self.tc.num_workers)
        return self._val_loader

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.autocast_dtype, self.device)

    @torch.no_grad()
    def validate(self, model: torch.nn.Module, say: Callable[[str], None] | None = None) -> dict[str, float]:
        """Mean training loss and the evaluator's metrics over up to ``eval_batches`` validation batches.

        Args:
            model: the model to validate (put back in training mode after).
            say: prints a line about preparing the split (default: to stderr; a run's progress while it trains).

        Returns:
            ``{"loss": mean loss, <metric>: value, ...}`` averaged across ranks; empty when there is no validation
            split.
        """
        loader = self._validation_loader(say or (lambda line: print(line, file=sys.stderr, flush=True)))
        if loader is None:
            return {}
        limit = self.tc.eval_batches or None
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            model.eval()
            losses = []
            evaluator = self.recipe.build_evaluator(self.cfg)
            for i, batch in enumerate(loader):
                if limit and i >= limit:
                    break
                with self._autocast():  # the model in training's precision, the scores in full precision
                    loss, predictions, targets = self.recipe.validation_step(model, to_device(batch, self.device))
                losses.append(float(loss))
                evaluator.update(predictions, targets)
            model.train()
        metrics = {"loss": sum(losses) / max(1, len(losses))}
        for name, value in evaluator.compute().items():  # the evaluator's metrics, kept apart from the loss
            metrics[f"eval_{name}" if name in metrics else name] = float(value)
        return {k: mean_across(v, self.dist) for k, v in metrics.items()}

    # --------------------------------------------------------------------------------------------------- fit
    def fit(self) -> dict[str, float]:
        """Train until ``max_steps``, ``max_epochs`` or early stopping; returns the last validation metrics. The run
        directory is locked for the whole run (rank 0): a second process training into it is refused."""
        check_folder_writable(self.out)  # a read-only mount or another user's folder: refused before any work
        created, lock = not self.out.exists(), None
        try:
            lock = RunLock(self.out).acquire() if self.dist.is_main else None
            return self._fit()
        finally:
            if lock is not None:
                lock.release()
            shutdown(self.dist)
            if created and self.dist.is_main and self.out.is_dir() and not any(self.out.iterdir()):
                self.out.rmdir()  # refused before anything was written: no empty run folder is left behind

    def _fit(self) -> dict[str, float]:
        """The run, step by step: set up (fresh or resumed), then optimiser steps with logging, validation and
        checkpoints until a stop condition, then a final checkpoint if the last step was not saved."""
        resume_from = self._prepare_run_dir()
        run = self._set_up(resume_from)
        tc, state = self.tc, run.state
        if state.step >= run.total:  # a resumed run that already reached its end: nothing is trained or written
            run.progress.message(f"nothing to train: {resume_from} is at step {state.step}, where this run ends "
                                 f"({self._length()}); raise --max-steps (train.max_steps) to train further")
            run.progress.close()
            return {}
        if self.dist.is_main:
            write_file(self.out / "config.yaml", config_yaml(self.cfg), overwrite=True)
        stream = self._train_batches(run.train_ds, run.plan, state.epoch, state.offset)
        log = MetricsLog(self.out, self.dist.is_main, tc.tensorboard)
        if self.dist.is_main:
            log.truncate_after(state.step)
            if resume_from is not None and self._resume_changes:
                log.log({"step": state.step, "split": "resume", "checkpoint": str(resume_from),
                         "changed": self._resume_changes})
        run.model.train()
        try:
            with deferred_interrupts(enabled=not self.dist.enabled) as interrupts:
                val_metrics = self._steps(run, stream, log, interrupts)
        finally:
            log.close()
        run.progress.close()
        return val_metrics

    def _steps(self, run: _Run, stream: Iterator[Any], log: MetricsLog, interrupts: Interrupts) -> dict[str, float]:
        """Optimiser steps until a stop condition; a SIGINT / SIGTERM (``interrupts``) ends the step in flight, saves
        a resumable checkpoint and raises :class:`TrainingInterrupted`."""
        tc, state = self.tc, run.state
        window: list[float] = []
        val_metrics: dict[str, float] = {}
        t0 = time.time()
        while state.step < tc.max_steps:
            if interrupts.requested is not None:
                self._stop_interrupted(run, val_metrics, interrupts)
            if self.step_observer is not None:
                self.step_observer.step_started(state.step + 1)
            try:
                step_out = self._optimizer_step(run, stream)
            except (MemoryError, RuntimeError) as e:  # torch's OutOfMemoryError is a RuntimeError
                if not is_out_of_memory(e):
                    raise
                raise InputError(self._out_of_memory(state.step + 1, e)) from None
            if step_out is None:  # the last epoch ran out: a partial step is not taken
                break
            if self.step_observer is not None:
                self.step_observer.step_ended(state.step)
            loss, extras, grad_norm = step_out
            window.append(loss)
            run.progress.update(state.step, {"loss": loss, "lr": run.scheduler.get_last_lr()[0]})
            if state.step % tc.log_every == 0 or state.step == tc.max_steps:
                self._log_train(log, run, window, extras, grad_norm, time.time() - t0)
                window = []
            stop = False
            if self._validation_due(state.step, run.steps_per_epoch):
                val_metrics = self.validate(run.model, run.progress.message)
                stop = self._after_validation(log, run, val_metrics) if val_metrics else False
            if state.step % tc.save_every == 0 or state.step == tc.max_steps or stop:
                self._save(run, val_metrics)
            if stop:
                break
        if state.step != run.saved_step:  # the epochs ran out before max_steps
            self._save(run, val_metrics)
        return val_metrics

    def _out_of_memory(self, step: int, error: BaseException) -> str:
        """What a step that ran out of memory says: which step, the batch it held, and what to lower (the checks
        before the run, ``--dry-run`` included, count the parameters and the optimiser's state, not a step's
        activations)."""
        tc = self.tc
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        keep = (f" (train.batch_size={tc.batch_size // 2} train.grad_accum={tc.grad_accum * 2} keeps the effective "
                f"batch of {tc.batch_size * tc.grad_accum})" if tc.batch_size > 1 else "")
        return (f"step {step} ran out of memory on {self.device} ({first}): its batch of {tc.batch_size} examples "
                f"does not fit with this model. Lower train.batch_size{keep}, the sequence length or the model's "
                "size; the checks before a run (--dry-run's too) count the parameters and the optimiser's state, not "
                "a step's activations")

    def _stop_interrupted(self, run: _Run, val_metrics: dict[str, float], interrupts: Interrupts) -> None:
        """Save the step reached (unless just saved) and stop with a message naming the command that continues."""
        state = run.state
        if state.step != run.saved_step and state.step > 0:
            self._save(run, val_metrics)
        if state.step == 0:
            advice = "nothing was trained yet; run the same command again"
        else:
            advice = (f"saved {self.ckpt_root / f'step-{state.step}'}; continue with the same command and "
                      f"--resume auto (--out {self.out})")
        run.progress.close()
        raise TrainingInterrupted(f"{interrupts.name}: training stopped at step {state.step} of {self.tc.max_steps}; "
                                  f"{advice}", interrupts.requested)

    def _prepare_run_dir(self) -> Path | None:
        """Clean up after a crash mid-save (rank 0; the run directory is locked), then the checkpoint to resume from,
        if any."""
        if self.dist.is_main:
            recover_run_dir(self.out)
        barrier(self.dist)
        resume_from = self._resume_path()
        barrier(self.dist)  # every rank checks the run directory before rank 0 writes config.yaml into it
        return resume_from

    def _set_up(self, resume_from: Path | None) -> _Run:
        """Model, data order, optimiser and schedule, restored from ``resume_from`` when given; the run's config
        written; the model wrapped for DDP / torch.compile. The order of RNG use here is part of exact resume."""
        tc = self.tc
        seed_everything(tc.seed)
        check_model_fits(lambda: self.recipe.build_model(self.cfg), self.device, 4, "training this model")
        model = self.recipe.build_model(self.cfg).to(self.device)
        if self.dist.enabled:
            torch.manual_seed(tc.seed + 7919 * self.dist.rank)  # distinct dropout per rank; init came from rank 0
        with phase("preparing the training split (the first run of a dataset reads and caches it)",
                   self.dist.is_main):
            train_ds = self.recipe.build_dataset(self.cfg, "train")
        steps_per_epoch = epoch_steps(len(train_ds), tc.batch_size, tc.grad_accum, self.dist.world_size)
        plan = EpochBatches(len(train_ds), tc.batch_size, tc.seed, self.dist.rank, self.dist.world_size)
        optimizer = build_optimizer(model, tc)
        scheduler = build_scheduler(optimizer, tc, steps_per_epoch)
        state = TrainingState()
        total = run_total(tc, steps_per_epoch)
        if resume_from is not None:
            state = self._restore(resume_from, model, optimizer, scheduler)
            check_run_length(state.step, total, tc, resume_from)
        progress = Progress(total, state.step, self.dist.is_main, tc.log_every)
        if resume_from is not None:
            progress.message(f"resumed from {resume_from} at step {state.step}")
            if self._resume_changes:
                progress.message("changed on resume: " + "; ".join(
                    f"{k}: {c['from']!r} -> {c['to']!r}" for k, c in self._resume_changes.items()))
        elif self.resume == "auto":
            progress.message(f"--resume auto: no checkpoint in {self.ckpt_root}, starting from scratch")
        train_model: torch.nn.Module = model
        if self.dist.enabled:
            train_model = DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda"
                                                  else None)
        if tc.compile:
            train_model = torch.compile(train_model)
        return _Run(model, train_model, optimizer, scheduler, train_ds, plan, steps_per_epoch, total, state, progress,
                    saved_step=state.step)

    def _length(self) -> str:
        return f"train.max_steps={self.tc.max_steps}" + (f", train.max_epochs={self.tc.max_epochs}"
                                                         if self.tc.max_epochs else "")

    def _restore(self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any) -> TrainingState:
        """Weights, optimiser, scheduler and this rank's RNG from checkpoint ``path``; returns its training state."""
        verify_checkpoint(path, read_meta(path), (WEIGHTS, CONFIG))
        self._check_same_run(path)
        load_weights(model, path)
        saved = load_train_state(path)
        if saved.get("world_size", 1) != self.dist.world_size:
            raise CheckpointError(f"{path} was written by {saved.get('world_size')} process(es); "
                                  f"resume it with the same number (now {self.dist.world_size})")
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        apply_schedule(optimizer, scheduler, self.tc)  # a changed lr / schedule takes effect from here
        restore_rng(saved["rng"][self.dist.rank])
        return TrainingState(**{f.name: saved[f.name] for f in dataclasses.fields(TrainingState)})

    def _optimizer_step(self, run: _Run, stream: Iterator[tuple[int, int, Any]]
                        ) -> tuple[float, dict[str, float], torch.Tensor | None] | None:
        """One optimiser step over ``grad_accum`` micro-batches (gradients synchronised on the last one only);
        returns (mean loss, mean extra values, gradient norm or None), or None when the data ran out first."""
        tc, state = self.tc, run.state
        run.optimizer.zero_grad(set_to_none=True)
        losses, extras = [], {}
        for micro in range(tc.grad_accum):
            try:
                epoch, offset, batch = next(stream)
            except StopIteration:
                break
            sync = (run.train_model.no_sync() if self.dist.enabled and micro < tc.grad_accum - 1
                    else contextlib.nullcontext())
            with sync:
                with self._autocast():
                    loss, logs = self.recipe.training_loss(run.train_model, to_device(batch, self.device))
                self._check_finite(loss, state.step + 1, epoch)
                (loss / tc.grad_accum).backward()
            losses.append(float(loss.detach()))
            for k, v in logs.items():
                extras[k] = extras.get(k, 0.0) + float(v) / tc.grad_accum
            state.epoch, state.offset = epoch, offset
        if len(losses) < tc.grad_accum:
            return None
        grad_norm = (torch.nn.utils.clip_grad_norm_(run.model.parameters(), tc.clip_grad_norm)
                     if tc.clip_grad_norm > 0 else None)
        run.optimizer.step()
        run.scheduler.step()
        state.step += 1
        return sum(losses) / len(losses), extras, grad_norm

    def _check_finite(self, loss: torch.Tensor, step: int, epoch: int) -> None:
        """Stop, without saving, on a NaN or infinite training loss."""
        if not torch.isfinite(loss):
            last = last_good_checkpoint(self.ckpt_root, step)
            advice = (f" (resume from it with --resume {last} and a lower train.lr or a train.clip_grad_norm)"
                      if last else "")
            raise ZooError(f"the training loss is {float(loss.detach())} at step {step} (epoch {epoch}); "
                           f"stopped without saving. Last good checkpoint: {last or 'none'}{advice}. Lower "
                           "train.lr, set train.clip_grad_norm, or check the data for bad values")

    def _log_train(self, log: MetricsLog, run: _Run, window: list[float], extras: dict[str, float],
                   grad_norm: torch.Tensor | None, elapsed: float) -> None:
        """One training record: the mean loss since the last record (averaged across ranks), lr, time, extras."""
        record = {"step": run.state.step, "split": "train", "epoch": run.state.epoch,
                  "loss": mean_across(sum(window) / len(window), self.dist),
                  "lr": run.scheduler.get_last_lr()[0], "time": round(elapsed, 3), **extras}
        if grad_norm is not None:
            record["grad_norm"] = float(grad_norm)
        log.log(record)

    def _validation_due(self, step: int, steps_per_epoch: int) -> bool:
        tc = self.tc
        end_of_epoch = tc.eval_per_epoch and step % steps_per_epoch == 0
        return bool((tc.eval_every and step % tc.eval_every == 0) or end_of_epoch or (
            step == tc.max_steps and (tc.eval_every or tc.eval_per_epoch)))

    def _after_validation(self, log: MetricsLog, run: _Run, metrics: dict[str, float]) -> bool:
        """Log the validation, keep checkpoints/best on a new lowest loss; True when early stopping says stop."""
        state = run.state
        log.log({"step": state.step, "split": "validation", "epoch": state.epoch, **metrics})
        run.progress.message(f"step {state.step} validation: " +
                             " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        if metrics["loss"] < state.best_val_loss:
            state.best_val_loss, state.bad_evals = metrics["loss"], 0
            if self.tc.save_best and self.dist.is_main:
                save_checkpoint(self.ckpt_root, state.step, run.model, self.cfg, self.recipe.name,
                                metrics=metrics, name="best", provenance=self.provenance)
            return False
        state.bad_evals += 1
        stop = 0 < self.tc.early_stopping_patience <= state.bad_evals
        if stop:
            run.progress.message(f"early stopping: no better validation loss in {state.bad_evals} evaluations")
        return stop

    def _save(self, run: _Run, metrics: dict[str, float]) -> None:
        """A resumable checkpoint of the step reached (rank 0 writes it, with every rank's RNG)."""
        state = run.state
        rng = capture_rng()
        if self.dist.enabled:
            gathered: list[Any] = [None] * self.dist.world_size
            dist.all_gather_object(gathered, rng)
        else:
            gathered = [rng]
        if self.dist.is_main:
            train_state = {**dataclasses.asdict(state), "optimizer": run.optimizer.state_dict(),
                           "scheduler": run.scheduler.state_dict(), "rng": gathered, "world_size": self.dist.world_size}
            path = save_checkpoint(self.ckpt_root, state.step, run.model, self.cfg, self.recipe.name, metrics=metrics,
                                   train_state=train_state, keep_last=self.tc.keep_last, provenance=self.provenance)
            run.progress.message(f"saved {path}")
        run.saved_step = state.step
        barrier(self.dist)
