"""``lavo-zoo compare``: the project's one study runner. One recipe config, several attentions (or the config's own,
for repeated runs) and seeds, the same budget for each, one table with every metric's mean and spread.

Every (attention, seed) cell is a normal training run in ``OUT/cells/<attention>-seed<seed>/`` (resumed with
``--resume auto`` if it was killed) followed by an evaluation of its ``checkpoints/best`` (the validation-selected
weights) or, when the run kept none, ``checkpoints/last``. A cell is finished once its ``cell.json`` exists: running
the same command again skips it, so an interrupted study continues where it stopped. A cell is reused only while
its resolved config equals the study's (another budget or option is refused, naming the difference; ``--rerun``
retrains it). The table (``table.md``, ``table.csv``) and a bar chart (``chart.png``) give every metric's mean and
standard deviation over seeds, the best value per column marked by the metric's direction, and per cell the
parameter count, training time and peak memory (measured as :mod:`lavo_zoo.engine.memory` describes).

Beside the metrics, each attention row gets its efficiency lengths against softmax (``sdpa``), as CAB reports them:
the shortest sequence length at which one layer of that attention (the study site's mechanism and options, at the
model's ``embed_dim`` / ``num_heads`` and the site's pattern) is faster than ``sdpa``, and the shortest at which it
needs less peak memory, forward + backward, found by the search of ``lavo-zoo bench attention``
(:mod:`lavo_zoo.bench.efficiency`: a sweep over ``--efficiency-lengths``, 256..16384 by default, then bisection to
within 10 %; :class:`Efficiency`). The measurements are kept in ``OUT/efficiency/<attention>.json`` and reused while
their settings are the same, so a re-run or ``--collect`` does not measure again; ``--no-efficiency`` leaves them
out. The ``sdpa`` row shows "-".

``lavo-zoo compare --collect PATH ...`` builds the same table from results JSONs that already exist (files, run
folders or earlier compare folders, with their efficiency measurements).
"""
from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lavo_zoo.errors import UsageError
from lavo_zoo.options import device_option, out_option

CELL_FILE = "cell.json"
EFFICIENCY_DIR = "efficiency"
EFFICIENCY_COLUMNS = {"time": "faster than softmax from", "memory": "smaller than softmax from"}


@dataclass(frozen=True)
class Cell:
    """One (attention, seed) run of the study."""

    attention: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.attention}-seed{self.seed}"


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


# ------------------------------------------------------------------------------------------------------ running
def attention_key(cfg: Any, site: str | None) -> str:
    """The dotted config key of the attention to vary: ``model.attention`` or ``model.attention.<site>``."""
    from lavo_zoo.attention import AttentionSpec, SiteAttention

    attention = getattr(getattr(cfg, "model", None), "attention", None)
    if isinstance(attention, AttentionSpec):
        if site is not None:
            raise UsageError(f"--site {site}: this recipe's model has one attention (model.attention), not sites; "
                             "leave --site out")
        return "model.attention"
    if isinstance(attention, SiteAttention):
        from lavo_zoo.attention import SITE_PATTERNS

        if site is None:
            raise UsageError(f"this recipe's model has attention sites ({', '.join(SITE_PATTERNS)}): name the one to "
                             "vary with --site, e.g. --site encoder_self")
        if site not in SITE_PATTERNS:
            from lavo_zoo.errors import did_you_mean

            raise UsageError(f"unknown attention site '{site}'{did_you_mean(site, SITE_PATTERNS)}; "
                             f"choose one of {', '.join(SITE_PATTERNS)}")
        return f"model.attention.{site}"
    raise UsageError("this recipe's config has no model.attention (an AttentionSpec or SiteAttention), so there is "
                     "no attention to compare")


