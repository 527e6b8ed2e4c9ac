"""Checkpoint IO: saving and loading a run's checkpoints (the index of released checkpoints and their downloads are
:mod:`lavo_zoo.checkpoints`).

A checkpoint on disk (docs/architecture.md) is a directory with ``model.safetensors`` (weights only), ``config.yaml``
(resolved config), ``meta.json`` (recipe, step, metrics, versions, git revision, and the sha256 of every other file:
the weights, the config that defines the model, the training state) and, for resuming, ``train_state.pt``
(optimiser, scheduler, RNG, data position; ``torch.load(weights_only=True)``). Loading verifies every file meta.json
lists, so an edited config is refused as surely as corrupt weights.

Saves are atomic (:mod:`lavo_zoo.atomic`): everything is written into a temporary sibling directory, flushed, then
swapped into place, and ``last`` is a symlink replaced atomically. A crash mid-save leaves the previous checkpoint
intact. Loading refuses a missing, corrupt, truncated or mismatched checkpoint with a message naming the file and
the reason.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_model as load_safetensors_model
from safetensors.torch import save_model as save_safetensors_model
from torch import nn

from lavo_zoo.atomic import fsync_tree, replace_link, swap_folder, temporary_folder
from lavo_zoo.config import config_yaml
from lavo_zoo.engine.configs import config_from_dict
from lavo_zoo.engine.env import git_revision, versions
from lavo_zoo.engine.memory import check_model_fits
from lavo_zoo.errors import CheckpointError, ConfigError, UsageError, not_a_file, os_error_reason
from lavo_zoo.outputs import CHECKPOINT_FILES, sha256_file

WEIGHTS, CONFIG, META, TRAIN_STATE = CHECKPOINT_FILES
LAST = "last"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside DistributedDataParallel and/or torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def save_checkpoint(root: Path, step: int, model: nn.Module, cfg: Any, recipe_name: str, *,
                    metrics: dict[str, float] | None = None, train_state: dict[str, Any] | None = None,
                    keep_last: int = 0, name: str | None = None, provenance: dict[str, Any] | None = None) -> Path:
    """Write ``root/step-<step>`` atomically, point ``root/last`` at it and keep only the newest ``keep_last``.

    With ``name`` (e.g. ``"best"``) the checkpoint goes to ``root/<name>`` instead, replacing the previous one
    atomically, and ``last`` and the step directories are left alone. ``provenance`` (the command that trained it,
    the machine, the seed) goes into meta.json, where a model card reads it.

    Args:
        root: the run's checkpoints folder.
        step: the optimiser step the weights are at.
        model: the model (a wrapped one, e.g. DDP or compiled, is unwrapped).
        cfg: the run's resolved config, saved as config.yaml.
        recipe_name: the recipe's registry name, recorded in meta.json.
        metrics: validation metrics at this step, recorded in meta.json, or None.
        train_state: the optimiser, scheduler and loop state to resume from (train_state.pt), or None.
        keep_last: step directories to keep (0: all).
        name: a named checkpoint (``"best"``) instead of a step directory, or None.
        provenance: what trained it (above), or None.

    Returns:
        The checkpoint's directory.
    """
    final = root / (name or f"step-{step}")
    tmp: Path | None = None
    try:
        tmp = temporary_folder(final)
        model = unwrap(model)
        save_safetensors_model(model, str(tmp / WEIGHTS))
        (tmp / CONFIG).write_text(config_yaml(cfg))
        meta = {
            "recipe": recipe_name,
            "step": step,
            "metrics": metrics or {},
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "weights_sha256": sha256_file(tmp / WEIGHTS),
            "versions": versions(),
            "git_revision": git_revision(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(provenance or {}),
        }
        if train_state is not None:
            torch.save(train_state, tmp / TRAIN_STATE)
        meta["files_sha256"] = {name: sha256_file(tmp / name) for name in (WEIGHTS, CONFIG, TRAIN_STATE)
                                if (tmp / name).is_file()}
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        fsync_tree(tmp)  # here (swap_folder flushes too), so that a failure to flush is a failed save
    except (OSError, SafetensorError, RuntimeError) as e:  # torch.save and safetensors report I/O failures as
        # RuntimeError / SafetensorError: a full disk, a quota, a folder made read-only. The previous checkpoint stays.
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not save checkpoint {final} (in {tmp or root}): {_save_failure(e, root)}; "
                              "nothing was replaced, the previous checkpoints are intact. Free space (or make the "
                              "folder writable) and continue with --resume auto") from None
    try:
        swap_folder(tmp, final)  # re-saving (the end of a resumed run, a new best) swaps without a gap
        if name is not None:
            return final
        replace_link(root / LAST, final.name)
    except OSError as e:  # --resume auto puts back a checkpoint swapped out and drops the temporary one
        raise CheckpointError(f"could not move checkpoint {final} into place: {_save_failure(e, root)}; the previous "
                              "checkpoints are intact. Continue with --resume auto once that is fixed") from None
    if keep_last > 0:
        for old_dir in step_dirs(root)[:-keep_last]:
            shutil.rmtree(old_dir, ignore_errors=True)
    return final


def _save_failure(error: Exception, root: Path) -> str:
    """Why a save failed, in words: an OSError's reason, or the disk found full after torch / safetensors failed
    (they report I/O failures as RuntimeError / SafetensorError)."""
    if isinstance(error, OSError) and error.errno is not None:
        return os_error_reason(error)
    try:
        full = "No space left" in str(error) or shutil.disk_usage(root).free < (1 << 20)
    except OSError:
        full = False
    return "the disk is full" if full else str(error)


def step_dirs(root: Path) -> list[Path]:
    """Complete checkpoint directories under ``root``, oldest first (temporary ones are ignored)."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (``last`` if valid, else the highest step-N), or None."""
    last = root / LAST
    if last.is_dir() and (last / META).is_file():
        return last.resolve()
    dirs = [d for d in step_dirs(root) if (d / META).is_file() and (d / WEIGHTS).is_file()]
    return dirs[-1] if dirs else None


