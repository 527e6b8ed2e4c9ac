"""``lavo-zoo compare``'s study runner: one recipe config, several attentions (or the config's own, for repeated
runs) and seeds, the same budget for each. A study is one value (:class:`Study`), built once from the command line:
its config is read once, and each cell's config is that reading validated with the cell's overrides.

Every (attention, seed) cell is a normal training run in ``OUT/cells/<attention>-seed<seed>/`` (resumed with
``--resume auto`` if it was killed) followed by an evaluation of its ``checkpoints/best`` (the validation-selected
weights) or, when the run kept none, ``checkpoints/last``. A cell is finished once its ``cell.json`` (its
:class:`~lavo_zoo.engine.records.CellRecord`) exists: running the same command again skips it, so an interrupted
study continues where it stopped. A cell is reused only while its resolved config equals the study's (another budget
or option is refused, naming the difference; ``--rerun`` retrains it: :mod:`~lavo_zoo.compare.rerun`, which removes
nothing until every cell has checked out, and never in a dry run). Each cell records its parameter count, the wall
time of its training, and its step time and step memory, measured so that the order the cells run in does not matter
(:mod:`lavo_zoo.compare.steps`). A run counts once: a seed (or an attention) given twice is refused.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lavo_zoo.compare.efficiency import Efficiency, EfficiencyPlan, attention_setup
from lavo_zoo.compare.jobs import CellJob, recipe_target
from lavo_zoo.compare.launchers import Launcher, SerialLauncher
from lavo_zoo.compare.outcomes import CellsFailed, Progress
from lavo_zoo.compare.records import attention_label
from lavo_zoo.compare.rerun import check_reusable, remove_cells
from lavo_zoo.engine.records import CELL_FILE, SEED_KEY, CellRecord
from lavo_zoo.engine.run_identity import distinct_runs
from lavo_zoo.errors import ConfigError, UsageError, did_you_mean

# a row of --attentions that is a hybrid: a schedule of layers (lavo_zoo.attention.schedule), e.g. hybrid:lavo*3+sdpa
HYBRID_ROW = "hybrid:"

if TYPE_CHECKING:  # the engine's configs import torch (the recipes); a study imports them when it reads its config
    from lavo_zoo.engine.configs import LoadedConfig


@dataclass(frozen=True)
class Cell:
    """One (attention, seed) run of the study: ``attention`` is a row of ``--attentions`` (a mechanism, or a hybrid
    ``hybrid:lavo*3+sdpa``) or the config's own attention."""

    attention: str
    seed: int

    @property
    def name(self) -> str:
        """The cell's folder name, ``<attention>-seed<seed>`` (a hybrid's ``:`` and ``*`` as ``-`` and ``_x``:
        ``hybrid-lavo_x3+sdpa-seed1``)."""
        return f"{self.attention.replace(':', '-').replace('*', '_x')}-seed{self.seed}"


def row_schedule(row: str) -> str | None:
    """The schedule in text of a hybrid row (``hybrid:lavo*3+sdpa`` -> ``lavo*3+sdpa``), None for a mechanism."""
    return row[len(HYBRID_ROW):] if row.startswith(HYBRID_ROW) else None


def normal_row(row: str) -> str:
    """A row as the table labels it: a mechanism as given, a hybrid with its runs counted (``hybrid:lavo+lavo+sdpa``
    -> ``hybrid:lavo*2+sdpa``), so that one schedule written two ways is one row.

    Raises:
        UsageError: a malformed schedule, or a mechanism name that looks like one (``lavo*3+sdpa`` without
            ``hybrid:``)."""
    from lavo_zoo.attention.schedule import parse_schedule, schedule_text

    text = row_schedule(row)
    if text is None:
        if any(c in row for c in "*+:"):
            raise UsageError(f"--attentions: '{row}' is not an attention name; a hybrid row starts with "
                             f"'{HYBRID_ROW}' (e.g. {HYBRID_ROW}gated_deltanet*3+sdpa)")
        return row
    try:
        return HYBRID_ROW + schedule_text(parse_schedule(text, row, "--attentions"))
    except ConfigError as e:
        raise UsageError(str(e)) from None


