"""A run directory's rules: one process at a time (:class:`RunLock`), what a process killed mid-save left undone
(:func:`recover_run_dir`), what counts as an earlier run (never overwritten without ``--resume``), which settings a
resumed run may change (applied and logged) and which it may not (refused with the diff), and which checkpoint is
"good" after a non-finite loss.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import safe_open

from lavo_zoo.atomic import remove_leftovers
from lavo_zoo.attention.spec import OptionDefault, with_option_defaults
from lavo_zoo.config import to_dict
from lavo_zoo.engine.checkpoint_io import META, TRAIN_STATE, WEIGHTS, latest_checkpoint, read_meta, step_dirs
from lavo_zoo.errors import CheckpointError, UsageError, ZooError, os_error_message
from lavo_zoo.locking import read_holder, release_lock, try_lock

RUN_FILES = ("config.yaml", "metrics.jsonl", "tensorboard", "checkpoints")
LOCK_FILE = ".lock"  # in a run directory while a process trains into it; holds that process's pid


def recover_run_dir(out: Path) -> None:
    """Undo what a process killed mid-save left in the run directory ``out``: temporary checkpoint folders, a step
    swapped out but not back (put back), the temporary file of config.yaml or metrics.jsonl
    (:func:`lavo_zoo.atomic.remove_leftovers`). Call it holding the run's :class:`RunLock`: no other writer is at
    work."""
    remove_leftovers(out)
    remove_leftovers(Path(out) / "checkpoints")


class RunLock:
    """An exclusive lock on a run directory for as long as one process trains into it, so that two ``train``
    commands cannot interleave their metrics and checkpoints. It is an OS file lock (``flock``): the system drops it
    when the holder exits or is killed, so a killed run never leaves it stuck and ``--resume auto`` takes it over.
    Where ``fcntl`` is missing (Windows) runs are not locked."""

    def __init__(self, out: Path) -> None:
        self.path = Path(out) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, writing this process's pid into it; returns the lock. A held lock is a :class:`UsageError`
        naming the holder's pid, a folder where no lock can be made a :class:`ZooError` saying why."""
        try:
            fd = try_lock(self.path, f"{os.getpid()}\n".encode())
        except OSError as e:
            raise ZooError(os_error_message(e, "cannot start a run in")) from None
        if fd is None:
            holder = read_holder(self.path, 64) or "unknown"
            raise UsageError(f"{self.path.parent} is in use: another process (pid {holder}) is training into "
                             "it. Two runs in one folder would overwrite each other's metrics and checkpoints; "
                             "wait for it to finish (then --resume auto continues it), stop it, or choose "
                             "another --out") from None
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file (while still holding it, so that no other process locks a file being removed) and
        release the lock."""
        release_lock(self._fd, self.path)
        self._fd = None


# Settings a resumed run may change; each takes effect from the first resumed step. Everything else (model, data,
# optimiser, batch size, accumulation, seed, precision, ...) must match the checkpoint, or the resumed run would not be
# the run its config.yaml describes.
RESUMABLE = frozenset({
    "train.max_steps", "train.max_epochs",  # how long
    "train.log_every", "train.eval_every", "train.eval_per_epoch", "train.eval_batches",  # cadence
    "train.early_stopping_patience", "train.save_best", "train.save_every", "train.keep_last",
    "train.tensorboard", "train.num_workers", "train.compile",
    "train.lr", "train.schedule", "train.warmup_steps", "train.warmup_init_lr", "train.min_lr",  # lr and schedule
    "train.decay_gamma", "train.decay_steps", "train.clip_grad_norm",
})
RESUMABLE_SECTIONS = ("eval.",)  # evaluation settings


# ------------------------------------------------------------------------------------------- what a run leaves
def run_contents(out: Path) -> list[str]:
    """What of an earlier run ``out`` holds: ``config.yaml``, ``metrics.jsonl``, ``tensorboard/`` and every entry
    of ``checkpoints/`` (``checkpoints/best``, ``checkpoints/step-4``, ...); empty when there is none."""
    out = Path(out)
    found = [name for name in RUN_FILES[:3] if (out / name).exists()]
    ckpts = out / "checkpoints"
    if ckpts.is_dir():
        found += sorted(f"checkpoints/{p.name}" for p in ckpts.iterdir())
    elif ckpts.exists():
        found.append("checkpoints")
    return found


def _listing(found: list[str]) -> str:
    return ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")


def resume_source(out: Path, resume: str | None) -> Path | None:
    """The checkpoint to resume from (None: start afresh), after refusing to overwrite an earlier run.

    ``resume=None``: ``out`` must hold nothing of a run. ``"auto"``: the newest complete checkpoint with a training
    state; with none, a fresh start is allowed only when the run left no checkpoint of any kind (a run killed before
    its first save). A path: that checkpoint directory.
    """
    out, ckpts = Path(out), Path(out) / "checkpoints"
    if resume is None:
        found = run_contents(out)
        if found:
            raise UsageError(f"{out} already holds a run ({_listing(found)}); it is never overwritten. Pass "
                             f"--resume auto to continue it, or choose another --out (or remove {out} yourself)")
        return None
    if resume == "auto":
        latest = latest_checkpoint(ckpts)
        if latest is not None and (latest / TRAIN_STATE).is_file():
            return latest
        resumable = [d for d in step_dirs(ckpts) if (d / TRAIN_STATE).is_file() and (d / META).is_file()]
        if resumable:
            return resumable[-1]
        found = [f for f in run_contents(out) if f.startswith("checkpoints/")]
        if found:
            best = ckpts / "best"
            usable = (f" {best} holds the weights of the best validation step without the optimiser and data "
                      f"position, so it cannot be continued, but it can be scored or exported as it is (`lavo-zoo "
                      f"eval {best}`).") if (best / META).is_file() else ""
            raise UsageError(f"--resume auto: {out} holds {_listing(found)} but no checkpoint to continue from (a "
                             f"checkpoints/step-N with {TRAIN_STATE}: saved every train.save_every steps, at the "
                             f"last step, and when a run is stopped with Ctrl-C or SIGTERM).{usable} Starting "
                             "afresh would overwrite them: choose another --out, or remove them yourself")
        return None
    path = Path(resume)
    if not path.is_dir():
        raise UsageError(f"--resume {resume}: no such checkpoint directory (use 'auto' or a step-N dir)")
    return path.resolve()


def run_total(tc: Any, steps_per_epoch: int) -> int:
    """The step a run ends at: ``train.max_steps``, or fewer where ``train.max_epochs`` ends it first."""
    return tc.max_steps if tc.max_epochs is None else min(tc.max_steps, tc.max_epochs * steps_per_epoch)


def check_run_length(step: int, total: int, tc: Any, checkpoint: Path) -> None:
    """Refuse to resume a checkpoint at ``step`` beyond the step this run ends at (``total``: ``train.max_steps``,
    or fewer where ``train.max_epochs`` ends the run first): such a run would end at once, training nothing.

    Args:
        step: the checkpoint's step.
        total: the step the run ends at.
        tc: the run's ``train`` settings (``max_steps``, ``max_epochs``), for the message.
        checkpoint: the checkpoint, for the message.

    Raises:
        UsageError: ``step`` is beyond ``total``.
    """
    if step > total:
        limit = (f"train.max_steps={tc.max_steps}" if total == tc.max_steps
                 else f"train.max_epochs={tc.max_epochs} (= {total} steps)")
        raise UsageError(f"--resume: {checkpoint} is at step {step}, beyond where this run ends ({limit}); nothing "
                         f"would be trained. Give --max-steps above {step} to train further, or evaluate the "
                         f"checkpoint as it is (lavo-zoo eval {checkpoint})")


# -------------------------------------------------------------------------------------------- resume policy
def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        return {k: v for key, value in data.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): data}


def resumable(key: str) -> bool:
    """Whether a resumed run may change the setting ``key`` (a dotted config key)."""
    return key in RESUMABLE or key.startswith(RESUMABLE_SECTIONS)


def resume_changes(saved_cfg: Any, cfg: Any, checkpoint: Path) -> dict[str, dict[str, Any]]:
    """``{key: {"from": saved, "to": now}}`` for the settings this resumed run changes, all of them resumable;
    a change to any other setting is a :class:`UsageError` listing every such difference."""
    if getattr(saved_cfg, "recipe", None) != getattr(cfg, "recipe", None):
        raise UsageError(f"cannot resume from {checkpoint}: it is a checkpoint of recipe '{saved_cfg.recipe}', and "
                         f"this run trains '{cfg.recipe}'; resume a '{cfg.recipe}' checkpoint, or start a new --out")
    # attention options left out compare at their defaults, and show as such ("its default -> 16", not "None -> 16")
    saved, now = (_flatten(with_option_defaults(to_dict(c))) for c in (saved_cfg, cfg))
    missing = object()
    changed = {k: (saved.get(k, missing), now.get(k, missing)) for k in sorted(set(saved) | set(now))
               if saved.get(k, missing) != now.get(k, missing)}
    show = {k: tuple(None if v is missing else v for v in pair) for k, pair in changed.items()}
    fixed = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in show.items() if not resumable(k)]
    if fixed:
        raise UsageError(f"cannot resume from {checkpoint}: its config differs from this run's in "
                         f"{'; '.join(fixed[:8])}{' ...' if len(fixed) > 8 else ''}. Only run length, evaluation, "
                         "logging and checkpoint cadence, lr, schedule and clipping may change on resume: resume with "
                         "the checkpoint's other settings, or start a new --out")
    plain = {k: tuple(v.value if isinstance(v, OptionDefault) else v for v in pair) for k, pair in show.items()}
    return {k: {"from": a, "to": b} for k, (a, b) in plain.items()}


# ---------------------------------------------------------------------------------------- last good checkpoint
def finite_weights(checkpoint: Path) -> bool:
    """Whether every tensor of ``checkpoint/model.safetensors`` is finite (read one tensor at a time)."""
    try:
        with safe_open(str(checkpoint / WEIGHTS), framework="pt") as f:
            names = f.keys()
            return all(bool(torch.isfinite(f.get_tensor(name)).all()) for name in names)
    except (OSError, SafetensorError):
        return False


def last_good_checkpoint(ckpts: Path, failed_step: int) -> Path | None:
    """The newest step-N checkpoint that can be trusted after a non-finite loss at step ``failed_step`` (1-based).

    The loss of step s is computed with the weights after step s - 1, so step-(s-1) is what produced the bad loss
    and is never "good"; an earlier one is, when its recorded loss (if any) and all its weights are finite.
    """
    for d in reversed(step_dirs(ckpts)):
        step = int(d.name.removeprefix("step-"))
        if step >= failed_step - 1 or not (d / META).is_file():
            continue
        try:
            loss = read_meta(d).get("metrics", {}).get("loss")
        except CheckpointError:  # an unreadable checkpoint is not a good one
            continue
        if (loss is None or (isinstance(loss, (int, float)) and math.isfinite(loss))) and finite_weights(d):
            return d
    return None