def _check_attention(cfg: Any, key: str) -> None:
    """Refuse a cell whose attention is not registered or lacks an option given to it (a site-less recipe checks the
    pattern itself when it builds the model; a :class:`SiteAttention` was checked when the config was read)."""
    from lavo_zoo.attention import ATTENTIONS, attention_class

    spec = cfg
    for part in key.split("."):
        spec = getattr(spec, part)
    if spec.name not in ATTENTIONS.names():
        from lavo_zoo.errors import did_you_mean

        raise UsageError(f"--attentions: unknown attention '{spec.name}'{did_you_mean(spec.name, ATTENTIONS.names())}"
                         "; `lavo-zoo list attentions` shows the registered ones")
    spec.check(attention_class(spec.name).patterns[0], key)


def cell_overrides(key: str | None, cell: Cell, options: dict[str, dict[str, Any]]) -> list[str]:
    """Overrides that select the cell's attention (its own options from ``-o ATTN.key=value``; none when the study
    keeps the config's attention, ``key`` None) and seed."""
    if key is None:
        return [f"train.seed={cell.seed}"]
    extra = [f"{key}.{k}={json.dumps(v)}" for k, v in options.get(cell.attention, {}).items()]
    return [f"{key}.name={cell.attention}", *extra, f"train.seed={cell.seed}"]


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): data}


def check_reusable(cell_dir: Path, resolved: dict[str, Any], rerun: bool) -> None:
    """Keep ``cell_dir`` only if it was trained with ``resolved`` (the cell's resolved config as a mapping); with
    ``rerun`` a cell trained otherwise is removed (to be trained again), without it the study is refused naming
    the difference. A cell folder without a config.yaml yet is kept (its run had not started)."""
    import yaml

    saved_file = cell_dir / "config.yaml"
    if not saved_file.is_file():
        return
    saved, now = _flat(yaml.safe_load(saved_file.read_text())), _flat(resolved)
    diff = [f"{k}: {saved.get(k)!r} there, {now.get(k)!r} now" for k in sorted(set(saved) | set(now))
            if saved.get(k) != now.get(k)]
    if not diff:
        return
    if rerun:
        shutil.rmtree(cell_dir)
        return
    raise UsageError(f"{cell_dir} was trained with another config ({'; '.join(diff[:6])}"
                     f"{' ...' if len(diff) > 6 else ''}); its results would not be comparable. Give another --out, "
                     "the study's earlier settings, or --rerun to train the cell again")


