"""One run of a ``lavo-zoo compare`` study as a typed record: :class:`CellRecord`, what a finished cell's ``cell.json``
holds (or what a collected results JSON says), and how its overrides are read: which is its seed (:func:`is_seed`),
which its attention's name (or schedule of layers), and its options in short (:meth:`CellRecord.options`). Below the
recipes, so that a recipe's analysis of studies (``recall-plot``) reads them as ``compare`` writes them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lavo_zoo.errors import UsageError

SEED_KEY = "train.seed"  # the override that sets a cell's seed
CELL_FILE = "cell.json"
_NOT_SAVED = ("source", "label", "efficiency")  # what a record gains after it is read, never in cell.json


@dataclass
class CellRecord:
    """One run: a study's (attention, seed) cell, or a results JSON given to ``compare --collect``."""

    # the mechanism, or {site: mechanism} ("" for a single-attention model) of a collected results JSON
    attention: str | dict[str, str]
    metrics: dict[str, dict[str, Any]]  # name -> {"value", "higher_is_better", ...} as `lavo-zoo eval` writes them
    seed: int | None = None
    site: str | None = None  # the site the study varied (encoder-decoder recipes)
    config: str | None = None  # the study's CONFIG
    overrides: list[str] = field(default_factory=list)  # the cell's overrides (its attention and seed included)
    num_samples: int | None = None
    checkpoint: str | None = None  # the weights it was scored with (checkpoints/best, or last)
    checkpoint_sha256: str | None = None  # their sha256: the same weights scored twice are one run
    parameters: int | None = None
    train_time_s: float | None = None  # wall time of the training (first-use costs of the process included)
    # steady-state step time (median, s) and step memory (bytes above what a step starts with), measured so that the
    # order the cells run in does not matter (lavo_zoo.compare.steps); None in records of earlier versions
    step_time_s: float | None = None
    step_memory_bytes: int | None = None
    memory_method: str | None = None
    measured_steps: int | None = None  # steps the step time is the median of
    device: str | None = None
    split: str | None = None
    # how the cell ran (lavo_zoo.compare.launchers): {"launcher": "local", "cells_at_once": 2, "threads": 1, ...} or
    # {"launcher": "slurm", "slurm_job": "4711", "slurm_restarts": 1, ...}, with the host; None: in the study's process
    launch: dict[str, Any] | None = None
    source: str | None = None  # the results JSON a collected record was read from
    label: str | None = None  # its row in the table (:func:`label_records`)
    efficiency: dict[str, Any] | None = None  # its row's efficiency lengths (lavo_zoo.compare.efficiency)

    def to_json(self) -> dict[str, Any]:
        """The record as ``cell.json`` holds it."""
        return {k: v for k, v in asdict(self).items() if k not in _NOT_SAVED}

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str | None = None) -> CellRecord:
        """A record from a ``cell.json`` mapping (keys it does not know are ignored)."""
        if not isinstance(data.get("metrics"), dict) or "attention" not in data:
            raise UsageError(f"{source or 'a cell record'} is not a compare cell record (it needs 'attention' and "
                             "'metrics')")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}, **({"source": source} if source else {}))

    def options(self) -> list[str]:
        """The overrides the cell was trained with besides its seed and its attention's name, shortened
        (:func:`short_override`): what sets it apart from the other cells of its attention."""
        return [short_override(o) for o in self.overrides or [] if not is_seed(o) and not _is_attention_name(o)]


def is_seed(override: str) -> bool:
    """Whether ``override`` sets the seed (``train.seed=3``)."""
    return override.partition("=")[0] == SEED_KEY


def _is_attention_name(override: str) -> bool:
    """Whether ``override`` chooses an attention: a mechanism's name, or a schedule of layers (a hybrid row)."""
    key = override.partition("=")[0]
    return key.startswith("model.attention_schedule") or (key.startswith("model.attention") and key.endswith(".name"))


def short_override(override: str) -> str:
    """``model.attention.decoder_self.window_size=32`` -> ``window_size=32``."""
    key, sep, value = override.partition("=")
    return key.rsplit(".", 1)[-1] + sep + value
