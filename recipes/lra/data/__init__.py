"""Long Range Arena data: the five tasks' release formats and their LRA tokenisation, one module per task (each with
the generator of its built-in data beside its reader: the two sides of one format).

=========== ===================================================== ============ ======== =========== =========
task        release layout (``data.path``)                          tokens       length   vocabulary  classes
=========== ===================================================== ============ ======== =========== =========
listops     ``basic_{train,val,test}.tsv``                          ListOps      2,000    16          10
text        ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``    bytes + 1    4,000    257         2
retrieval   ``new_aan_pairs.{train,eval,test}.tsv``                 bytes + 1    4,000 x2 257         2
image       ``cifar-10-batches-bin/{data,test}_batch*.bin``         gray pixels  1,024    256         10
pathfinder  ``<difficulty>/{imgs/<b>/sample_<i>.png,metadata/}``    pixels       1,024    256         2
=========== ===================================================== ============ ======== =========== =========

Without ``data.path`` the task's built-in generator (called through :mod:`lavo_zoo.recipes.lra.builtin`) writes the
same layout once into the cache (``$LAVO_ZOO_CACHE/lra/builtin/<task>-<hash of its settings>``) and the same loader
reads it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from lavo_zoo.config import NonNegativeInt, PositiveInt, Range
from lavo_zoo.errors import ConfigError, DataError
from lavo_zoo.recipes.lra.data import image, listops, pathfinder, retrieval, text
from lavo_zoo.recipes.lra.data.common import (
    BYTE_VOCAB,
    PIXEL_VOCAB,
    SPLITS,
    LRADataset,
    collate,
)

TASKS = ("listops", "text", "retrieval", "image", "pathfinder")


@dataclass(frozen=True)
class TaskInfo:
    max_length: int  # LRA's sequence length (per document for Retrieval)
    vocab_size: int
    num_classes: int
    dual: bool = False  # two documents per example (Retrieval)


TASK_INFO = {
    "listops": TaskInfo(2000, len(listops.VOCAB), listops.NUM_CLASSES),
    "text": TaskInfo(4000, BYTE_VOCAB, text.NUM_CLASSES),
    "retrieval": TaskInfo(4000, BYTE_VOCAB, retrieval.NUM_CLASSES, dual=True),
    "image": TaskInfo(1024, PIXEL_VOCAB, image.NUM_CLASSES),
    "pathfinder": TaskInfo(1024, PIXEL_VOCAB, pathfinder.NUM_CLASSES),
}


@dataclass
class DataConfig:
    task: Literal["listops", "text", "retrieval", "image", "pathfinder"] = "listops"
    path: str | None = None  # the task's release folder (table above); unset: the built-in generated data
    max_length: NonNegativeInt = 0  # tokens kept per sequence (0: LRA's length for the task)
    difficulty: str = "curv_contour_length_14"  # Pathfinder: curv_baseline | curv_contour_length_9 | ..._14
    image_size: PositiveInt = 32  # Pathfinder image side the loader expects
    # built-in data: training examples (validation and test: a tenth each, >= 16); at most LRA's largest split, x1.25
    builtin_size: Annotated[int, Range(ge=1, le=200_000)] = 2000
    builtin_seed: NonNegativeInt = 0
    builtin_min_length: NonNegativeInt = 0  # built-in ListOps tokens / Text and Retrieval bytes (0: LRA's range)
    builtin_max_length: NonNegativeInt = 0
    cache_dir: str | None = None  # folder for built-in data (default: $LAVO_ZOO_CACHE/lra/builtin or the user cache's)

    def info(self) -> TaskInfo:
        """The task's fixed facts (:data:`TASK_INFO`: maximum length, vocabulary, classes, two documents or one)."""
        return TASK_INFO[self.task]

    def length(self) -> int:
        """The input length: ``max_length``, else the task's."""
        return self.max_length or self.info().max_length


def load_examples(cfg: DataConfig, split: str, root: Path | None = None) -> LRADataset:
    """``split`` of the configured task as a dataset, read from ``root`` (default: ``data.path``; the recipe passes
    its built-in data's folder when that is unset)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split '{split}'; choose one of {', '.join(SPLITS)}")
    if cfg.task not in TASKS:
        raise ConfigError(f"unknown LRA task '{cfg.task}'; choose one of {', '.join(TASKS)}")
    if cfg.max_length < 0:
        raise ConfigError(f"data.max_length must be >= 0 (0 = LRA's length), got {cfg.max_length}")
    if root is None:
        if not cfg.path:
            raise ConfigError("no data.path to read the task's files from")
        root = Path(cfg.path).expanduser()
    if not root.exists():
        raise DataError(f"data.path {root} does not exist")
    n = cfg.length()
    module = {"listops": listops, "text": text, "retrieval": retrieval, "image": image}.get(cfg.task)
    if module is not None:
        examples = module.load_split(root, split, n)
    else:
        examples = pathfinder.load_split(root, split, n, cfg.difficulty, cfg.image_size)
    return LRADataset(examples, f"{root} ({cfg.task}, {split} split)")


__all__ = [
    "TASKS",
    "TASK_INFO",
    "DataConfig",
    "LRADataset",
    "TaskInfo",
    "collate",
    "load_examples",
]
