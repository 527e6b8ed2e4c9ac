"""``lavo-zoo train ... --dry-run``: everything a run would check before its first step, and what it would write,
without training or writing anything. The config is resolved and validated, the data path's layout is read (the training
and validation splits are built: their files are parsed, so a wrong folder or format fails here, and a batch larger than
the data is refused), the model is built (its parameters counted, the attention of each site listed, layer by layer for
a hybrid), ``--out`` must be a folder that can be written, and an earlier run in it is refused or resumed as ``train``
would (a checkpoint with other settings, or already beyond ``train.max_steps``, is refused). The first dry run of a
large dataset reads it once into the cache, as the run would; then it is cheap enough to check a paper-size command on a
laptop."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from lavo_zoo.attention import Attention
from lavo_zoo.attention.schedule import describe_layers, spec_text
from lavo_zoo.engine.checkpoint_io import read_config, read_meta
from lavo_zoo.engine.data import epoch_steps
from lavo_zoo.engine.env import pick_device
from lavo_zoo.engine.memory import available_memory, check_model_fits, format_bytes
from lavo_zoo.engine.recipe import Recipe
from lavo_zoo.engine.run_dir import check_run_length, resume_changes, resume_source, run_total
from lavo_zoo.errors import MissingSplit
from lavo_zoo.outputs import check_folder_writable


def describe_run(recipe: Recipe, cfg: Any, out: Path, device: str | None = None, resume: str | None = None,
                 config_name: str = "", fresh: bool = False) -> list[tuple[str, str]]:
    """(label, text) rows of what ``lavo-zoo train`` would do with ``cfg`` into ``out``; raises what the run would
    raise before its first step (a refused ``--out``, a bad data path or layout, a model the config cannot build).
    ``fresh``: ``out`` is emptied before the run (``compare --rerun``), which then starts afresh.

    Args:
        recipe: the config's recipe.
        cfg: the run's config.
        out: the run folder.
        device: the device asked for, or None (the default).
        resume: ``--resume`` ('auto', a checkpoint, or None).
        config_name: the config's name, for the rows.
        fresh: ``out`` is emptied first (above).
    """
    out = Path(out)
    check_folder_writable(out)
    start = None if fresh else resume_source(out, resume)
    cfg = recipe.resolve(cfg)
    tc = cfg.train
    if start is not None:
        resume_changes(read_config(start)[1], cfg, start)  # a checkpoint of other settings is refused, as train does
    train_examples = len(recipe.build_dataset(cfg, "train"))
    per_epoch = epoch_steps(train_examples, tc.batch_size, tc.grad_accum)
    total = run_total(tc, per_epoch)
    step = int(read_meta(start).get("step") or 0) if start is not None else 0
    if start is not None:
        check_run_length(step, total, tc, start)
    data = getattr(cfg, "data", None)
    where = str(data.path) if getattr(data, "path", None) else "built-in data (generated once into the cache)"
    where += f"; training split: {train_examples} examples ({per_epoch} optimiser steps an epoch)"
    try:
        examples = f"validation split: {len(recipe.build_dataset(cfg, 'validation'))} examples"
    except MissingSplit as e:  # absent: training goes on without it; a malformed one is an error here too
        examples = f"no validation split ({e})"
    check_model_fits(lambda: recipe.build_model(cfg), pick_device(device), 4, "training this model")
    model = recipe.build_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    state_bytes = 4 * sum(p.numel() * p.element_size() for p in model.parameters())  # weights, grads, Adam's two
    built = Counter(f"{type(m).__name__} ({m.pattern})" for m in model.modules() if isinstance(m, Attention))
    length = f"{tc.max_steps} steps" + (f" or {tc.max_epochs} epochs" if tc.max_epochs else "")
    batch = f"batch {tc.batch_size}" + (f" x {tc.grad_accum} accumulated" if tc.grad_accum > 1 else "")
    validation = " and ".join(([f"every {tc.eval_every} steps"] if tc.eval_every else [])
                              + (["after each epoch"] if tc.eval_per_epoch else [])) or "never"
    saves = [str(out / "config.yaml"), str(out / "metrics.jsonl"),
             f"{out / 'checkpoints'}/step-N every {tc.save_every} steps (the last {tc.keep_last or 'all'} kept)"]
    if tc.save_best:
        saves.append(f"{out / 'checkpoints' / 'best'} (lowest validation loss)")
    return [
        ("config", f"{config_name or recipe.name} (recipe {recipe.name})"),
        ("data", f"{where}; {examples}"),
        ("model", f"{type(model).__name__}: {params:,} parameters ({trainable:,} trainable)"),
        *(("attention", f"{g.key}: " + (f"{g.where}: " if len(g.layers) < g.num_layers else "") + spec_text(g.spec))
          for g in describe_layers(cfg.model)),
        ("built", ", ".join(f"{n} x {name}" for name, n in built.items()) or "no registry attention"),
        ("training", (f"{length}, {batch}, {tc.optimizer} lr {tc.lr:g} ({tc.schedule}), seed {tc.seed}, "
                      f"on {pick_device(device)}; validation {validation}")),
        ("memory", (f"{format_bytes(state_bytes)} for the weights, gradients and optimiser state, of "
                   f"{format_bytes(available_memory(pick_device(device)))} free on {pick_device(device)}; a step's "
                   f"activations (batch {tc.batch_size}) are not estimated: a step that does not fit stops the run "
                   "naming train.batch_size")),
        ("start", "a fresh run" if start is None else f"resumes from {start} at step {step}"
         + ("; nothing left to train (raise --max-steps)" if step >= total else "")),
        *(("would write", path) for path in saves),
    ]