def parse_options(items: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``("lavo.num_bases=64", ...)`` -> ``{"lavo": {"num_bases": 64}}`` (values read as YAML)."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, dot, rest = item.partition(".")
        key, eq, value = rest.partition("=")
        if not (dot and eq and name and key):
            raise UsageError(f"-o {item}: write an attention option as ATTENTION.KEY=VALUE, e.g. lavo.num_bases=64")
        out.setdefault(name, {})[key] = yaml.safe_load(value)
    return out


def run_cell(recipe: Any, cfg: Any, cell_dir: Path, device: str | None, split: str,
             max_batches: int | None = None) -> dict[str, Any]:
    """Train (or resume) and evaluate one cell (``cfg`` resolved); writes and returns its record."""
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.engine.evaluate import evaluate_checkpoint
    from lavo_zoo.engine.memory import PeakMemory
    from lavo_zoo.engine.trainer import Trainer

    parameters = sum(p.numel() for p in recipe.build_model(cfg).parameters())
    timing_file = cell_dir / "compare-timing.json"
    spent = json.loads(timing_file.read_text())["train_time_s"] if timing_file.exists() else 0.0
    with PeakMemory(pick_device(device)) as peak:
        start = time.perf_counter()
        Trainer(recipe, cfg, cell_dir, device=device, resume="auto").fit()
        spent += time.perf_counter() - start
        timing_file.write_text(json.dumps({"train_time_s": spent}))
        checkpoints = cell_dir / "checkpoints"
        chosen = checkpoints / "best" if (checkpoints / "best").is_dir() else checkpoints / "last"
        results = evaluate_checkpoint(chosen, split=split, device=device, max_batches=max_batches)
    (cell_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return {"metrics": results["metrics"], "num_samples": results["num_samples"], "checkpoint": str(chosen),
            "parameters": parameters, "train_time_s": round(spent, 3), "peak_memory_bytes": peak.bytes,
            "memory_method": peak.method, "device": results["device"], "split": split}


# ---------------------------------------------------------------------------------------------------- efficiency
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


def study_efficiency(setups: dict[str, dict[str, Any] | None], out_dir: Path, device: str | None,
                     efficiency: Efficiency) -> dict[str, dict[str, Any]]:
    """{row label: its efficiency lengths (``{"time": ..., "memory": ...}``, ``{"is_baseline": True}`` for sdpa)} for
    every row with a setup (:func:`attention_setup`). Each is read from ``out_dir/efficiency/<label>.json`` when
    that was measured with the same attention, model sizes, pattern and :class:`Efficiency` settings; the others
    are measured together (one ``sdpa`` sweep per model shape, with the study's ``sdpa`` options where it is a row)
    and written there."""
    from lavo_zoo.bench.attention import run_sweep
    from lavo_zoo.bench.efficiency import BASELINE
    from lavo_zoo.engine.env import pick_device

    settings = efficiency.settings(str(pick_device(device)))
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
            click.echo(f"efficiency lengths of {label}: measured earlier with the same settings, kept", err=True)
            continue
        todo.setdefault((setup["embed_dim"], setup["heads"], setup["pattern"]), []).append((label, key))
    for (embed_dim, heads, pattern), rows in todo.items():
        names = [key["attention"] for _, key in rows]
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
            tmp = folder / f"{label}.json.tmp"
            tmp.write_text(json.dumps(entry, indent=2) + "\n")
            tmp.rename(folder / f"{label}.json")
            found[label] = _found(entry)
    return found


def _found(entry: dict[str, Any]) -> dict[str, Any]:
    """A row's efficiency lengths from its efficiency/<label>.json, with the swept lengths and the machine."""
    from lavo_zoo.engine.env import describe_machine

    lengths = next(iter(entry["efficiency_lengths"].values()))
    return {**lengths, "swept": entry["key"]["lengths"], "tolerance": entry["key"]["tolerance"],
            "machine": describe_machine(entry["settings"]["machine"])}


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


def run_study(config: str, attentions: list[str], seeds: list[int], site: str | None, overrides: list[str],
              options: dict[str, dict[str, Any]], out_dir: Path, device: str | None, split: str,
              rerun: bool = False, max_batches: int | None = None,
              efficiency: Efficiency | None = None, dry_run: bool = False) -> list[dict]:
    """Run every unfinished cell (attention-major order) and return all cell records. An empty ``attentions``
    keeps the config's own attention (one row: repeated runs over ``seeds``). With ``efficiency``, every record also
    gets its row's efficiency lengths (:func:`study_efficiency`; not in cell.json). ``dry_run``: check every cell
    (its config, the data of the first, each model) and print the plan; nothing is trained or written."""
    from lavo_zoo.config import to_dict
    from lavo_zoo.engine.recipe import resolve_config

    _, cfg = resolve_config(config, overrides)  # validates the config and the overrides once, before any training
    key = attention_key(cfg, site) if attentions else None
    if not attentions and (site is not None or options):
        raise UsageError("--site and -o choose attentions to compare: use them with --attentions")
    unknown = sorted(set(options) - set(attentions))
    if unknown:
        raise UsageError(f"-o names {', '.join(unknown)}, which --attentions does not list")
    own = _attention_label(to_dict(cfg))
    cells = [Cell(a, s) for a in attentions or [own] for s in seeds]
    planned = []
    for cell in cells:  # every cell's config is checked (and resolved) before the first one trains
        cell_overrides_ = overrides + cell_overrides(key, cell, options)
        recipe, cell_cfg = resolve_config(config, cell_overrides_)
        if key is not None:
            _check_attention(cell_cfg, key)
        cell_cfg = recipe.resolve(cell_cfg)
        cell_dir = out_dir / "cells" / cell.name
        check_reusable(cell_dir, to_dict(cell_cfg), rerun)
        planned.append((cell, recipe, cell_cfg, cell_overrides_, cell_dir))
    if dry_run:
        _print_plan(planned, config, device)
        return []
    records = []
    for i, (cell, recipe, cell_cfg, cell_overrides_, cell_dir) in enumerate(planned, 1):
        done = cell_dir / CELL_FILE
        if done.exists():
            click.echo(f"[{i}/{len(cells)}] {cell.name}: finished earlier with the same config, kept", err=True)
        else:
            click.echo(f"[{i}/{len(cells)}] {cell.name}: training in {cell_dir}", err=True)
            cell_dir.mkdir(parents=True, exist_ok=True)
            record = {"attention": cell.attention, "seed": cell.seed, "site": site, "config": config,
                      "overrides": cell_overrides_,
                      **run_cell(recipe, cell_cfg, cell_dir, device, split, max_batches)}
            tmp = done.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, indent=2) + "\n")
            tmp.rename(done)  # atomic: a cell is either finished or not
        records.append(json.loads(done.read_text()))
    if efficiency is not None:
        setups: dict[str, dict[str, Any] | None] = {}
        for cell, recipe, cell_cfg, _, _ in planned:
            if cell.attention not in setups:
                setups[cell.attention] = _row_setup(recipe, cell_cfg, key)
        found = study_efficiency(setups, out_dir, device, efficiency)
        for record in records:
            if record["attention"] in found:
                record["efficiency"] = found[record["attention"]]
    return records


