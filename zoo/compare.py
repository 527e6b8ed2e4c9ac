"""``lavo-zoo compare``: the paper's kind of study in one command: one recipe config, several attentions (and seeds),
the same budget for each, one table.

Every (attention, seed) cell is a normal training run in ``OUT/cells/<attention>-seed<seed>/`` (resumed with
``--resume auto`` if it was killed) followed by an evaluation of its ``checkpoints/best`` (the validation-selected
weights) or, when the run kept none, ``checkpoints/last``. A cell is finished once its ``cell.json`` exists: running
the same command again skips it, so an interrupted study continues where it stopped. The table (``table.md``,
``table.csv``) and a bar chart (``chart.png``) give every metric's mean and standard deviation over seeds, the best
value per column marked by the metric's direction, and per cell the parameter count, training time and peak memory
(measured as :mod:`lavo_zoo.engine.memory` describes).

``lavo-zoo compare --collect PATH ...`` builds the same table from results JSONs that already exist (files, run
folders or earlier compare folders).
"""
from __future__ import annotations

import csv
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lavo_zoo.errors import UsageError

CELL_FILE = "cell.json"


@dataclass(frozen=True)
class Cell:
    """One (attention, seed) run of the study."""

    attention: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.attention}-seed{self.seed}"


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


def cell_overrides(key: str, cell: Cell, options: dict[str, dict[str, Any]]) -> list[str]:
    """Overrides that select the cell's attention (its own options from ``-o ATTN.key=value``) and seed."""
    extra = [f"{key}.{k}={json.dumps(v)}" for k, v in options.get(cell.attention, {}).items()]
    return [f"{key}.name={cell.attention}", *extra, f"train.seed={cell.seed}"]


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


def run_cell(config: str, overrides: list[str], cell_dir: Path, device: str | None, split: str) -> dict[str, Any]:
    """Train (or resume) and evaluate one cell; writes and returns its record."""
    from lavo_zoo.config import resolve_config
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.engine.evaluate import evaluate_checkpoint
    from lavo_zoo.engine.memory import PeakMemory
    from lavo_zoo.engine.trainer import Trainer

    recipe, cfg = resolve_config(config, overrides)
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
        results = evaluate_checkpoint(chosen, split=split, device=device)
    (cell_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return {"metrics": results["metrics"], "num_samples": results["num_samples"], "checkpoint": str(chosen),
            "parameters": parameters, "train_time_s": round(spent, 3), "peak_memory_bytes": peak.bytes,
            "memory_method": peak.method, "device": results["device"], "split": split}


def run_study(config: str, attentions: list[str], seeds: list[int], site: str | None, overrides: list[str],
              options: dict[str, dict[str, Any]], out_dir: Path, device: str | None, split: str) -> list[dict]:
    """Run every unfinished cell (attention-major order) and return all cell records."""
    from lavo_zoo.config import resolve_config

    _, cfg = resolve_config(config, overrides)  # validates the config and the overrides once, before any training
    key = attention_key(cfg, site)
    unknown = sorted(set(options) - set(attentions))
    if unknown:
        raise UsageError(f"-o names {', '.join(unknown)}, which --attentions does not list")
    cells = [Cell(a, s) for a in attentions for s in seeds]
    for cell in cells:  # every cell's config is checked before the first one trains
        _, cell_cfg = resolve_config(config, overrides + cell_overrides(key, cell, options))
        _check_attention(cell_cfg, key)
    records = []
    for i, cell in enumerate(cells, 1):
        cell_dir = out_dir / "cells" / cell.name
        done = cell_dir / CELL_FILE
        if done.exists():
            click.echo(f"[{i}/{len(cells)}] {cell.name}: finished earlier, kept", err=True)
        else:
            click.echo(f"[{i}/{len(cells)}] {cell.name}: training in {cell_dir}", err=True)
            cell_dir.mkdir(parents=True, exist_ok=True)
            cell_cfg = overrides + cell_overrides(key, cell, options)
            record = {"attention": cell.attention, "seed": cell.seed, "site": site, "config": config,
                      "overrides": cell_cfg, **run_cell(config, cell_cfg, cell_dir, device, split)}
            tmp = done.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, indent=2) + "\n")
            tmp.rename(done)  # atomic: a cell is either finished or not
        records.append(json.loads(done.read_text()))
    return records


# ----------------------------------------------------------------------------------------------------- collecting
def _attention_names(config: dict[str, Any]) -> dict[str, str]:
    """{site: mechanism} of a results JSON's config (site "" for single-attention models)."""
    attention = (config.get("model") or {}).get("attention")
    if isinstance(attention, dict) and "name" in attention:
        return {"": str(attention["name"])}
    if isinstance(attention, dict):
        return {site: str(spec.get("name")) for site, spec in attention.items() if isinstance(spec, dict)}
    return {"": str(attention)} if attention is not None else {}


def collect(paths: list[Path]) -> list[dict[str, Any]]:
    """Cell records from compare folders (their cell.json files), run folders or results JSON files."""
    records = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"--collect: {path} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob(CELL_FILE)) or sorted(path.rglob("*.json"))
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
    return records


