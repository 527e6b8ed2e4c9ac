"""The release of a checkpoint: what ``lavo-zoo export`` and ``push`` publish and the rules it follows. The archive
holds the checkpoint's own files and its model card (:func:`export_release`); the index entry's name is
``<domain>/<config>@<tag>`` of the checkpoint's own domain (:func:`check_release_name`); its metrics are those of an
``eval`` of exactly these weights when given, else what training logged, non-finite values left out, saying so; the
card goes beside the archive too (:func:`card_path`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from lavo_zoo.checkpoints import cache as cache_mod
from lavo_zoo.checkpoints.archive import CARD, check_checkpoint_dir, pack_checkpoint
from lavo_zoo.checkpoints.index import NAME_RE, default_name
from lavo_zoo.errors import UsageError


def card_path(archive: Path) -> Path:
    """Where the model card of ``archive`` goes beside it: ``<archive stem>.README.md``."""
    return archive.with_name(f"{archive.name.removesuffix('.tar.gz').removesuffix('.tgz')}.{CARD}")


def export_release(checkpoint: Path, out: Path, *, name: str | None, source: str | None, license_: str,
                   description: str, results: Path | None, with_train_state: bool = False, overwrite: bool = True
                   ) -> tuple[dict[str, Any], str]:
    """Pack ``checkpoint`` as ``out`` with its model card inside; (the index entry, the card's text).

    Args:
        checkpoint: the checkpoint directory.
        out: the archive to write (.tar.gz).
        name: the index name (None: ``<recipe>/<OUT stem>@v1``).
        source: where the archive will be published (an https:// or hf:// address), or None (a placeholder the
            entry asks to fill).
        license_: the weights' license (an SPDX id).
        description: the index entry's description ('' for none).
        results: an ``eval`` results JSON of exactly these weights, or None.
        with_train_state: pack the optimiser state too.
        overwrite: replace an existing ``out``.
    """
    from lavo_zoo.checkpoints.card import build_card, load_results

    meta = check_checkpoint_dir(checkpoint.resolve())
    recipe = str(meta.get("recipe") or "unknown")
    name = name or default_name(recipe, str(out))
    check_release_name(name, recipe)
    scored = load_results(results, meta) if results is not None else None
    metrics, command = _release_metrics(meta, scored, name)
    card = build_card(checkpoint.resolve(), meta, name=name, license=license_, results=scored)
    left_out = pack_checkpoint(checkpoint.resolve(), out, with_train_state, extra={CARD: card}, overwrite=overwrite)
    if left_out:
        click.echo(f"note: left out of the archive, as not a checkpoint's files: {', '.join(left_out)}", err=True)
    digest, size = cache_mod.sha256_file(out), out.stat().st_size
    entry = {"name": name, "recipe": recipe, "config": name.split("@")[0],
             "source": source or f"<publish {out.name}, then put its https:// or hf:// address here>",
             "sha256": digest, "size": size, "license": license_,
             **({"description": description} if description else {}), "metrics": metrics, "command": command}
    return entry, card


def check_release_name(name: str, recipe: str) -> None:
    """Refuse an index name that is malformed or names another domain than the checkpoint's recipe."""
    if not NAME_RE.match(name):
        raise UsageError(f"--name must look like <domain>/<config>@<tag>, got '{name}'")
    if name.split("/")[0] != recipe:
        raise UsageError(f"--name {name} names the domain '{name.split('/')[0]}', but this is a '{recipe}' checkpoint; "
                         f"give --name {recipe}/<config>@<tag>")


def _release_metrics(meta: dict[str, Any], results: dict[str, Any] | None, name: str) -> tuple[dict[str, Any], str]:
    """(metrics, command): from an eval results JSON when given (every metric checked by ``load_results``), else
    what training recorded in meta.json (its non-finite values left out, saying so)."""
    if results is None:
        logged = _numbers_only(meta.get("metrics") or {})
        finite, dropped = _finite_only(logged)
        if dropped:
            click.echo(f"note: left out of the entry the metrics training logged as non-finite: {', '.join(dropped)}",
                       err=True)
        return finite, f"logged by training at step {meta.get('step')}; re-measure: lavo-zoo eval {name} --split test"
    metrics = {k: v["value"] for k, v in results["metrics"].items()}
    from lavo_zoo.checkpoints.card import scoring_command

    return metrics, scoring_command(name, results)


def _numbers_only(tree: Any) -> dict[str, Any]:
    """The numeric leaves of a nested mapping (anything else dropped)."""
    if not isinstance(tree, dict):
        return {}
    kept = {str(k): (_numbers_only(v) if isinstance(v, dict) else v) for k, v in tree.items()
            if isinstance(v, dict) or (isinstance(v, (int, float)) and not isinstance(v, bool))}
    return {k: v for k, v in kept.items() if v != {}}


def _finite_only(tree: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """(the finite leaves of a nested mapping of numbers, the names of the others)."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            inner, gone = _finite_only(value, f"{prefix}{key}/")
            dropped += gone
            if inner:
                kept[key] = inner
        elif math.isfinite(value):
            kept[key] = value
        else:
            dropped.append(f"{prefix}{key}={value}")
    return kept, dropped