def _row_setup(recipe: Any, cfg: Any, key: str | None) -> dict[str, Any] | None:
    """:func:`attention_setup` of a row; repeated runs of a config (``key`` None) measure its attention when the
    model has one (not sites)."""
    if key is None:
        try:
            key = attention_key(cfg, None)
        except UsageError:
            return None
    return attention_setup(recipe, cfg, key)


def _print_plan(planned: list[tuple], config: str, device: str | None) -> None:
    """``compare --dry-run``: the first cell as ``train --dry-run`` describes it, then one line per cell."""
    from lavo_zoo.engine.dry_run import describe_run

    _, recipe, cfg, _, cell_dir = planned[0]
    rows = describe_run(recipe, cfg, cell_dir, device, resume="auto", config_name=config)
    click.echo(f"dry run: {len(planned)} cells check out; nothing is trained or written")
    for label, text in rows:
        if label not in ("start", "would write"):
            click.echo(f"  {label:<12} {text}")
    for cell, recipe, cell_cfg, _, cell_dir in planned:
        state = ("finished, kept" if (cell_dir / CELL_FILE).exists() else
                 "resumes" if (cell_dir / "checkpoints").is_dir() else "trains")
        params = sum(p.numel() for p in recipe.build_model(cell_cfg).parameters())
        click.echo(f"  cell {cell.name:<28} {params:>12,} parameters  {state} in {cell_dir}")


# ----------------------------------------------------------------------------------------------------- collecting
def _attention_label(config: dict[str, Any]) -> str:
    """A config's attention as one name: the mechanism, or its sites' mechanisms (``sdpa``, ``lavo+sdpa+lavo``)."""
    names = _attention_names(config)
    return "+".join(names.values()) if names else "model"


def _attention_names(config: dict[str, Any]) -> dict[str, str]:
    """{site: mechanism} of a results JSON's config (site "" for single-attention models)."""
    attention = (config.get("model") or {}).get("attention")
    if isinstance(attention, dict) and "name" in attention:
        return {"": str(attention["name"])}
    if isinstance(attention, dict):
        return {site: str(spec.get("name")) for site, spec in attention.items() if isinstance(spec, dict)}
    return {"": str(attention)} if attention is not None else {}


