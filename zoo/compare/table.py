"""The study's table: one :class:`Row` per label with each metric's mean and spread over seeds (:func:`summarise`,
by the one summary over seeds, :class:`~lavo_zoo.engine.records.MetricSummary`),
whether the budget separates softmax from the ``mean`` control (:func:`separation`), and ``table.md``,
``table.csv`` and ``chart.png`` (:func:`write_table`; a study's as its cells finish: :class:`StudyTable`)."""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavo_zoo.atomic import write_file
from lavo_zoo.compare.efficiency import EFFICIENCY_COLUMNS, EFFICIENCY_DIR
from lavo_zoo.compare.records import label_records
from lavo_zoo.engine.records import CellRecord, MetricSummary
from lavo_zoo.engine.run_identity import distinct_runs
from lavo_zoo.outputs import (
    FIGURE,
    STUDY_CSV,
    STUDY_FOLDER,
    STUDY_TABLE,
    check_folder_output,
    check_writable,
    save_figure,
)


@dataclass
class Row:
    """One row of the table: the records that share a label."""

    label: str
    seeds: int  # records in the row
    metrics: dict[str, MetricSummary]  # every metric of the study, in first-seen order (n = 0 where it has none)
    parameters: float | None = None  # means over the records that have them
    step_time_s: float | None = None
    step_memory_bytes: float | None = None
    efficiency: dict[str, Any] | None = None  # the row's efficiency lengths (lavo_zoo.compare.efficiency)


def summarise(records: list[CellRecord]) -> tuple[list[Row], dict[str, bool]]:
    """Rows (one per label, in first-seen order) with mean/std per metric over seeds; and each metric's direction
    (True: higher is better)."""
    if any(r.label is None for r in records):
        label_records(records)
    directions: dict[str, bool] = {}
    groups: dict[str, list[CellRecord]] = {}
    for r in records:
        groups.setdefault(r.label, []).append(r)
        for name, m in r.metrics.items():
            directions.setdefault(name, bool(m["higher_is_better"]))
    rows = []
    for label, group in groups.items():
        metrics = {name: MetricSummary.of(r.metrics[name]["value"] for r in group if name in r.metrics)
                   for name in directions}
        means = {}
        for extra in ("parameters", "step_time_s", "step_memory_bytes"):
            found = MetricSummary.of(getattr(r, extra) for r in group if getattr(r, extra) is not None)
            means[extra] = found.mean if found.n else None
        efficiency = next((r.efficiency for r in group if r.efficiency), None)
        rows.append(Row(label, len(group), metrics, **means, efficiency=efficiency))
    return rows, directions


def _best(rows: list[Row], metric: str, higher: bool) -> float | None:
    values = [row.metrics[metric].mean for row in rows if row.metrics[metric].n and
              math.isfinite(row.metrics[metric].mean)]
    return (max if higher else min)(values) if values else None


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def efficiency_text(found: dict[str, Any] | None, criterion: str) -> str:
    """A row's efficiency length as the table shows it: "-" for softmax itself, "n/a" where it was not measured."""
    if not found:
        return "n/a"
    return "-" if found.get("is_baseline") else found[criterion]["text"]


def _efficiency_note(rows: list[Row]) -> list[str]:
    measured = [row.efficiency for row in rows if row.efficiency and "swept" in row.efficiency]
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


STEP_NOTE = ("Step time: the median wall time of an optimiser step (its batch, forward, backward, update) over the "
             "cell's training steps after its first two (of the second where there is no other; a resumed cell: "
             "its last session); step memory: the peak "
             "memory of its second step above what that step starts with (CUDA: tensor allocations; CPU: the "
             "resident set, with the memory freed before returned to the system). The first step warms up, so "
             "neither depends on the order the cells ran in.")