def run_checkpoint(run: Path) -> Path | None:
    """The checkpoint a run directory stands for where one checkpoint is asked for (``lavo_zoo.load(RUN)``, the
    message refusing ``eval RUN``): its newest complete checkpoint (:func:`latest_checkpoint`), else its complete
    ``best``, else None."""
    root = Path(run) / "checkpoints"
    latest = latest_checkpoint(root)
    if latest is not None:
        return latest
    best = root / "best"
    return best if (best / META).is_file() and (best / WEIGHTS).is_file() else None


# ------------------------------------------------------------------------------------------------------ loading
def read_meta(path: Path) -> dict[str, Any]:
    """``meta.json`` of checkpoint ``path`` after checking the directory and its files exist."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a directory")
    if not (path / META).is_file() and (path / "checkpoints").is_dir():
        latest = run_checkpoint(path)
        raise UsageError(f"{path} is a run directory, not a checkpoint; give one of its checkpoints, "
                         + (f"e.g. {latest}" if latest is not None else
                            f"in {path / 'checkpoints'} (none is complete yet)"))
    holds = f"a checkpoint directory holds {WEIGHTS}, {CONFIG} and {META}"
    if not any((path / name).exists() for name in (CONFIG, META)):
        if (path / "config.json").is_file():  # a transformers folder lavo-zoo did not write (it reads its own)
            raise CheckpointError(f"{path} holds a config.json that names no lavo-zoo model (no lavo_zoo.recipe): a "
                                  "model folder of another library, neither a lavo-zoo checkpoint directory nor a "
                                  "folder that `lavo-zoo export --format hf` wrote")
        inside = sorted(p.name for p in path.iterdir() if (p / META).is_file())
        if inside:  # a run's checkpoints/ folder
            raise UsageError(f"{path} is a folder of checkpoints ({', '.join(inside[:5])}), not one; give one of them "
                             f"(e.g. {path / inside[0]}) or the run directory")
        raise CheckpointError(f"{path} is not a checkpoint: it holds none of {WEIGHTS}, {CONFIG} and {META}; give a "
                              "checkpoint directory (e.g. runs/x/checkpoints/last) or a run directory")
    for name in (WEIGHTS, CONFIG, META):
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} {not_a_file(path / name)} ({holds})")
    try:
        meta = json.loads((path / META).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path / META} is corrupt: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or "weights_sha256" not in meta or "recipe" not in meta:
        raise CheckpointError(f"{path / META} is not a lavo-zoo checkpoint meta file "
                              "(it needs 'recipe' and 'weights_sha256')")
    return meta


def verify_checkpoint(path: Path, meta: dict[str, Any], names: tuple[str, ...] = (WEIGHTS, CONFIG)) -> None:
    """Check ``names`` of checkpoint ``path`` against the sha256 that meta.json records for them (the weights
    always; the config and the training state where meta.json lists them: checkpoints written before it did are
    checked on their weights alone). A file changed after the save is refused, naming it."""
    recorded = {**(meta.get("files_sha256") or {}), WEIGHTS: meta["weights_sha256"]}
    for name in names:
        if name not in recorded:
            continue
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} {not_a_file(file)}")
        actual = sha256_file(file)
        if actual != recorded[name]:
            what = ("is corrupt or truncated" if name != CONFIG else
                    "was changed after the checkpoint was saved (it defines the model the weights belong to)")
            if name == CONFIG:
                try:
                    file.read_bytes().decode("utf-8")
                except UnicodeDecodeError as e:
                    what = f"is corrupt: not UTF-8 text (byte {e.start})"
            raise CheckpointError(f"{file} {what}: its sha256 is {actual} ({file.stat().st_size} bytes) but {META} "
                                  f"records {recorded[name]}; restore or re-download the checkpoint (to evaluate "
                                  "with other settings, pass key=value overrides instead of editing the file)")


def verify_weights(path: Path, meta: dict[str, Any]) -> None:
    """Check the weights (and the config, where meta.json records it) against meta.json."""
    verify_checkpoint(path, meta)


def read_config(path: Path, overrides: list[str] = ()) -> tuple[Any, Any]:
    """(recipe, validated config) from the checkpoint's own ``config.yaml`` plus overrides."""
    try:
        data = yaml.safe_load((path / CONFIG).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise CheckpointError(f"{path / CONFIG} is corrupt: not valid YAML ({e})") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path / CONFIG} is corrupt: not UTF-8 text (byte {e.start})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path / CONFIG} is corrupt: expected a mapping, got {type(data).__name__}")
    _former_defaults(data.get("model"))
    try:
        return config_from_dict(data, list(overrides), source=str(path / CONFIG))
    except ConfigError as e:
        if overrides:
            raise
        raise CheckpointError(f"{path / CONFIG} does not match this version of its recipe: {e}") from None