def collect(paths: list[Path], efficiency: bool = True) -> list[dict[str, Any]]:
    """Cell records from compare folders (their cell.json files), run folders or results JSON files; with
    ``efficiency``, each record gets the efficiency lengths its row has in a compare folder's ``efficiency/``
    (:func:`collect_efficiency`, never measured here)."""
    records = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"--collect: {path} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob(CELL_FILE)) or sorted(
            p for p in path.rglob("*.json") if "checkpoints" not in p.relative_to(path).parts)  # not checkpoint meta
        for file in files:
            try:
                data = json.loads(file.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(data, dict) or "metrics" not in data:
                continue
            if file.name != CELL_FILE:  # a plain results JSON: attention and seed from its config
                config = data.get("config") or {}
                names = _attention_names(config)
                data = {"attention": names, "seed": (config.get("train") or {}).get("seed"), "metrics": data["metrics"],
                        "source": str(file)}
            records.append(data)
    if not records:
        raise UsageError(f"--collect found no results JSON (a file with 'metrics') under {', '.join(map(str, paths))}")
    _label(records)
    found = collect_efficiency(paths) if efficiency else {}
    if found:
        from lavo_zoo.bench.efficiency import BASELINE

        found.setdefault(BASELINE, {"is_baseline": True})
    for r in records:
        if r["label"] in found:
            r["efficiency"] = found[r["label"]]
    return records


def _label(records: list[dict[str, Any]]) -> None:
    """Give every record a row label: its attention, or the sites whose mechanism differs between records; records
    of different studies that share a label (e.g. LAVO with and without an option) get what tells them apart."""
    multi = [r for r in records if isinstance(r["attention"], dict)]
    sites = sorted({s for r in multi for s in r["attention"]})
    varying = [s for s in sites if len({r["attention"].get(s) for r in multi}) > 1] or sites
    for r in records:
        if isinstance(r["attention"], dict):
            names = r["attention"]
            r["label"] = ",".join(names[s] if s == "" else f"{s}={names.get(s)}" for s in varying if s in names)
        else:
            r["label"] = r["attention"]
    _tell_apart(records)


def _short(override: str) -> str:
    """``model.attention.decoder_self.window_size=32`` -> ``window_size=32``."""
    key, sep, value = override.partition("=")
    return key.rsplit(".", 1)[-1] + sep + value


def _setting(record: dict[str, Any]) -> tuple[str, ...]:
    """What a cell was trained with besides its seed: its config and its overrides (shortened)."""
    overrides = [_short(o) for o in record.get("overrides") or [] if not o.startswith("train.seed=")]
    config = [record["config"]] if isinstance(record.get("config"), str) else []
    return (*config, *sorted(overrides))


def _tell_apart(records: list[dict[str, Any]]) -> None:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["label"], []).append(r)
    for label, group in groups.items():
        settings = {id(r): _setting(r) for r in group}
        if len(set(settings.values())) < 2:
            continue
        common = set.intersection(*(set(v) for v in settings.values()))
        for r in group:
            own = [item for item in settings[id(r)] if item not in common]
            r["label"] = f"{label} ({', '.join(own)})" if own else label


# --------------------------------------------------------------------------------------------------------- table
def summarise(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """Rows (one per label, in first-seen order) with mean/std per metric over seeds; and each metric's direction."""
    if not all("label" in r for r in records):
        _label(records)
    directions: dict[str, bool] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["label"], []).append(r)
        for name, m in r["metrics"].items():
            directions.setdefault(name, bool(m["higher_is_better"]))
    rows = []
    for label, group in groups.items():
        row: dict[str, Any] = {"attention": label, "seeds": len(group)}
        for name in directions:
            values = [r["metrics"][name]["value"] for r in group if name in r["metrics"]]
            row[name] = ((statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))
                         if values else (math.nan, 0.0, 0))
        for extra in ("parameters", "train_time_s", "peak_memory_bytes"):
            values = [r[extra] for r in group if r.get(extra) is not None]
            row[extra] = statistics.fmean(values) if values else None
        row["efficiency"] = next((r["efficiency"] for r in group if r.get("efficiency")), None)
        rows.append(row)
    return rows, directions


