"""A study's efficiency lengths, as CAB reports them, beside its metrics: per row, the shortest sequence length at
which one layer of that attention (the study site's mechanism and options, at the model's ``embed_dim`` /
``num_heads`` and the site's pattern) is faster than softmax (``sdpa``), and the shortest at which it needs less
peak memory, forward + backward. The search is :mod:`lavo_zoo.bench.efficiency`'s, run by ``lavo-zoo bench
attention``'s sweep (a sweep over the study's lengths, 256..16384 by default, then bisection to within 10 %;
:class:`Efficiency`). The measurements are kept in ``OUT/efficiency/<row>.json`` and reused while their settings are
the same, so a re-run or ``--collect`` does not measure again. The ``sdpa`` row shows "-".
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lavo_zoo.atomic import put_file

EFFICIENCY_DIR = "efficiency"
EFFICIENCY_COLUMNS = {"time": "faster than softmax from", "memory": "smaller than softmax from"}


@dataclass(frozen=True)
class Efficiency:
    """How a study measures each row's efficiency lengths: one attention layer, forward + backward, float32, batch 1,
    median of ``repeats`` timed runs after ``warmup``, swept over ``lengths`` and bisected to ``tolerance``
    (relative), every length of both the row's attention and ``sdpa`` in fresh processes on CPU (``isolate`` None:
    exact peak memory there) and in process on CUDA."""

    lengths: tuple[int, ...] = (256, 1024, 4096, 16384)
    repeats: int = 3
    warmup: int = 1
    tolerance: float = 0.1
    step: int = 1
    timeout: float | None = None  # seconds per isolated measurement
    isolate: bool | None = None

    def settings(self, device: str) -> dict[str, Any]:
        """What the measurement depends on besides the attention (the cache key's part)."""
        return {"mode": "fwdbwd", "dtype": "float32", "batch": 1, "device": device, "lengths": list(self.lengths),
                "repeats": self.repeats, "warmup": self.warmup, "tolerance": self.tolerance, "step": self.step,
                "isolate": device == "cpu" if self.isolate is None else self.isolate}



def attention_setup(recipe: Any, cfg: Any, key: str) -> dict[str, Any] | None:
    """The attention layer a row's efficiency lengths measure: the mechanism and options at ``key`` with the model's
    ``embed_dim`` and ``num_heads`` and the site's pattern (a site is built as the model's site attention builds it;
    a single-attention model's pattern is read from the attention layers of the built model). None where the model
    has no ``embed_dim`` / ``num_heads`` or no such layer."""
    from lavo_zoo.attention.base import Attention

    spec = cfg
    for part in key.split("."):
        spec = getattr(spec, part)
    embed_dim, heads = getattr(cfg.model, "embed_dim", None), getattr(cfg.model, "num_heads", None)
    if not isinstance(embed_dim, int) or not isinstance(heads, int):
        return None
    if key == "model.attention":
        layers = [m for m in recipe.build_model(cfg).modules() if isinstance(m, Attention)]
    else:
        layers = [cfg.model.attention.build(key.rpartition(".")[2], embed_dim, heads)]
    if not layers:
        return None
    return {"attention": spec.name, "options": dict(spec.options), "embed_dim": layers[0].embed_dim,
            "heads": layers[0].num_heads, "pattern": layers[0].pattern}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def cached_efficiency(setups: dict[str, dict[str, Any] | None], out_dir: Path, device: str,
                      efficiency: Efficiency, echo: bool = True) -> tuple[dict[str, dict[str, Any]], dict[tuple, list]]:
    """The rows' efficiency lengths kept in ``out_dir/efficiency/`` from an earlier measurement with the same
    attention, model sizes, pattern and settings on ``device`` (its name: ``cpu``, ``cuda``, ``cuda:1``), and the
    rows still to measure, grouped by model shape: ``({label: lengths}, {(embed_dim, heads, pattern): [(label,
    key), ...]})`` (see :func:`study_efficiency`).

    Args:
        setups: each row's layer (:func:`attention_setup`), None for a row without one.
        out_dir: the study's folder.
        device: the device's name.
        efficiency: how the lengths are measured.
        echo: print a line for each row whose lengths are kept.
    """
    from lavo_zoo.bench.efficiency import BASELINE

    settings = efficiency.settings(device)
    folder = out_dir / EFFICIENCY_DIR
    baseline_options = next((s["options"] for s in setups.values() if s and s["attention"] == BASELINE), {})
    found: dict[str, dict[str, Any]] = {}
    todo: dict[tuple, list[tuple[str, dict[str, Any]]]] = {}
    for label, setup in setups.items():
        if setup is None:
            continue
        if setup["attention"] == BASELINE:
            found[label] = {"is_baseline": True}
            continue
        key = {**setup, "baseline_options": baseline_options, **settings}
        cached = _read_json(folder / f"{label}.json")
        if cached is not None and cached.get("key") == key:
            found[label] = _found(cached)
            if echo:
                click.echo(f"efficiency lengths of {label}: measured earlier with the same settings, kept", err=True)
            continue
        todo.setdefault((setup["embed_dim"], setup["heads"], setup["pattern"]), []).append((label, key))
    return found, todo


def study_efficiency(setups: dict[str, dict[str, Any] | None], out_dir: Path, device: str | None,
                     efficiency: Efficiency) -> dict[str, dict[str, Any]]:
    """{row label: its efficiency lengths (``{"time": ..., "memory": ...}``, ``{"is_baseline": True}`` for sdpa)} for
    every row with a setup (:func:`attention_setup`). Each is read from ``out_dir/efficiency/<label>.json`` when
    that was measured with the same attention, model sizes, pattern and :class:`Efficiency` settings
    (:func:`cached_efficiency`); the others are measured together (one ``sdpa`` sweep per model shape, with the
    study's ``sdpa`` options where it is a row) and written there.

    Args:
        setups: each row's layer (:func:`attention_setup`), None for a row without one.
        out_dir: the study's folder.
        device: where to measure (None: the default device, :func:`~lavo_zoo.engine.env.pick_device`).
        efficiency: how the lengths are measured.
    """
    from lavo_zoo.bench.attention import run_sweep
    from lavo_zoo.bench.efficiency import BASELINE
    from lavo_zoo.engine.env import pick_device

    settings = efficiency.settings(str(pick_device(device)))
    folder = out_dir / EFFICIENCY_DIR
    found, todo = cached_efficiency(setups, out_dir, settings["device"], efficiency)
    for (embed_dim, heads, pattern), rows in todo.items():
        names = [key["attention"] for _, key in rows]
        baseline_options = rows[0][1]["baseline_options"]
        click.echo(f"efficiency lengths of {', '.join(label for label, _ in rows)} against {BASELINE}: one layer, "
                   f"D={embed_dim} H={heads} {pattern}, forward + backward at {settings['lengths']} and bisection "
                   f"(--no-efficiency skips this)", err=True)
        options = {key["attention"]: key["options"] for _, key in rows}
        layer = {"pattern": pattern, "embed_dim": embed_dim, "heads": heads, "chunk_size": 16384,
                 **{k: settings[k] for k in ("mode", "device", "dtype", "batch", "repeats", "warmup")}}
        data = run_sweep([*names, BASELINE], settings["lengths"], {**options, BASELINE: baseline_options}, layer,
                         settings["isolate"], efficiency.timeout,
                         {"tolerance": settings["tolerance"], "step": settings["step"]},
                         echo=lambda line: click.echo(line, err=True))
        folder.mkdir(parents=True, exist_ok=True)
        for label, key in rows:
            name = key["attention"]
            entry = {"key": key, "settings": data["settings"],
                     "results": [r for r in data["results"] if r["attention"] in (name, BASELINE)],
                     "efficiency_lengths": {name: data["efficiency_lengths"][name]}}
            put_file(folder / f"{label}.json", json.dumps(entry, indent=2) + "\n")
            found[label] = _found(entry)
    return found


def _found(entry: dict[str, Any]) -> dict[str, Any]:
    """A row's efficiency lengths from its efficiency/<label>.json, with the swept lengths and the machine."""
    from lavo_zoo.engine.env import describe_machine

    lengths = next(iter(entry["efficiency_lengths"].values()))
    return {**lengths, "swept": entry["key"]["lengths"], "tolerance": entry["key"]["tolerance"],
            "machine": describe_machine(entry["settings"]["machine"])}


@dataclass
class EfficiencyPlan:
    """The efficiency lengths a study measures, handed to its launcher beside the cells: each row's layer
    (:func:`attention_setup`), the device and how (:class:`Efficiency`)."""

    setups: dict[str, dict[str, Any] | None]
    device: str | None
    how: Efficiency

    def measure(self, out_dir: Path) -> dict[str, dict[str, Any]]:
        """The rows' efficiency lengths (:func:`study_efficiency`), measured here (those kept in ``out_dir`` read)."""
        return study_efficiency(self.setups, out_dir, self.device, self.how)


def collect_efficiency(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """{row label: efficiency lengths} from the ``efficiency/`` folders of compare folders under ``paths``; a label
    measured differently in two of them (other model sizes or settings) reads "varies"."""
    found: dict[str, dict[str, Any]] = {}
    keys: dict[str, Any] = {}
    for path in paths:
        for file in sorted(path.rglob(f"{EFFICIENCY_DIR}/*.json")) if path.is_dir() else []:
            entry = _read_json(file)
            if not entry or not isinstance(entry.get("efficiency_lengths"), dict) or "key" not in entry:
                continue
            label, key = file.stem, entry["key"]
            if label in keys and keys[label] != key:
                found[label] = {c: {"text": "varies"} for c in EFFICIENCY_COLUMNS}
                continue
            keys.setdefault(label, key)
            found.setdefault(label, _found(entry))
    return found