def _former_defaults(node: Any, key: str = "") -> None:
    """Give every attention spec of a saved ``model`` section the former defaults of the options it does not record
    (written before their default changed, see ``Attention.former_defaults``): an old checkpoint keeps its reading.
    Specs are the mappings with a ``name`` under an ``attention`` key (one spec, or one per site)."""
    from lavo_zoo.attention import ATTENTIONS, attention_class

    if not isinstance(node, dict):
        return
    if "attention" in key.split(".") and isinstance(node.get("name"), str):
        if node["name"] in ATTENTIONS.names():
            for option, value in attention_class(node["name"]).former_defaults.items():
                node.setdefault(option, value)
        return
    for k, v in list(node.items()):
        if isinstance(v, str) and "attention" in f"{key}.{k}".split(".") and v in ATTENTIONS.names() \
                and attention_class(v).former_defaults:                   # a bare name: a spec without options
            node[k] = v = {"name": v}
        _former_defaults(v, f"{key}.{k}")


def load_weights(model: nn.Module, path: Path) -> None:
    """Load ``path/model.safetensors`` into ``model`` strictly, explaining any mismatch."""
    file = path / WEIGHTS
    try:
        missing, unexpected = load_safetensors_model(unwrap(model), str(file), strict=False)
    except SafetensorError as e:
        raise CheckpointError(f"{file} is corrupt or truncated and cannot be read ({e})") from None
    except RuntimeError as e:  # shape mismatches from load_state_dict
        detail = "; ".join(line.strip() for line in str(e).splitlines()[1:] if line.strip())[:800]
        raise CheckpointError(f"{file} does not match the model built from {path / CONFIG}: {detail}") from None
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (e.g. {', '.join(sorted(missing)[:4])})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensors (e.g. {', '.join(sorted(unexpected)[:4])})")
        raise CheckpointError(f"{file} does not match the model built from {path / CONFIG}: {'; '.join(parts)}")