def _launch_note(records: list[CellRecord]) -> list[str]:
    """Where cells trained several at once on one machine (``--launcher local``), their step times say so, and
    whether the cells had cores of their own or shared them (more cells at once than cores)."""
    local = [r.launch for r in records
             if r.launch and r.launch.get("launcher") == "local" and r.launch.get("cells_at_once", 1) > 1]
    if not local:
        return []
    at_once = "/".join(map(str, sorted({launch["cells_at_once"] for launch in local})))
    if any(launch.get("cores_shared") for launch in local):
        how = ("more cells than the machine had cores for, so that some shared their cores: their step times include "
               "waiting for a core, and")
    else:
        how = "each on cores of its own (and a GPU of its own on CUDA): their step times"
    return ["", (f"Cells trained {at_once} at once on one machine (`--launcher local`), {how} share the machine's "
                 "memory bandwidth and caches, so compare them with step times measured the same way.")]


SOFTMAX, CONTROL = "sdpa", "mean"
SEPARATION_STDS, SEPARATION_SEEDS = 2.0, 3


def separation(rows: list[Row], directions: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """Whether the study's budget separates, per headline metric (not the breakdowns ``m@part`` of a metric ``m``
    of the study; a metric named for a setting, such as ``ppl@128`` with no ``ppl``, is a headline): softmax (``sdpa``)
    must beat the ``mean`` control, which cannot use the site's information, by more than two standard deviations
    (the larger of the two rows', over at least three seeds each). Empty unless both rows are in the study. A study
    whose budget does not separate ranks nothing: its table is not a result."""
    by_label = {row.label: row for row in rows}
    if SOFTMAX not in by_label or CONTROL not in by_label:
        return {}
    verdicts = {}
    for metric, higher in directions.items():
        if "@" in metric and metric.split("@")[0] in directions:
            continue  # a breakdown of a headline metric (cd_l1@chair, accuracy@mqar): the headline metric decides
        (s_mean, s_std, s_n), (c_mean, c_std, c_n) = (by_label[name].metrics[metric] for name in (SOFTMAX, CONTROL))
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


TABLE_FILES = {"table.md": STUDY_TABLE, "table.csv": STUDY_CSV, "chart.png": FIGURE}  # what write_table writes


def check_table_files(out_dir: Path, inputs: dict[str, Path | str | None] | None = None) -> None:
    """Refuse, before a study's work, a folder ``out_dir`` where the table files cannot go (the output policy,
    :mod:`lavo_zoo.outputs`): a checkpoint, a training run, the current folder, a table file that is not an earlier
    study's table (each is the study's own, replaced as the study goes, without ``--overwrite``) or one of the
    ``inputs``."""
    check_folder_output(out_dir, STUDY_FOLDER, False, "--out", inputs)
    for name, kind in TABLE_FILES.items():
        check_writable(out_dir / name, True, "--out", inputs, kind)


def write_table(records: list[CellRecord], out_dir: Path, title: str) -> list[Path]:
    """table.md, table.csv and chart.png in ``out_dir`` (checked by :func:`check_table_files`), each written
    atomically (a reader sees the previous table or the new one, another command writing the same study's table at
    once never leaves a mixture, and a full disk leaves the previous one); returns their paths. The three are made
    before any is written, so that a table that cannot be made leaves the previous three as they were. The
    efficiency columns appear when a record has efficiency lengths (``record.efficiency``)."""
    rows, directions = summarise(records)
    md_text, csv_text = _markdown(records, rows, directions, title), _csv(rows, directions)
    figure = _chart(rows, directions, title)
    md, csv_path, png = (out_dir / name for name in TABLE_FILES)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_file(md, md_text, overwrite=True)
        write_file(csv_path, csv_text, overwrite=True)
        save_figure(figure, png, dpi=110)
    finally:
        _close(figure)
    return [md, csv_path, png]


@dataclass(frozen=True)
class StudyTable:
    """A study's table in its folder as the study goes (:func:`write_table`): titled ``title``, and said to hold
    only some of the ``expected`` cells while others have not finished."""

    out_dir: Path
    title: str
    expected: int  # the study's cells

    def title_of(self, done: int) -> str:
        """The title of a table of ``done`` finished cells."""
        return self.title if done >= self.expected else f"{self.title} ({done} of {self.expected} cells finished)"

    def write(self, records: list[CellRecord]) -> None:
        """The table of the cells finished so far (each run once; noted once, when the study ends)."""
        done = distinct_runs(records, quiet=True)
        write_table(done, self.out_dir, self.title_of(len(done)))


def table_text(records: list[CellRecord], title: str) -> str:
    """The Markdown of table.md (what :func:`write_table` writes and ``compare`` prints)."""
    return _markdown(records, *summarise(records), title)


def _csv(rows: list[Row], directions: dict[str, bool]) -> str:
    """The text of table.csv: one line per row, each metric's mean and standard deviation."""
    efficiency = [*EFFICIENCY_COLUMNS.values()] if any(row.efficiency for row in rows) else []
    with io.StringIO(newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["attention", "seeds", *(c for m in directions for c in (f"{m}_mean", f"{m}_std")),
                         *efficiency, "parameters", "step_time_s", "step_memory_bytes"])
        for row in rows:
            found = [efficiency_text(row.efficiency, c) for c in EFFICIENCY_COLUMNS] if efficiency else []
            writer.writerow([row.label, row.seeds, *(v for m in directions for v in row.metrics[m][:2]),
                             *("" if text == "n/a" else text for text in found),
                             row.parameters, row.step_time_s, row.step_memory_bytes])
        return f.getvalue()


def _markdown(records: list[CellRecord], rows: list[Row], directions: dict[str, bool], title: str) -> str:
    """The text of table.md: the rows of ``records`` (:func:`summarise`) and the notes on how they were measured."""
    efficiency = [*EFFICIENCY_COLUMNS.values()] if any(row.efficiency for row in rows) else []
    header = ["attention", "seeds", *(f"{m} ({'higher' if h else 'lower'} is better)" for m, h in directions.items()),
              *efficiency, "parameters", "step time (ms)", "step memory (MiB)"]
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    best = {m: _best(rows, m, h) for m, h in directions.items()}
    for row in rows:
        cells = [row.label, str(row.seeds)]
        for m in directions:
            mean, std, n = row.metrics[m]
            text = "-" if not n else _fmt(mean) + (f" ± {_fmt(std)}" if n > 1 else "")
            cells.append(f"**{text}**" if n and best[m] is not None and mean == best[m] else text)
        cells += [efficiency_text(row.efficiency, c) for c in EFFICIENCY_COLUMNS] if efficiency else []
        cells.append(f"{row.parameters:,.0f}" if row.parameters is not None else "-")
        cells.append(f"{row.step_time_s * 1000:.3g}" if row.step_time_s is not None else "-")
        cells.append(f"{row.step_memory_bytes / 2**20:.3g}" if row.step_memory_bytes is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Mean ± standard deviation over seeds; the best value of each metric in bold. " + STEP_NOTE,
              *_launch_note(records), *_separation_note(separation(rows, directions)),
              *(_efficiency_note(rows) if efficiency else [])]
    return "\n".join(lines) + "\n"


def _chart(rows: list[Row], directions: dict[str, bool], title: str) -> Any:
    """One bar chart per metric (error bars: standard deviation over seeds), as a matplotlib figure (closed by
    :func:`_close` once it is saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(directions)
    cols = min(3, len(metrics)) or 1
    nrows = math.ceil(len(metrics) / cols) or 1
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    try:
        labels = [row.label for row in rows]
        for ax, m in zip(axes.flat, metrics):
            ax.bar(range(len(rows)), [row.metrics[m].mean for row in rows],
                   yerr=[row.metrics[m].std for row in rows], capsize=3)
            ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
            ax.set_title(f"{m} ({'higher' if directions[m] else 'lower'} is better)", fontsize=9)
        for ax in list(axes.flat)[len(metrics):]:
            ax.axis("off")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
    except BaseException:
        _close(fig)
        raise
    return fig


def _close(fig: Any) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)