def schedule_key(key: str) -> str:
    """The config key of the schedule of the attention at ``key``: ``model.attention`` ->
    ``model.attention_schedule``, ``model.attention.cross`` -> ``model.attention_schedule.cross``."""
    from lavo_zoo.attention.schedule import SCHEDULE_KEY

    site = key.removeprefix("model.attention")
    return f"model.{SCHEDULE_KEY}{site}"


def has_schedule(cfg: Any, key: str) -> bool:
    """Whether the config's model has a schedule of layers at the attention ``key``."""
    node = cfg
    for part in schedule_key(key).split("."):
        node = getattr(node, part, None)
    return node is not None


def attention_key(cfg: Any, site: str | None) -> str:
    """The dotted config key of the attention to vary: ``model.attention`` or ``model.attention.<site>``."""
    from lavo_zoo.attention import SITE_PATTERNS, AttentionSpec, SiteAttention

    attention = getattr(getattr(cfg, "model", None), "attention", None)
    if isinstance(attention, AttentionSpec):
        if site is not None:
            raise UsageError(f"--site {site}: this recipe's model has one attention (model.attention), not sites; "
                             "leave --site out")
        return "model.attention"
    if isinstance(attention, SiteAttention):
        if site is None:
            raise UsageError(f"this recipe's model has attention sites ({', '.join(SITE_PATTERNS)}): name the one to "
                             "vary with --site, e.g. --site encoder_self")
        if site not in SITE_PATTERNS:
            raise UsageError(f"unknown attention site '{site}'{did_you_mean(site, SITE_PATTERNS)}; "
                             f"choose one of {', '.join(SITE_PATTERNS)}")
        return f"model.attention.{site}"
    raise UsageError("this recipe's config has no model.attention (an AttentionSpec or SiteAttention), so there is "
                     "no attention to compare")


def check_cell_folder(cell_dir: Path, cell: Cell) -> None:
    """Refuse, before any cell trains, a cell's place that holds something other than a folder (a file, a link to
    nothing): the cell could neither be trained there nor kept.

    Raises:
        UsageError: naming the place and what to do.
    """
    if (cell_dir.exists() or cell_dir.is_symlink()) and not cell_dir.is_dir():
        what = "a link to nothing" if cell_dir.is_symlink() else "a file"
        raise UsageError(f"{cell_dir} is {what}, where the study keeps the folder of its cell {cell.name}; move it "
                         "away and run the command again")


def check_distinct(items: list, option: str, what: str) -> None:
    """A run counts once: refuse an attention or a seed given twice, which would train (or keep) the same cell again
    and count it as another run (a spread of 0, a verdict from one run)."""
    repeated = sorted({str(x) for x in items if items.count(x) > 1})
    if repeated:
        raise UsageError(f"{option} lists the {what} {', '.join(repeated)} more than once; each {what} is one run "
                         f"and a run counts once: give each {what} once (e.g. --seeds 1,2,3 for three runs)")


def check_study_attentions(attentions: list[str], options: dict[str, dict[str, Any]]) -> None:
    """Refuse, before anything trains, a name in ``--attentions`` that is not registered and an option (``-o``) its
    attention does not take (:func:`~lavo_zoo.attention.registry.check_attention`; the pattern is checked where the
    recipe reads its config or builds its model)."""
    from lavo_zoo.attention import check_attention
    from lavo_zoo.attention.schedule import parse_schedule

    for row in attentions:
        text = row_schedule(row)
        if text is not None and row in options:
            raise UsageError(f"-o {row}.*: a hybrid row takes its options from the config (model.attention for "
                             "the layers naming its mechanism, or the schedule's entries): set them as overrides")
        for name in dict.fromkeys(parse_schedule(text) if text is not None else [row]):
            try:
                check_attention(name)
            except UsageError as e:
                where = "" if text is None else f" (in {row})"
                raise UsageError(f"--attentions: {e}{where}; `lavo-zoo list attentions` describes them") from None
    for name in (row for row in attentions if row_schedule(row) is None):
        try:
            check_attention(name, options=options.get(name, {}))
        except UsageError as e:
            raise UsageError(f"-o: {e}") from None