def _eval_option(key: str) -> bool:
    """Whether ``key`` (``model.attention[.site].<option>``) names an option that some attention declares
    changes no weight (:attr:`Attention.eval_options`), so evaluation may override it; the config check then
    refuses it where the checkpoint's own attention has no such option."""
    from lavo_zoo.attention import ATTENTIONS, attention_class

    parts = key.split(".")
    if len(parts) < 3 or parts[:2] != ["model", "attention"]:
        return False
    return any(parts[-1] in attention_class(n).eval_options for n in ATTENTIONS.names())


def load_model(path: Path | str, device: torch.device | str = "cpu", overrides: list[str] = ()
               ) -> tuple[Any, Any, nn.Module, dict[str, Any]]:
    """(recipe, cfg, model in eval mode on ``device``, meta) rebuilt from checkpoint directory ``path``.

    ``overrides`` may change evaluation and data settings and an attention's weight-free options
    (:attr:`~lavo_zoo.attention.base.Attention.eval_options`, e.g. ``model.attention.global_read=false``); the rest of
    ``model.*`` and ``recipe`` are fixed by the weights and refused (a :class:`UsageError`).
    """
    path = Path(path).resolve()
    fixed = [o for o in overrides if o.partition("=")[0].split(".")[0] in ("model", "recipe")
             and not _eval_option(o.partition("=")[0])]
    if fixed:
        raise UsageError(f"{' '.join(fixed)}: a checkpoint's model is fixed by its weights ({path / CONFIG}); "
                         "drop the model.*/recipe overrides (evaluation and data settings may be overridden), or "
                         "train a model with those settings")
    meta = read_meta(path)
    verify_weights(path, meta)
    recipe, cfg = read_config(path, overrides)
    check_model_fits(lambda: recipe.build_model(cfg), device, 1, f"the model of {path}")
    model = recipe.build_model(cfg)
    try:
        load_weights(model, path)
    except CheckpointError as e:
        if not overrides:
            raise
        raise CheckpointError(f"the overrides {' '.join(overrides)} change the model the weights fit: {e}") from None
    return recipe, cfg, model.to(device).eval(), meta


def load_train_state(path: Path) -> dict[str, Any]:
    """``train_state.pt`` of checkpoint ``path`` (``torch.load(weights_only=True)``); a corrupt one is refused with
    the earlier checkpoints to resume from instead."""
    path = Path(path)
    file = path / TRAIN_STATE
    if not file.is_file():
        raise CheckpointError(f"cannot resume from {path}: {TRAIN_STATE} is missing (release checkpoints carry "
                              "weights only; resume needs a checkpoint written by `lavo-zoo train`)")
    recorded = (read_meta(path).get("files_sha256") or {}).get(TRAIN_STATE)
    if recorded is not None and sha256_file(file) != recorded:
        raise CheckpointError(f"{file} is corrupt or truncated: its sha256 differs from the one {META} records "
                              f"({file.stat().st_size} bytes). {_earlier_checkpoints_hint(path)}")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the file is unusable
        # torch's own message advises weights_only=False: wrong for a damaged file, and unsafe; not relayed.
        raise CheckpointError(f"{file} is corrupt or truncated ({type(e).__name__}; {file.stat().st_size} bytes) and "
                              f"cannot be loaded. {_earlier_checkpoints_hint(path)}") from None
    if not isinstance(state, dict) or "optimizer" not in state or "step" not in state:
        raise CheckpointError(f"{file} is not a lavo-zoo training state (it needs 'step' and 'optimizer'). "
                              f"{_earlier_checkpoints_hint(path)}")
    return state


def _earlier_checkpoints_hint(path: Path) -> str:
    """How to resume without ``path``: the step-N checkpoints before it, newest first."""
    resolved = path.resolve()
    earlier = [d for d in step_dirs(resolved.parent) if d.resolve() != resolved and (d / TRAIN_STATE).is_file()]
    step = _STEP_DIR.match(resolved.name)
    if step:
        earlier = [d for d in earlier if int(_STEP_DIR.match(d.name).group(1)) < int(step.group(1))]
    if not earlier:
        return "No earlier checkpoint of this run holds a training state: start a new run (another --out)."
    return (f"Resume from an earlier checkpoint instead: --resume {earlier[-1]}"
            + (f" (also kept: {', '.join(d.name for d in earlier[-2::-1])})" if len(earlier) > 1 else ""))
