"""``lavo-zoo train ... --dry-run``: everything a run would check before its first step, and what it would write,
without training or writing anything. The config is resolved and validated, the data path's layout is read (the
validation split is built: its files are parsed, so a wrong folder or format fails here), the model is built (its
parameters counted, the attention of each site listed), and an earlier run in ``--out`` is refused or resumed as
``train`` would. Cheap enough to check a paper-size command on a laptop."""
from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

from lavo_zoo.attention import Attention, AttentionSpec, SiteAttention
from lavo_zoo.engine.env import pick_device
from lavo_zoo.engine.recipe import Recipe
from lavo_zoo.engine.run_dir import resume_source
from lavo_zoo.errors import DataError


def attention_sites(section: Any, prefix: str = "model") -> dict[str, str]:
    """{config key: "name option=value ..."} of every attention in a (nested) config section."""
    out: dict[str, str] = {}
    if isinstance(section, AttentionSpec):
        return {prefix: " ".join([section.name, *(f"{k}={v}" for k, v in section.options.items())])}
    if isinstance(section, SiteAttention):
        for f in dataclasses.fields(section):
            out.update(attention_sites(getattr(section, f.name), f"{prefix}.{f.name}"))
        return out
    if dataclasses.is_dataclass(section):
        for f in dataclasses.fields(section):
            out.update(attention_sites(getattr(section, f.name), f"{prefix}.{f.name}"))
    return out


def describe_run(recipe: Recipe, cfg: Any, out: Path, device: str | None = None, resume: str | None = None,
                 config_name: str = "") -> list[tuple[str, str]]:
    """(label, text) rows of what ``lavo-zoo train`` would do with ``cfg`` into ``out``; raises what the run would
    raise before its first step (a refused ``--out``, a bad data path or layout, a model the config cannot build)."""
    out = Path(out)
    start = resume_source(out, resume)
    cfg = recipe.resolve(cfg)
    tc = cfg.train
    data = getattr(cfg, "data", None)
    where = str(data.path) if getattr(data, "path", None) else "built-in data (generated once into the cache)"
    try:
        examples = f"validation split: {len(recipe.build_dataset(cfg, 'validation'))} examples"
    except DataError as e:
        if "validation" not in str(e):
            raise
        examples = f"no validation split ({e})"
    model = recipe.build_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
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
        *(("attention", f"{key}: {spec}") for key, spec in attention_sites(cfg.model).items()),
        ("built", ", ".join(f"{n} x {name}" for name, n in built.items()) or "no registry attention"),
        ("training", (f"{length}, {batch}, {tc.optimizer} lr {tc.lr:g} ({tc.schedule}), seed {tc.seed}, "
                      f"on {pick_device(device)}; validation {validation}")),
        ("start", f"resumes from {start}" if start is not None else "a fresh run"),
        *(("would write", path) for path in saves),
    ]