def cell_overrides(key: str | None, cell: Cell, options: dict[str, dict[str, Any]], scheduled: bool = False
                   ) -> list[str]:
    """Overrides that select the cell's attention (its own options from ``-o ATTN.key=value``; none when the study
    keeps the config's attention, ``key`` None) and seed. A hybrid row sets the schedule of ``key``'s layers
    (:func:`schedule_key`); a mechanism's row over a config with a schedule there (``scheduled``) drops it, so that
    every layer runs the row's mechanism.

    Args:
        key: the config key of the attention the study varies (``model.attention``), or None.
        cell: the cell (its attention row and seed).
        options: each row's attention options (``-o ATTN.key=value``), by row name.
        scheduled: the config sets a schedule at ``key``.
    """
    seed = f"{SEED_KEY}={cell.seed}"
    if key is None:
        return [seed]
    text = row_schedule(cell.attention)
    if text is not None:
        return [f"{schedule_key(key)}={text}", seed]
    extra = [f"{key}.{k}={json.dumps(v)}" for k, v in options.get(cell.attention, {}).items()]
    drop = [f"{schedule_key(key)}=null"] if scheduled else []
    return [f"{key}.name={cell.attention}", *extra, *drop, seed]


def parse_options(items: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``("lavo.num_bases=64", ...)`` -> ``{"lavo": {"num_bases": 64}}`` (values read as the config overrides
    read theirs, :func:`~lavo_zoo.config.parse_override`: YAML, ``1e-5`` a number).

    Raises:
        UsageError: an item that is not ATTENTION.KEY=VALUE, a value that is not valid YAML, an option given twice.
    """
    from lavo_zoo.config import parse_override

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, dot, rest = item.partition(".")
        key, eq, _ = rest.partition("=")
        if not (dot and eq and name and key) or "." in key:
            raise UsageError(f"-o {item}: write an attention option as ATTENTION.KEY=VALUE, e.g. lavo.num_bases=64")
        try:
            _, value = parse_override(rest)
        except ConfigError as e:
            raise UsageError(f"-o {item}: {e}") from None
        if key in out.get(name, {}):
            raise UsageError(f"-o {item}: {name}.{key} is given twice (-o {name}.{key}={out[name][key]!r} before); "
                             "give each option once")
        out.setdefault(name, {})[key] = value
    return out


@dataclass(frozen=True)
class Study:
    """One study as ``lavo-zoo compare`` runs it, built once (:meth:`load`) and checked as it is built: its config
    read once and checked with the study's overrides (:class:`~lavo_zoo.engine.configs.LoadedConfig`: every cell's
    config is that mapping validated with the study's overrides then the cell's, when the study plans the cell and in
    the cell's process), the attentions and seeds of its cells, and how each cell is trained and scored.

    Raises:
        UsageError: an attention or a seed given twice, an attention that is not registered, ``-o`` or ``--site``
            without ``--attentions``, an ``-o`` option of an attention the study does not list or does not take.
    """

    name: str  # CONFIG as given (a named config or a path): what each cell's record says
    config: LoadedConfig
    out_dir: Path
    attentions: tuple[str, ...] = ()  # one row each; none: the config's own attention, repeated over the seeds
    seeds: tuple[int, ...] = (1,)
    site: str | None = None  # encoder-decoder recipes: the site whose attention the rows vary
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # -o ATTN.KEY=VALUE: {attention: {key: value}}
    device: str | None = None
    split: str = "test"  # the split every cell is scored on
    rerun: bool = False  # train again the cells trained with another config (refused otherwise)
    max_batches: int | None = None  # score only the first N batches of the split
    efficiency: Efficiency | None = None  # how the rows' efficiency lengths are measured (None: not at all)
    dry_run: bool = False  # check every cell and print the plan; nothing is trained or written

    def __post_init__(self) -> None:
        check_distinct(list(self.attentions), "--attentions", "attention")
        check_distinct(list(self.seeds), "--seeds", "seed")
        if not self.attentions and (self.site is not None or self.options):
            raise UsageError("--site and -o choose attentions to compare: use them with --attentions")
        unknown = sorted(set(self.options) - set(self.attentions))
        if unknown:
            raise UsageError(f"-o names {', '.join(unknown)}, which --attentions does not list")
        check_study_attentions(list(self.attentions), self.options)

    @classmethod
    def load(cls, config: str, out_dir: Path, overrides: Sequence[str] = (), **settings: Any) -> Study:
        """The study of ``config``, read once.

        Args:
            config: a named config (``lm/tiny-lavo``) or a path to a YAML file.
            out_dir: the study folder.
            overrides: ``key=value`` strings applied to every cell (checked here, with the config).
            **settings: the other fields of :class:`Study` (``attentions``, ``seeds``, ``site``, ``options``,
                ``device``, ``split``, ``rerun``, ``max_batches``, ``efficiency``, ``dry_run``).

        Raises:
            ConfigError: the config cannot be read.
            UsageError: as :class:`Study`.
        """
        from lavo_zoo.engine.configs import load_config

        if "attentions" in settings:  # a hybrid row as the table labels it (one schedule written two ways: one row)
            settings["attentions"] = tuple(normal_row(row) for row in settings["attentions"])
        if "seeds" in settings:
            settings["seeds"] = tuple(settings["seeds"])
        return cls(config, load_config(config, overrides), Path(out_dir), **settings)

    def job(self, cell: Cell, key: str | None) -> CellJob:
        """The job of ``cell``: the study's config as read, the study's overrides then the cell's (its attention at
        ``key``, with its ``-o`` options, and its seed; a mechanism's row over a config with a schedule at ``key``
        drops the schedule), its folder and how it is scored."""
        scheduled = key is not None and has_schedule(self.config.checked, key)
        return CellJob(config=self.name, config_data=self.config.data, config_file=self.config.source,
                       overrides=[*self.config.overrides, *cell_overrides(key, cell, self.options, scheduled)],
                       cell_dir=str((self.out_dir / "cells" / cell.name).resolve()), attention=cell.attention,
                       seed=cell.seed, split=self.split, site=self.site, device=self.device,
                       max_batches=self.max_batches, recipe=recipe_target(self.config.recipe))


@dataclass
class PlannedCell:
    """A cell checked before any trains (:func:`plan_cell`): its job, its config as its run will train it, and
    whether ``--rerun`` trains it again."""

    cell: Cell
    job: CellJob
    folder: Path  # OUT/cells/<cell>, as the study names it (links not followed)
    recipe: Any
    cfg: Any
    stale: bool


def plan_cell(study: Study, cell: Cell, key: str | None) -> PlannedCell:
    """``cell`` checked as its run would check it, writing nothing: its place (a folder, or nothing yet), its config
    (:meth:`~lavo_zoo.compare.jobs.CellJob.cell_config`), its model (built on the meta device: an option the model
    refuses), and whether a kept cell was trained with that config (else refused, or with ``--rerun`` marked).

    Raises:
        UsageError, ConfigError: naming the cell and what to do.
    """
    from lavo_zoo.config import to_dict
    from lavo_zoo.engine.memory import build_on_meta

    folder = study.out_dir / "cells" / cell.name
    check_cell_folder(folder, cell)
    job = study.job(cell, key)
    recipe, cfg = job.cell_config()
    build_on_meta(partial(recipe.build_model, cfg))
    return PlannedCell(cell, job, folder, recipe, cfg, check_reusable(folder, to_dict(cfg), study.rerun))


def run_study(study: Study, launcher: Launcher | None = None, progress: Progress | None = None) -> list[CellRecord]:
    """Run every unfinished cell of ``study`` (attention-major order) with ``launcher`` (default: one after another in
    this process, :class:`~lavo_zoo.compare.launchers.SerialLauncher`) and return the records of the finished cells.
    With ``study.efficiency``, every record also gets its row's efficiency lengths (measured while no cell trains;
    not in cell.json). A dry run checks every cell (its config, the data of the first, each model) and prints the
    plan; nothing is trained or written.

    Args:
        study: the study (:meth:`Study.load`).
        launcher: where the cells run.
        progress: told the finished cells as they finish (the launchers that run cells at once).

    Raises:
        CellsFailed: cells that did not finish (the others did: ``records``), once the others are done.
    """
    from lavo_zoo.config import to_dict

    cfg = study.config.checked  # the study's config and overrides, checked when it was read
    key = attention_key(cfg, study.site) if study.attentions else None
    cells = [Cell(a, s) for a in study.attentions or [attention_label(to_dict(cfg))] for s in study.seeds]
    planned = [plan_cell(study, cell, key) for cell in cells]  # every cell checks out before the first trains
    if study.dry_run:
        _print_plan(study, planned)
        return []
    remove_cells([p.folder for p in planned if p.stale])  # --rerun: only now, every cell having checked out
    plan = None
    if study.efficiency is not None:
        setups: dict[str, dict[str, Any] | None] = {}
        for p in planned:
            if p.cell.attention not in setups:
                setups[p.cell.attention] = _row_setup(p.recipe, p.cfg, key)
        plan = EfficiencyPlan(setups, study.device, study.efficiency)
    result = (launcher or SerialLauncher()).run([p.job for p in planned], study.out_dir, progress, plan)
    records = distinct_runs(result.records)  # a run counts once, as --collect counts it
    for record in records:
        if record.attention in result.efficiency:
            record.efficiency = result.efficiency[record.attention]
    if result.failures:
        raise CellsFailed(result.failures, records)
    return records


def _row_setup(recipe: Any, cfg: Any, key: str | None) -> dict[str, Any] | None:
    """:func:`attention_setup` of a row; repeated runs of a config (``key`` None) measure its attention when the
    model has one (not sites); a hybrid row has none (its layers are not one attention)."""
    if key is None:
        try:
            key = attention_key(cfg, None)
        except UsageError:
            return None
    if has_schedule(cfg, key):  # a hybrid: no one layer to measure
        return None
    return attention_setup(recipe, cfg, key)


def _print_plan(study: Study, planned: list[PlannedCell]) -> None:
    """``compare --dry-run``: the first cell as ``train --dry-run`` describes it, then one line per cell (a cell that
    ``--rerun`` would train again is said so; nothing is removed)."""
    from lavo_zoo.engine.dry_run import describe_run

    first = planned[0]
    rows = describe_run(first.recipe, first.cfg, first.folder, study.device, resume="auto", config_name=study.name,
                        fresh=first.stale)
    lines = []
    for p in planned:
        state = ("trained again (--rerun: its config differs; the run would first remove what the study wrote "
                 "there)" if p.stale else "finished, kept" if (p.folder / CELL_FILE).exists() else
                 "resumes" if (p.folder / "checkpoints").is_dir() else "trains")
        params = sum(x.numel() for x in p.recipe.build_model(p.cfg).parameters())
        lines.append(f"  cell {p.cell.name:<28} {params:>12,} parameters  {state} in {p.folder}")
    click.echo(f"dry run: {len(planned)} cells check out; nothing is trained, written or removed")
    for label, text in rows:
        if label not in ("start", "would write"):
            click.echo(f"  {label:<12} {text}")
    for line in lines:
        click.echo(line)
