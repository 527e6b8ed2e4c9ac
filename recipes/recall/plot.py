"""Recall against recurrent-state size (Zoology's main figure): the cells of ``lavo-zoo compare`` studies, each
setting's accuracy (mean and std over its seeds) beside the state its model keeps per sequence, measured from the
attention's own state object, layer by layer (a hybrid's layers keep different states:
:func:`~lavo_zoo.recipes.recall.model.layer_states`); a table and a PNG. The cells are found, read and counted as every
gathering of studies does (:func:`~lavo_zoo.engine.run_identity.collect_runs`), and summarised over seeds by
:class:`~lavo_zoo.engine.records.MetricSummary`."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from lavo_zoo.engine.records import CellRecord, MetricSummary
from lavo_zoo.engine.run_identity import collect_runs
from lavo_zoo.errors import UsageError
from lavo_zoo.evaluators.classification import BUCKETS, group_order


def check_recall_record(record: CellRecord) -> None:
    """Refuse a cell record that is not a recall study's: its table and figure need an ``accuracy`` value.

    Raises:
        UsageError: naming the record.
    """
    accuracy = record.metrics.get("accuracy")
    if not isinstance(accuracy, dict) or not isinstance(accuracy.get("value"), (int, float)):
        raise UsageError(f"{record.source} is not the cell record of a recall study (it needs 'metrics' with an "
                         "'accuracy' value, as `lavo-zoo compare` writes for a recall config)")


def measure_state(cell_folder: Path) -> tuple[int, bool, int, list[dict[str, Any]]]:
    """(state bytes per sequence, whether it grows, sequence length, each layer's ``{"layer", "attention", "bytes",
    "per_token", "grows"}``) of the model a cell trained, rebuilt from the cell's own config.yaml
    (:func:`~lavo_zoo.recipes.recall.model.layer_states`)."""
    from dataclasses import asdict

    from lavo_zoo.engine.checkpoint_io import read_config
    from lavo_zoo.recipes.recall.model import layer_states

    recipe, cfg = read_config(cell_folder)
    if recipe.name != "recall":
        raise UsageError(f"{cell_folder} is a '{recipe.name}' run; recall against state size reads recall studies")
    layers = layer_states(recipe.build_model(cfg), cfg.data.seq_len)
    return (sum(layer.bytes for layer in layers), any(layer.grows for layer in layers), cfg.data.seq_len,
            [{**asdict(layer), "grows": layer.grows} for layer in layers])


def cell_task(cell_folder: Path) -> str:
    """The recall task a cell trained on (``data.task`` of its config.yaml), which fixes its pattern: cells of one
    attention on different tasks are different rows."""
    import yaml

    file = cell_folder / "config.yaml"
    try:
        config = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UsageError(f"{file}: cannot read the cell's config ({e}); run that cell again, or leave it out") from None
    data = config.get("data") if isinstance(config, dict) else None
    return str(data.get("task", "mqar")) if isinstance(data, dict) else "mqar"


def state_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """One row per (task, attention, setting): state bytes, whether they grow, each layer's (``layers``), the seeds,
    and mean / std of every accuracy metric over them; sorted by task, attention, then state size."""
    groups: dict[tuple[str, str, str], list[tuple[CellRecord, Path]]] = {}
    for record in collect_runs(paths):  # each run once; a damaged cell record stops the command, naming it
        check_recall_record(record)
        folder = Path(record.source).parent
        key = (cell_task(folder), str(record.attention), " ".join(record.options()))
        groups.setdefault(key, []).append((record, folder))
    rows = []
    for (task, name, setting), cells in groups.items():
        size, grows, seq_len, layers = measure_state(cells[0][1])
        records = [record for record, _ in cells]
        metrics = sorted({m for r in records for m in r.metrics}, key=lambda m: (m != "accuracy", group_order(m)))
        rows.append({"task": task, "attention": name, "setting": setting, "state_bytes": size, "grows": grows,
                     "seq_len": seq_len, "layers": layers, "seeds": sorted(r.seed for r in records),
                     # (mean, std) of each metric over the seeds
                     "metrics": {m: MetricSummary.of(r.metrics[m]["value"] for r in records if m in r.metrics)[:2]
                                 for m in metrics}})
    return sorted(rows, key=lambda r: (r["task"], r["attention"], r["state_bytes"], r["setting"]))


def _several_tasks(rows: list[dict[str, Any]]) -> bool:
    """Whether the rows span several tasks (the table then names each row's task, the plot each series')."""
    return len({r.get("task") for r in rows}) > 1


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def layers_text(layers: list[dict[str, Any]]) -> str:
    """Each layer's state in KiB, runs of equal layers joined: ``0-2 lavo 2.0, 3 sdpa 4.0 (grows)``."""
    from lavo_zoo.attention.schedule import layer_ranges

    runs: list[tuple[list[int], dict[str, Any]]] = []
    for layer in layers:
        same = (layer["attention"], layer["bytes"], layer["grows"])
        if runs and (runs[-1][1]["attention"], runs[-1][1]["bytes"], runs[-1][1]["grows"]) == same:
            runs[-1][0].append(layer["layer"])
        else:
            runs.append(([layer["layer"]], layer))
    return ", ".join(f"{layer_ranges(ids)} {layer['attention']} {_kib(layer['bytes'])}"
                     + (" (grows)" if layer["grows"] else "") for ids, layer in runs)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table: accuracy and each bucket's accuracy (by distance, ``dist:`` and ``ahead:``, then
    by the pair's position, ``pos:``), mean ± std over the seeds."""
    buckets = sorted({m for r in rows for m in r["metrics"] if m.startswith(tuple(f"accuracy@{b}" for b in BUCKETS))},
                     key=group_order)
    tasks = ["task"] if _several_tasks(rows) else []
    head = [*tasks, "attention", "setting", "state per sequence (KiB)", "per layer (KiB)", "seeds", "accuracy",
            *[b.removeprefix("accuracy@") for b in buckets]]
    texts = 4 + len(tasks)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * texts + "---:|" * (len(head) - texts)]
    for r in rows:
        size = _kib(r["state_bytes"]) + (f" (grows with T; at T={r['seq_len']})" if r["grows"] else "")
        cells = [*([r["task"]] if tasks else []), r["attention"], r["setting"] or "defaults", size,
                 layers_text(r.get("layers") or []), str(len(r["seeds"]))]
        for metric in ("accuracy", *buckets):
            mean, std = r["metrics"].get(metric, (math.nan, 0.0))
            cells.append("" if math.isnan(mean) else f"{mean:.3f}" + (f" ± {std:.3f}" if len(r["seeds"]) > 1 else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


SHORT = {"num_bases": "r", "window_size": "w", "num_features": "m", "num_slots": "n", "state_size": "N"}
# numeric settings that change a mechanism's form rather than its size: each value is a series of its own
FORM_KEYS = {"conv_size"}
MARKERS = "osD^v<>phX*d"


def _short(setting: str) -> str:
    """A setting as the plot labels a point: ``window_size=8 num_bases=4`` -> ``w=8 r=4`` (flags that are on and the
    forms its series names, :func:`series_name`, dropped)."""
    parts = []
    for item in setting.split():
        key, _, value = item.partition("=")
        if value != "true" and not _is_form(item):
            parts.append(f"{SHORT.get(key, key)}={value}")
    return " ".join(parts)


def _is_form(item: str) -> bool:
    """Whether a setting (``key=value``) is a form of the mechanism, not a size: a switch turned off (LAVO's
    ``global_read=false``), a named choice (``noncausal_form=final_state``), a short convolution (``conv_size=4``).
    Numbers are sizes (``num_bases=8``, ``num_heads=1``) and a switch turned on is the flag's own name."""
    key, _, value = item.partition("=")
    if key in FORM_KEYS:
        return True
    try:
        float(value)
    except ValueError:
        return value != "true"
    return False


def series_name(row: dict[str, Any], task: bool = False) -> str:
    """A row's line in the plot: its attention in one form (the settings that are forms, :func:`_is_form`; its sizes
    vary along the line); with ``task``, its task after it."""
    forms = [item for item in row["setting"].split() if _is_form(item)]
    return " ".join([row["attention"], *forms, *([f"({row['task']})"] if task else [])])


def plot_state(rows: list[dict[str, Any]], title: str = "MQAR accuracy against recurrent state",
               format: str = "png") -> bytes:
    """The figure's bytes in ``format`` (a PNG by default): accuracy (mean ± std over seeds) against state bytes
    per sequence, one series per attention (and task, where the rows span several); a state that grows with the
    sequence (a KV cache) is drawn hollow at its size at the training length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    task = _several_tasks(rows)
    colours = plt.get_cmap("tab20").colors
    for i, name in enumerate(dict.fromkeys(series_name(r, task) for r in rows)):
        series = sorted((r for r in rows if series_name(r, task) == name), key=lambda r: r["state_bytes"])
        xs = [r["state_bytes"] for r in series]
        ys, errs = zip(*(r["metrics"]["accuracy"] for r in series))
        grows = any(r["grows"] for r in series)
        line = ax.errorbar(xs, ys, yerr=errs, marker=MARKERS[i % len(MARKERS)], color=colours[i % len(colours)],
                           capsize=3, linestyle="-" if len(xs) > 1 else "none", mfc="none" if grows else None,
                           label=f"{name} (grows with T)" if grows else name)
        if len(series) < 2:
            continue
        for x in dict.fromkeys(xs):  # one label per size: the settings there, from the best to the worst
            here = sorted((r for r in series if r["state_bytes"] == x), key=lambda r: -r["metrics"]["accuracy"][0])
            ax.annotate("\n".join(_short(r["setting"]) or "defaults" for r in here),
                        (x, here[0]["metrics"]["accuracy"][0]), fontsize=6, xytext=(4, 2), va="top",
                        textcoords="offset points", color=line[0].get_color())
    ax.set(xscale="log", xlabel="state per sequence (bytes, all layers of the site under test)", ylabel="accuracy",
           title=title,
           ylim=(-0.03, 1.03))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    buffer = io.BytesIO()
    fig.savefig(buffer, format=format, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
