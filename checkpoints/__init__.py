"""Released checkpoints: the index (``index``), downloads, the cache and verification (``download``, ``cache``,
``resolve``), archives (``archive``), model cards (``card``), uploads to the Hugging Face Hub (``push``), their
commands (``cli``) and ``lavo_zoo.load`` (``load``). A run's own checkpoint files are written and read by
:mod:`lavo_zoo.engine.checkpoint_io`.

    list_checkpoints("lm/*")              index entries as rows for `lavo-zoo list checkpoints`
    resolve_checkpoint("lm/tiny-lavo@v1") a local checkpoint directory (downloaded, verified, unpacked as needed)
    with open_checkpoint(ref) as path:    any reference a user may type: directory, archive, index name, URL, hf://
    fetch_reference("https://.../x.tar.gz#sha256=...")   the verified cached file
    load_predictor("runs/x")              the domain's predictor of a trained model (lavo_zoo.load)
"""
from __future__ import annotations

from typing import Any

from lavo_zoo.checkpoints.index import IndexEntry, load_index
from lavo_zoo.checkpoints.resolve import fetch_reference, open_checkpoint, parse_reference, resolve_checkpoint

__all__ = ["IndexEntry", "fetch_reference", "list_checkpoints", "load_index", "load_predictor", "open_checkpoint",
           "parse_reference", "resolve_checkpoint"]


def load_predictor(name_or_path: Any, device: str | None = None, overrides: Any = (), recipe: str | None = None
                   ) -> Any:
    """The predictor of a trained model: :func:`lavo_zoo.checkpoints.load.load_predictor` (``lavo_zoo.load``), imported
    on first use (it imports torch).

    Its arguments are stated on `lavo_zoo.checkpoints.load.load_predictor`.
    """
    from lavo_zoo.checkpoints.load import load_predictor as load

    return load(name_or_path, device, overrides, recipe)


def list_checkpoints(pattern: str | None = None) -> list[dict[str, Any]]:
    """One row per index entry whose name matches the glob ``pattern``: name, recipe, size, license, description."""
    return [{"name": e.name, "recipe": e.recipe, "size": e.size, "license": e.license, "description": e.description}
            for e in load_index().match(pattern)]
