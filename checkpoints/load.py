"""Loading a trained model for new inputs: ``lavo_zoo.load`` (this module's :func:`load_predictor`) turns anything
``lavo-zoo eval`` accepts into the domain's predictor; the recipes' inference commands call it too.

    import lavo_zoo
    lm = lavo_zoo.load("runs/tiny-lavo/checkpoints/last")          # a run, a checkpoint, an archive, an index name,
    print(lm.generate("def read(self", max_new_tokens=40, seed=1))  # a URL or an hf:// reference

The predictor of each domain is its recipe's ``infer.py`` class (``lavo_zoo.engine.predictor.Predictor``).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lavo_zoo.errors import CheckpointError, UsageError


def checkpoint_dir(path: Path) -> Path:
    """A run directory's checkpoint (``checkpoints/last``, else the newest step, else ``best``:
    :func:`~lavo_zoo.engine.checkpoint_io.run_checkpoint`), or ``path``."""
    from lavo_zoo.engine.checkpoint_io import META, run_checkpoint

    if (path / META).is_file() or not (path / "checkpoints").is_dir():
        return path
    chosen = run_checkpoint(path)
    if chosen is None:
        raise CheckpointError(f"{path} is a run directory without a complete checkpoint yet")
    return chosen


def load_predictor(name_or_path: str | Path, device: str | Any | None = None, overrides: Sequence[str] = (),
                   recipe: str | None = None) -> Any:
    """The predictor of a trained model: ``lavo_zoo.load``.

    Args:
        name_or_path: a run directory (its newest complete checkpoint), a checkpoint directory, a .tar.gz / .zip
            archive, an index name (``lm/tiny-lavo@v1``), a URL or an ``hf://org/repo@revision/file`` reference
            (downloaded once, verified, cached).
        device: ``cpu``, ``cuda`` or ``cuda:N``, a ``torch.device`` or a GPU index (default: cuda when available).
        overrides: ``key=value`` changes to evaluation or data settings (never the model).
        recipe: the domain the caller expects; a checkpoint of another one is refused.

    Returns:
        The recipe's :class:`~lavo_zoo.engine.predictor.Predictor` subclass (its ``infer.py`` class: ``generate``,
        ``forecast``, ``synthesize``, ``summarize``, ``complete``, ``classify``), its model in eval mode on ``device``.

    Raises:
        CheckpointError: the checkpoint is missing, incomplete, corrupt or does not fit its config.
        UsageError: the checkpoint is of another domain than ``recipe``, its recipe has no predictor, or an override
            changes the model; ``device`` is none of the above or a GPU this machine lacks (an InputError).
    """
    from lavo_zoo.checkpoints.resolve import open_checkpoint
    from lavo_zoo.engine.checkpoint_io import load_model
    from lavo_zoo.engine.env import pick_device

    dev = pick_device(device, "device")
    ref = str(name_or_path)
    if Path(ref).is_dir():
        ref = str(checkpoint_dir(Path(ref)))
    with open_checkpoint(ref) as path:
        found, cfg, model, _ = load_model(path, dev, list(overrides))
    if recipe is not None and found.name != recipe:
        raise UsageError(f"{name_or_path} is a '{found.name}' checkpoint; this needs a '{recipe}' one")
    if found.predictor is None:
        raise UsageError(f"recipe '{found.name}' has no predictor for new inputs; use `lavo-zoo eval` to score it")
    return found.predictor(found, cfg, model, dev, checkpoint=str(name_or_path))
