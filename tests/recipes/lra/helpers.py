"""Helpers for the LRA tests: a tiny config of each task on small built-in data, a split read by the loaders."""
from pathlib import Path

from lavo_zoo.engine.configs import config_from_dict
from lavo_zoo.recipes.lra.data import DataConfig, load_examples

SETTINGS = {"listops": {"builtin_min_length": 10, "builtin_max_length": 60},
            "text": {"builtin_min_length": 40, "builtin_max_length": 120},
            "retrieval": {"builtin_min_length": 40, "builtin_max_length": 120},
            "image": {}, "pathfinder": {"difficulty": "curv_baseline"}}


def tiny(task: str, attention: dict | None = None):
    return config_from_dict({
        "recipe": "lra",
        "data": {"task": task, "max_length": 64, "builtin_size": 16, **SETTINGS[task]},
        "model": {"embed_dim": 16, "ffn_dim": 32, "num_heads": 2,
                  "attention": attention or {"name": "lavo", "num_bases": 8, "window_size": 8}},
        "train": {"batch_size": 4, "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "eval_batches": 1,
                  "save_every": 2, "log_every": 1}})


def load(task: str, root: Path, split: str = "train", **kw):
    """The examples of ``split`` that the loader of ``task`` reads from the release folder ``root``."""
    return load_examples(DataConfig(task=task, path=str(root), **kw), split)