def _label(records: list[dict[str, Any]]) -> None:
    """Give every record a row label: its attention, or the sites whose mechanism differs between records."""
    multi = [r for r in records if isinstance(r["attention"], dict)]
    sites = sorted({s for r in multi for s in r["attention"]})
    varying = [s for s in sites if len({r["attention"].get(s) for r in multi}) > 1] or sites
    for r in records:
        if isinstance(r["attention"], dict):
            names = r["attention"]
            r["label"] = ",".join(names[s] if s == "" else f"{s}={names.get(s)}" for s in varying if s in names)
        else:
            r["label"] = r["attention"]


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
            row[name] = (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))
        for extra in ("parameters", "train_time_s", "peak_memory_bytes"):
            values = [r[extra] for r in group if r.get(extra) is not None]
            row[extra] = statistics.fmean(values) if values else None
        rows.append(row)
    return rows, directions


def _best(rows: list[dict[str, Any]], metric: str, higher: bool) -> float | None:
    values = [row[metric][0] for row in rows if row[metric][2] and math.isfinite(row[metric][0])]
    return (max if higher else min)(values) if values else None


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def write_table(records: list[dict[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """table.md, table.csv and chart.png in ``out_dir``; returns their paths."""
    rows, directions = summarise(records)
    out_dir.mkdir(parents=True, exist_ok=True)
    header = ["attention", "seeds", *(f"{m} ({'higher' if h else 'lower'} is better)" for m, h in directions.items()),
              "parameters", "train time (s)", "peak memory (MiB)"]
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    best = {m: _best(rows, m, h) for m, h in directions.items()}
    for row in rows:
        cells = [row["attention"], str(row["seeds"])]
        for m in directions:
            mean, std, n = row[m]
            text = "-" if not n else _fmt(mean) + (f" ± {_fmt(std)}" if n > 1 else "")
            cells.append(f"**{text}**" if n and best[m] is not None and mean == best[m] else text)
        cells.append(f"{row['parameters']:,.0f}" if row["parameters"] is not None else "-")
        cells.append(f"{row['train_time_s']:.1f}" if row["train_time_s"] is not None else "-")
        cells.append(f"{row['peak_memory_bytes'] / 2**20:.0f}" if row["peak_memory_bytes"] is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Mean ± standard deviation over seeds; the best value of each metric in bold."]
    md, csv_path, png = out_dir / "table.md", out_dir / "table.csv", out_dir / "chart.png"
    md.write_text("\n".join(lines) + "\n")
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["attention", "seeds", *(c for m in directions for c in (f"{m}_mean", f"{m}_std")),
                         "parameters", "train_time_s", "peak_memory_bytes"])
        for row in rows:
            writer.writerow([row["attention"], row["seeds"], *(v for m in directions for v in row[m][:2]),
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
  lavo-zoo compare summarization/tiny-sdpa --site encoder_self --attentions lavo,sdpa,local --out runs/cmp-summ
  lavo-zoo compare lm/tiny-lavo --attentions lavo,performer -o lavo.num_bases=16 -o performer.num_features=32 \\
      --out runs/cmp train.lr=1e-3
  lavo-zoo compare --collect runs/a/test.json runs/b runs/cmp-lm --out runs/table""")
@click.argument("config", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--attentions", help="Comma-separated registry names, one table row each (lavo-zoo list attentions).")
@click.option("--site", default=None, help="Encoder-decoder recipes: the site to vary (encoder_self, decoder_self, "
                                           "cross); the other sites keep the config's mechanisms.")
@click.option("--seeds", default="1", show_default=True, help="Comma-separated seeds (train.seed), one run each.")
@click.option("-o", "--option", "options", multiple=True, metavar="ATTN.KEY=VALUE",
              help="An option for one attention of the study (repeatable), e.g. lavo.num_bases=64.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Study folder: cells/<attention>-seed<seed>/ runs, table.md, table.csv, chart.png.")
@click.option("--split", default="test", show_default=True, help="Split every cell is scored on.")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
@click.option("--max-steps", type=int, default=None, help="Shortcut for train.max_steps=N (the same for every cell).")
@click.option("--collect", "collect_paths", is_flag=True,
              help="Build the table from existing results: the arguments are results JSONs or folders holding them.")
def compare(config: str | None, overrides: tuple[str, ...], attentions: str | None, site: str | None, seeds: str,
            options: tuple[str, ...], out_dir: Path, split: str, device: str | None, max_steps: int | None,
            collect_paths: bool) -> None:
    """Train and score CONFIG once per (attention, seed) with the same budget, then write a comparison table.

    Finished cells are kept and killed ones resume, so the same command continues an interrupted study.
    """
    if collect_paths:
        paths = [Path(p) for p in ([config] if config else []) + list(overrides)]
        if not paths:
            raise UsageError("--collect needs results JSONs or folders, e.g. lavo-zoo compare --collect runs/a runs/b "
                             "--out runs/table")
        records, title = collect(paths), "collected results"
    else:
        if not config:
            raise UsageError("give a CONFIG (e.g. lm/tiny-lavo), or --collect with existing results")
        names = _csv_list(attentions, "--attentions")
        if not names:
            raise UsageError("--attentions is required, e.g. --attentions lavo,sdpa,local")
        if len(set(names)) != len(names):
            raise UsageError(f"--attentions lists a name twice: {attentions}")
        seed_list = _csv_list(seeds, "--seeds", int)
        extra = list(overrides) + ([f"train.max_steps={max_steps}"] if max_steps is not None else [])
        records = run_study(config, names, seed_list or [1], site, extra, parse_options(options), out_dir, device,
                            split)
        title = f"{config} on {split}" + (f", varying {site}" if site else "")
    for path in write_table(records, out_dir, title):
        click.echo(f"wrote {path}")
    click.echo((out_dir / "table.md").read_text())
