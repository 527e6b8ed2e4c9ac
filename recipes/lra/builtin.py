"""The built-in data of the five tasks, each written in its release layout (what ``lavo-zoo data lra/<task>`` writes
and a config without ``data.path`` reads).

Each task's generator sits in its module of :mod:`lavo_zoo.recipes.lra.data`, beside the reader of the same format:
the generator writes exactly the layout the reader reads, so the two change together, and splitting five formats
into ten files would put each layout in two places. This module chooses the generator for a task and keys the cache.
"""
from __future__ import annotations

import platform
from pathlib import Path

from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.errors import ConfigError
from lavo_zoo.recipes.lra.data import TASKS, DataConfig, image, listops, pathfinder, retrieval, text
from lavo_zoo.recipes.lra.data.common import split_sizes

# per task: bump a task's number when its generator's output changes, so that its cached built-in data is rebuilt
# (and only its: Pathfinder's takes minutes to draw)
GENERATOR_VERSIONS = {"listops": 2, "text": 2, "retrieval": 2, "image": 3, "pathfinder": 2}


class BuiltinTasks(BuiltinData):
    """Every task, ``data.builtin_size`` training examples each (validation and test: a tenth, at least 16)."""

    datasets = TASKS

    def config(self, data: DataConfig, dataset: str, size: int | None) -> DataConfig:
        """Task ``dataset`` with ``size`` training examples (default 2,000)."""
        return DataConfig(task=dataset, builtin_size=size or DataConfig().builtin_size)

    def key(self, data: DataConfig) -> dict:
        if data.task not in TASKS:
            raise ConfigError(f"unknown LRA task '{data.task}'; choose one of {', '.join(TASKS)}")
        return {"dataset": data.task, "v": GENERATOR_VERSIONS[data.task], "size": data.builtin_size,
                "seed": data.builtin_seed, "lengths": builtin_lengths(data),
                "difficulty": data.difficulty if data.task == "pathfinder" else None,
                "python": platform.python_version() if data.task in ("text", "retrieval") else None}

    def write(self, out: Path, data: DataConfig) -> Path:
        """The task's generated data in its release layout."""
        return write_task(out, data.task, data.builtin_size, data.builtin_seed, builtin_lengths(data), data.difficulty)


def builtin_lengths(cfg: DataConfig) -> tuple[int, int]:
    """(shortest, longest) built-in input of ``cfg``'s task: the config's ``builtin_min_length`` /
    ``builtin_max_length``, else the task's default."""
    lo, hi = {"listops": (500, 2000), "text": (1000, 4000), "retrieval": (1000, 4000)}.get(cfg.task, (0, 0))
    return cfg.builtin_min_length or lo, cfg.builtin_max_length or hi


def write_task(out: Path, task: str, size: int, seed: int = 0, length_range: tuple[int, int] | None = None,
               difficulty: str = "curv_contour_length_14") -> Path:
    """Write task ``task``'s built-in data (``size`` training examples) into ``out`` in the release layout;
    returns the folder to give as ``data.path``.

    Args:
        out: the folder to write into.
        task: the LRA task (:data:`TASKS`).
        size: the training split's examples (the others in proportion: :func:`split_sizes`).
        seed: the generator's seed.
        length_range: (min, max) sequence length of the generated listops, text and retrieval examples, or None
            (the task's defaults).
        difficulty: Pathfinder's difficulty (its folder's name).

    Raises:
        ConfigError: an unknown task or a size below 1.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown LRA task '{task}'; choose one of {', '.join(TASKS)}")
    if size < 1:
        raise ConfigError(f"the built-in data size must be >= 1, got {size}")
    sizes = split_sizes(size)
    cfg = DataConfig(task=task, builtin_min_length=(length_range or (0, 0))[0],
                     builtin_max_length=(length_range or (0, 0))[1])
    lo, hi = builtin_lengths(cfg)
    out.mkdir(parents=True, exist_ok=True)
    if task == "listops":
        listops.write_dataset(out, sizes, listops.ListOpsGenerator(min_length=lo, max_length=hi), seed)
    elif task == "text":
        text.write_dataset(out, sizes, seed, lo, hi)
    elif task == "retrieval":
        retrieval.write_dataset(out, sizes, seed, lo, hi)
    elif task == "image":
        image.write_dataset(out, sizes, seed)
    else:
        pathfinder.write_dataset(out, sum(sizes.values()), difficulty, seed)
    return out