def _best(rows: list[dict[str, Any]], metric: str, higher: bool) -> float | None:
    values = [row[metric][0] for row in rows if row[metric][2] and math.isfinite(row[metric][0])]
    return (max if higher else min)(values) if values else None


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def efficiency_text(found: dict[str, Any] | None, criterion: str) -> str:
    """A row's efficiency length as the table shows it: "-" for softmax itself, "n/a" where it was not measured."""
    if not found:
        return "n/a"
    return "-" if found.get("is_baseline") else found[criterion]["text"]


def _efficiency_note(rows: list[dict[str, Any]]) -> list[str]:
    measured = [row["efficiency"] for row in rows if row["efficiency"] and "swept" in row["efficiency"]]
    if not measured:
        return []
    swept = sorted({n for found in measured for n in found["swept"]})
    machines = "; ".join(dict.fromkeys(found["machine"] for found in measured))
    tolerance = "/".join(dict.fromkeys(f"{found['tolerance'] * 100:g} %" for found in measured))
    return ["", ("Faster / smaller than softmax from: the shortest sequence length at which one layer of the attention "
                 "(the model's width and heads, the site's pattern) beats sdpa in forward + backward time / peak "
                 f"memory, swept over {', '.join(map(str, swept))} and bisected to within {tolerance} (\"<= L\": "
                 f"already at the shortest, \"> L\": not up to the longest); measured on {machines}, records in "
                 f"{EFFICIENCY_DIR}/.")]


SOFTMAX, CONTROL = "sdpa", "mean"
SEPARATION_STDS, SEPARATION_SEEDS = 2.0, 3


