"""The recipe contract, as reusable checks on a recipe's small config (e.g. ``lm/tiny-lavo``): it trains, resumes
exactly, evaluates to a results JSON whose metrics declare their direction, and refuses a missing ``data.path``.

Every check takes the config name or path, a fresh temporary folder and optional ``key=value`` overrides that make
the run smaller still (the built-in recipes' tests pass their own; plugins usually need none).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import torch

from lavo_zoo.errors import ZooError

# Two optimiser steps, a checkpoint after each, no periodic validation: the smallest run that exercises everything.
SHORT_RUN = ["train.max_steps=2", "train.save_every=1", "train.log_every=1", "train.eval_every=0",
             "train.eval_per_epoch=false", "train.early_stopping_patience=0", "train.num_workers=0",
             "train.keep_last=2"]


def _train(config: str, out: Path, overrides: list[str], resume: str | None = None) -> Path:
    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.engine.trainer import Trainer

    recipe, cfg = resolve_config(config, SHORT_RUN + list(overrides))
    Trainer(recipe, cfg, out, device="cpu", resume=resume).fit()
    return out / "checkpoints" / "last"


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(checkpoint / "model.safetensors"))


def check_trains(config: str, tmp_path: Path, overrides: list[str] = ()) -> None:
    """Two optimiser steps on the built-in data: finite losses, a complete checkpoint, and the weights moved.

    Args:
        config: the recipe's small config (``my_domain/tiny``, or a path to one).
        tmp_path: a fresh, empty folder for the runs (pytest's ``tmp_path``).
        overrides: ``key=value`` overrides applied to the config (e.g. a smaller model).

    Raises:
        AssertionError: naming the config and what broke.
    """
    import json

    last = _train(config, tmp_path / "run", list(overrides))
    assert (last / "model.safetensors").is_file() and (last / "meta.json").is_file(), f"{config}: no checkpoint"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r.get("split") == "train" and "loss" in r]
    assert losses and all(math.isfinite(x) for x in losses), f"{config}: training losses {losses}"
    first, second = _weights(last.parent / "step-1"), _weights(last.parent / "step-2")
    assert any(not torch.equal(first[k], v) for k, v in second.items() if v.is_floating_point()), \
        f"{config}: the second optimiser step left every weight unchanged"


def check_resumes_exactly(config: str, tmp_path: Path, overrides: list[str] = ()) -> None:
    """A run stopped after step 1 and resumed (``--resume auto``) ends bit-identical to an uninterrupted one.

    Args:
        config: the recipe's small config (``my_domain/tiny``, or a path to one).
        tmp_path: a fresh, empty folder for the runs (pytest's ``tmp_path``).
        overrides: ``key=value`` overrides applied to the config (e.g. a smaller model).

    Raises:
        AssertionError: naming the config and what broke.
    """
    straight = _weights(_train(config, tmp_path / "straight", list(overrides)))
    _train(config, tmp_path / "stopped", list(overrides) + ["train.max_steps=1"])
    resumed = _weights(_train(config, tmp_path / "stopped", list(overrides), resume="auto"))
    assert straight.keys() == resumed.keys(), f"{config}: the resumed run has other weights"
    for key, value in straight.items():
        assert torch.equal(value, resumed[key]), f"{config}: weight {key} differs after a stop and resume"


def check_evaluates(config: str, tmp_path: Path, overrides: list[str] = (), split: str = "test",
                    max_batches: int | None = None) -> dict:
    """``eval`` of a trained checkpoint gives the results JSON: finite metrics, each with its direction
    (``max_batches`` limits the evaluation, as ``lavo-zoo eval --max-batches`` does).

    Args:
        config: the recipe's small config (``my_domain/tiny``, or a path to one).
        tmp_path: a fresh, empty folder for the runs (pytest's ``tmp_path``).
        overrides: ``key=value`` overrides applied to the config (e.g. a smaller model).
        split: the split ``eval`` scores.
        max_batches: at most this many evaluation batches (None: the whole split).

    Returns:
        The results JSON, as a dict.

    Raises:
        AssertionError: naming the config and what broke.
    """
    from lavo_zoo.engine.evaluate import evaluate_checkpoint

    last = _train(config, tmp_path / "run", list(overrides))
    results = evaluate_checkpoint(last, split=split, device="cpu", max_batches=max_batches)
    for key in ("recipe", "checkpoint", "checkpoint_sha256", "split", "metrics", "num_samples", "config", "versions",
                "device", "duration_s"):
        assert key in results, f"{config}: the results JSON has no '{key}'"
    assert results["metrics"], f"{config}: the evaluation produced no metric"
    for name, metric in results["metrics"].items():
        assert isinstance(metric["higher_is_better"], bool), f"{config}: metric {name} declares no direction"
        assert math.isfinite(metric["value"]), f"{config}: metric {name} is {metric['value']}"
    assert results["num_samples"] > 0, f"{config}: nothing was scored"
    return results


def check_refuses_missing_data(config: str, tmp_path: Path, overrides: list[str] = ()) -> None:
    """``data.path`` pointing nowhere is a clear error that names the path, raised before any training.

    Args:
        config: the recipe's small config (``my_domain/tiny``, or a path to one).
        tmp_path: a fresh, empty folder for the runs (pytest's ``tmp_path``).
        overrides: ``key=value`` overrides applied to the config (e.g. a smaller model).

    Raises:
        AssertionError: naming the config and what broke.
    """
    from lavo_zoo.engine.configs import resolve_config

    missing = tmp_path / "no-such-dataset"
    recipe, cfg = resolve_config(config, list(overrides) + [f"data.path={missing}"])
    try:
        recipe.build_dataset(recipe.resolve(cfg), "train")
    except ZooError as e:
        assert str(missing) in str(e) or missing.name in str(e), f"{config}: the error does not name the path: {e}"
    else:
        raise AssertionError(f"{config}: data.path={missing} (absent) was accepted")


def recipe_checks(config: str, overrides: list[str] = (), max_eval_batches: int | None = None
                  ) -> list[Callable[[Path], None]]:
    """Every recipe contract check for ``config`` as callables taking a fresh temporary folder (ids via ``repr``).

    Args:
        config: the recipe's small config (``my_domain/tiny``, or a path to one).
        overrides: ``key=value`` overrides applied to the config (e.g. a smaller model).
        max_eval_batches: at most this many evaluation batches in :func:`check_evaluates` (None: the whole split).
    """
    out = []
    for fn in (check_trains, check_resumes_exactly, check_evaluates, check_refuses_missing_data):
        extra = {"max_batches": max_eval_batches} if fn is check_evaluates else {}
        out.append(_NamedCheck(functools.partial(fn, config, overrides=list(overrides), **extra),
                               f"{fn.__name__.removeprefix('check_')}[{config}]"))
    return out


class _NamedCheck:
    def __init__(self, fn: Callable[[Path], None], label: str) -> None:
        self.fn, self.label = fn, label

    def __call__(self, tmp_path: Path) -> None:
        self.fn(tmp_path)

    def __repr__(self) -> str:
        return self.label
