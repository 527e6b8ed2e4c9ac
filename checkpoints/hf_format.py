"""Checkpoints as Hugging Face transformers model folders: ``lavo-zoo export CKPT OUT --format hf``, ``push --format
hf``, and reading such a folder (or one that transformers' ``save_pretrained`` / ``Trainer`` wrote after training
it further) wherever a checkpoint is accepted (``lavo-zoo eval``, ``lavo_zoo.load``).

The folder's layout belongs to the recipe (its transformers plugin, :mod:`lavo_zoo.hf`); this module only knows
that its ``config.json`` names the recipe under ``lavo_zoo.recipe`` and that a folder with a ``meta.json`` is a
lavo-zoo checkpoint instead.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lavo_zoo.errors import CheckpointError, UsageError

HF_CONFIG = "config.json"
FORMATS = ("archive", "hf")


def hf_recipe(path: Path) -> str | None:
    """The recipe of a transformers folder ``path`` written from a lavo-zoo model (its config.json's
    ``lavo_zoo.recipe``), or None for anything else (a lavo-zoo checkpoint directory, another model)."""
    path = Path(path)
    if not (path / HF_CONFIG).is_file() or (path / "meta.json").is_file():
        return None
    try:
        data = json.loads((path / HF_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    recipe = (data.get("lavo_zoo") or {}).get("recipe") if isinstance(data, dict) else None
    return recipe if isinstance(recipe, str) and recipe else None


def transformers_plugin(recipe: str, purpose: str) -> Any:
    """The transformers plugin of ``recipe`` (:func:`lavo_zoo.hf.get_plugin`), once the ``hf`` extra it needs is
    checked: a missing or broken transformers is refused with the ``pip install`` that repairs it
    (:func:`~lavo_zoo.dependencies.require_extra`), not a raw ModuleNotFoundError."""
    from lavo_zoo.dependencies import require_extra
    from lavo_zoo.hf import get_plugin, plugin_names

    if recipe in plugin_names():  # a recipe without a transformers form is get_plugin's refusal, extra or not
        require_extra("hf", purpose)
    return get_plugin(recipe)


def import_hf_folder(folder: Path, out: Path) -> Path:
    """The checkpoint directory (written under ``out``) of transformers folder ``folder``."""
    recipe = hf_recipe(folder)
    if recipe is None:
        raise CheckpointError(f"{folder} is not a transformers folder of a lavo-zoo model ({HF_CONFIG} names no "
                              "lavo_zoo.recipe)")
    return transformers_plugin(recipe, f"reading the transformers folder {folder}").import_folder(Path(folder),
                                                                                                 Path(out))


def export_hf(checkpoint: Path, out: Path, *, name: str | None, license_: str, results: Path | None,
              named_after: Path | None = None) -> list[Path]:
    """Write checkpoint directory ``checkpoint`` as a transformers model folder with its model card (README.md) into
    ``out``, an empty folder (the staging folder the output policy gives ``export --format hf``, which puts it in
    place, or a scratch folder of ``push``); returns the files written.

    Args:
        checkpoint: the checkpoint directory.
        out: the empty folder to write into.
        name: the index name the card gives (None: from the name of ``named_after``, else of ``out``).
        license_: the weights' license (an SPDX id).
        results: an ``eval`` results JSON of these weights, or None.
        named_after: the path whose name gives the default ``name`` (the command's OUT), or None.
    """
    from lavo_zoo.checkpoints.archive import check_checkpoint_dir
    from lavo_zoo.checkpoints.card import build_card, load_results
    from lavo_zoo.checkpoints.index import NAME_RE, default_name
    meta = check_checkpoint_dir(checkpoint.resolve())
    recipe = str(meta.get("recipe") or "unknown")
    # before any work: a recipe without a transformers form, or a missing transformers, is refused
    plugin = transformers_plugin(recipe, "export --format hf")
    name = name or default_name(recipe, str(Path(named_after or out).resolve()))
    if not NAME_RE.match(name):
        raise UsageError(f"--name must look like <domain>/<config>@<tag>, got '{name}'")
    scored = load_results(results, meta) if results is not None else None
    card = build_card(checkpoint.resolve(), meta, name=name, license=license_, results=scored,
                      transformers_use=plugin.card_use())
    plugin.export_folder(checkpoint.resolve(), out, card)
    return sorted(p for p in out.iterdir() if p.is_file())