def separation(rows: list[dict[str, Any]], directions: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """Whether the study's budget separates, per headline metric (not per-class breakdowns): softmax (``sdpa``)
    must beat the ``mean`` control, which cannot use the site's information, by more than two standard deviations
    (the larger of the two rows', over at least three seeds each). Empty unless both rows are in the study. A study
    whose budget does not separate ranks nothing: its table is not a result."""
    by_label = {row["attention"]: row for row in rows}
    if SOFTMAX not in by_label or CONTROL not in by_label:
        return {}
    verdicts = {}
    for metric, higher in directions.items():
        if "@" in metric:  # a per-class / per-category breakdown (cd_l1@chair): the headline metric decides
            continue
        (s_mean, s_std, s_n), (c_mean, c_std, c_n) = by_label[SOFTMAX][metric], by_label[CONTROL][metric]
        if not (s_n and c_n and math.isfinite(s_mean) and math.isfinite(c_mean)):
            continue
        gap = (s_mean - c_mean) if higher else (c_mean - s_mean)  # > 0: softmax is better
        spread = max(s_std, c_std)
        stds = gap / spread if spread > 0 else (math.inf if gap > 0 else -math.inf if gap < 0 else 0.0)
        enough = min(s_n, c_n) >= SEPARATION_SEEDS
        verdicts[metric] = {"gap": gap, "stds": stds, "seeds": min(s_n, c_n),
                            "separates": enough and stds > SEPARATION_STDS}
    return verdicts


def _separation_note(verdicts: dict[str, dict[str, Any]]) -> list[str]:
    if not verdicts:
        return []
    lines = ["", (f"Does this budget separate? Softmax (`{SOFTMAX}`) against the `{CONTROL}` control, which cannot "
                  f"use the site's information: it separates where softmax is better by more than {SEPARATION_STDS:g} "
                  f"standard deviations (the larger of the two rows') over at least {SEPARATION_SEEDS} seeds; where it "
                  "does not, the table ranks nothing.")]
    for metric, v in verdicts.items():
        verdict = "separates" if v["separates"] else "does NOT separate"
        seeds = "" if v["seeds"] >= SEPARATION_SEEDS else f" (only {v['seeds']} seed(s))"
        lines.append(f"- {metric}: softmax better by {_fmt(v['gap'])} = {v['stds']:.1f} std: {verdict}{seeds}")
    return lines


def write_table(records: list[dict[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """table.md, table.csv and chart.png in ``out_dir``; returns their paths. The efficiency columns appear when a
    record has efficiency lengths (``record["efficiency"]``)."""
    rows, directions = summarise(records)
    out_dir.mkdir(parents=True, exist_ok=True)
    efficiency = [*EFFICIENCY_COLUMNS.values()] if any(row["efficiency"] for row in rows) else []
    header = ["attention", "seeds", *(f"{m} ({'higher' if h else 'lower'} is better)" for m, h in directions.items()),
              *efficiency, "parameters", "train time (s)", "peak memory (MiB)"]
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    best = {m: _best(rows, m, h) for m, h in directions.items()}
    for row in rows:
        cells = [row["attention"], str(row["seeds"])]
        for m in directions:
            mean, std, n = row[m]
            text = "-" if not n else _fmt(mean) + (f" ± {_fmt(std)}" if n > 1 else "")
            cells.append(f"**{text}**" if n and best[m] is not None and mean == best[m] else text)
        cells += [efficiency_text(row["efficiency"], c) for c in EFFICIENCY_COLUMNS] if efficiency else []
        cells.append(f"{row['parameters']:,.0f}" if row["parameters"] is not None else "-")
        cells.append(f"{row['train_time_s']:.1f}" if row["train_time_s"] is not None else "-")
        cells.append(f"{row['peak_memory_bytes'] / 2**20:.0f}" if row["peak_memory_bytes"] is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Mean ± standard deviation over seeds; the best value of each metric in bold.",
              *_separation_note(separation(rows, directions)),
              *(_efficiency_note(rows) if efficiency else [])]
    md, csv_path, png = out_dir / "table.md", out_dir / "table.csv", out_dir / "chart.png"
    md.write_text("\n".join(lines) + "\n")
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["attention", "seeds", *(c for m in directions for c in (f"{m}_mean", f"{m}_std")),
                         *efficiency, "parameters", "train_time_s", "peak_memory_bytes"])
        for row in rows:
            found = [efficiency_text(row["efficiency"], c) for c in EFFICIENCY_COLUMNS] if efficiency else []
            writer.writerow([row["attention"], row["seeds"], *(v for m in directions for v in row[m][:2]),
                             *("" if text == "n/a" else text for text in found),
                             row["parameters"], row["train_time_s"], row["peak_memory_bytes"]])
    _chart(rows, directions, png, title)
    return [md, csv_path, png]


def _chart(rows: list[dict[str, Any]], directions: dict[str, bool], path: Path, title: str) -> None:
    """One bar chart per metric (error bars: standard deviation over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(directions)
    cols = min(3, len(metrics)) or 1
    nrows = math.ceil(len(metrics) / cols) or 1
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    labels = [row["attention"] for row in rows]
    for ax, m in zip(axes.flat, metrics):
        ax.bar(range(len(rows)), [row[m][0] for row in rows], yerr=[row[m][1] for row in rows], capsize=3)
        ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{m} ({'higher' if directions[m] else 'lower'} is better)", fontsize=9)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------- CLI
def _csv_list(text: str | None, what: str, cast: type = str) -> list:
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    try:
        return [cast(x) for x in items]
    except ValueError:
        raise UsageError(f"{what} must be a comma-separated list of {cast.__name__}s, got '{text}'") from None


@click.command("compare", epilog="""\b
Examples:
  lavo-zoo compare lm/tiny-lavo --attentions lavo,sdpa,local --seeds 1,2,3 --out runs/cmp-lm --max-steps 300
  lavo-zoo compare time_series/tiny-lavo --seeds 1,2,3,4,5 --out runs/ts-repeats   # repeated runs of one config
  lavo-zoo compare summarization/tiny-sdpa --site encoder_self --attentions lavo,sdpa,local --out runs/cmp-summ
  lavo-zoo compare lm/tiny-lavo --attentions lavo,sdpa --out runs/cmp-lm --efficiency-lengths 512,2048,8192
  lavo-zoo compare lm/tiny-lavo --attentions lavo,performer -o lavo.num_bases=16 -o performer.num_features=32 \\
      --out runs/cmp train.lr=1e-3
  lavo-zoo compare --collect runs/a/test.json runs/b runs/cmp-lm --out runs/table""")
@click.argument("config", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--attentions", help="Comma-separated registry names, one table row each (lavo-zoo list attentions); "
                                  "without it the config's own attention, over --seeds (repeated runs).")
@click.option("--site", default=None, help="Encoder-decoder recipes: the site to vary (encoder_self, decoder_self, "
                                           "cross); the other sites keep the config's mechanisms.")
@click.option("--seeds", default="1", show_default=True, help="Comma-separated seeds (train.seed), one run each.")
@click.option("-o", "--option", "options", multiple=True, metavar="ATTN.KEY=VALUE",
              help="An option for one attention of the study (repeatable), e.g. lavo.num_bases=64.")
@out_option("Study folder: cells/<attention>-seed<seed>/ runs, table.md, table.csv, chart.png.", required=True,
            folder=True)
@click.option("--split", default="test", show_default=True, help="Split every cell is scored on.")
@device_option
@click.option("--max-steps", type=int, default=None, help="Shortcut for train.max_steps=N (the same for every cell).")
@click.option("--max-batches", type=click.IntRange(min=1), default=None,
              help="Score only the first N batches of the split in every cell (quick checks).")
@click.option("--rerun", is_flag=True, help="Train again the cells of OUT whose config differs from the study's "
                                            "(refused otherwise).")
@click.option("--collect", "collect_paths", is_flag=True,
              help="Build the table from existing results: the arguments are results JSONs or folders holding them.")
@click.option("--efficiency/--no-efficiency", default=True, show_default=True,
              help="Columns 'faster / smaller than softmax from': each attention's efficiency lengths against sdpa "
                   "(one layer at the model's width, heads and the site's pattern, forward + backward, as `lavo-zoo "
                   "bench attention` finds them), measured once and kept in OUT/efficiency/.")
@click.option("--efficiency-lengths", default=",".join(map(str, Efficiency.lengths)), show_default=True,
              help="The lengths swept before the bisection (comma-separated).")
@click.option("--dry-run", is_flag=True, help="Check every cell's config, the data and the models, print the plan "
                                              "and stop: nothing is trained or written.")
def compare(config: str | None, overrides: tuple[str, ...], attentions: str | None, site: str | None, seeds: str,
            options: tuple[str, ...], out: Path, split: str, device: str | None, max_steps: int | None,
            max_batches: int | None, rerun: bool, collect_paths: bool, efficiency: bool,
            efficiency_lengths: str, dry_run: bool) -> None:
    """Train and score CONFIG once per (attention, seed) with the same budget, then write a comparison table.

    Finished cells are kept and killed ones resume, so the same command continues an interrupted study.
    """
    if collect_paths:
        paths = [Path(p) for p in ([config] if config else []) + list(overrides)]
        if not paths:
            raise UsageError("--collect needs results JSONs or folders, e.g. lavo-zoo compare --collect runs/a runs/b "
                             "--out runs/table")
        records, title = collect(paths, efficiency), "collected results"
    else:
        if not config:
            raise UsageError("give a CONFIG (e.g. lm/tiny-lavo), or --collect with existing results")
        names = _csv_list(attentions, "--attentions")
        if len(set(names)) != len(names):
            raise UsageError(f"--attentions lists a name twice: {attentions}")
        seed_list = _csv_list(seeds, "--seeds", int)
        extra = list(overrides) + ([f"train.max_steps={max_steps}"] if max_steps is not None else [])
        how = None  # how the efficiency lengths are measured (None: not at all)
        if efficiency:
            from lavo_zoo.bench.timing import parse_ints

            how = Efficiency(lengths=tuple(sorted(set(parse_ints(efficiency_lengths, "--efficiency-lengths")))))
        records = run_study(config, names, seed_list or [1], site, extra, parse_options(options), out, device,
                            split, rerun, max_batches, how, dry_run)
        if dry_run:
            return
        title = f"{config} on {split}" + (f", varying {site}" if site else "")
    for path in write_table(records, out, title):
        click.echo(f"wrote {path}")
    click.echo((out / "table.md").read_text())
