"""The ``lavo-zoo compare`` command: the study (:mod:`~lavo_zoo.compare.study`, its cells run by a launcher:
:mod:`~lavo_zoo.compare.launchers`) or ``--collect`` (:mod:`~lavo_zoo.compare.collect`), then the table
(:mod:`~lavo_zoo.compare.table`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from lavo_zoo.compare.collect import collect
from lavo_zoo.compare.efficiency import Efficiency
from lavo_zoo.compare.launchers import (
    LAUNCHER_SECTION,
    LAUNCHERS,
    Launcher,
    LauncherSettings,
    SerialLauncher,
    with_options,
)
from lavo_zoo.compare.outcomes import CellsFailed
from lavo_zoo.compare.slurm.options import parse_slurm_options
from lavo_zoo.compare.study import Study, parse_options, run_study
from lavo_zoo.compare.table import StudyTable, check_table_files, table_text, write_table
from lavo_zoo.engine.records import CellRecord
from lavo_zoo.errors import UsageError
from lavo_zoo.options import device_option, out_option


def _csv_list(text: str | None, what: str, cast: type = str) -> list:
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    try:
        return [cast(x) for x in items]
    except ValueError:
        raise UsageError(f"{what} must be a comma-separated list of {cast.__name__}s, got '{text}'") from None


@click.command("compare", epilog="""\b
Examples:
  lavo-zoo compare lm/tiny-lavo --attentions lavo,sdpa,local --seeds 1,2,3 --out runs/cmp-lm --max-steps 300
  lavo-zoo compare lm/tiny-lavo --attentions "lavo,sdpa,hybrid:lavo*3+sdpa,hybrid:gated_deltanet*3+sdpa" \\
      --seeds 1,2,3 --out runs/cmp-hybrid   # 3:1 hybrids beside the single mechanisms
  lavo-zoo compare time_series/tiny-lavo --seeds 1,2,3,4,5 --out runs/ts-repeats   # repeated runs of one config
  lavo-zoo compare summarization/tiny-sdpa --site encoder_self --attentions lavo,sdpa,local --out runs/cmp-summ
  lavo-zoo compare lm/tiny-lavo --attentions lavo,sdpa --out runs/cmp-lm --efficiency-lengths 512,2048,8192
  lavo-zoo compare lm/tiny-lavo --attentions lavo,performer -o lavo.num_bases=16 -o performer.num_features=32 \\
      --out runs/cmp train.lr=1e-3
  lavo-zoo compare lm/tiny-lavo --attentions lavo,sdpa --seeds 1,2,3 --out runs/cmp-lm --launcher local  # one per GPU
  lavo-zoo compare lm/pg19-lavo --attentions lavo,sdpa --seeds 1,2,3 --out runs/cmp-pg19 --launcher slurm \\
      --partition gpu --gpus-per-cell 1 --cpus-per-cell 8 --time 12:00:00 --no-wait   # again later: collects
  lavo-zoo compare --collect runs/a/test.json runs/b runs/cmp-lm --out runs/table""")
@click.argument("config", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--attentions", help="Comma-separated rows, one table row each: a registry name (lavo-zoo list "
                                  "attentions), or a hybrid of layers 'hybrid:NAME*COUNT+NAME...' (hybrid:"
                                  "gated_deltanet*3+sdpa: three gated_deltanet layers to one sdpa, repeated over the "
                                  "layers; a layer naming the config's mechanism keeps its options); without it the "
                                  "config's own attention, over --seeds (repeated runs).")
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
              help="Build the table from existing results: the arguments are results JSONs or folders holding them "
                   "(each run counted once).")
@click.option("--efficiency/--no-efficiency", default=True, show_default=True,
              help="Columns 'faster / smaller than softmax from': each attention's efficiency lengths against sdpa "
                   "(one layer at the model's width, heads and the site's pattern, forward + backward, as `lavo-zoo "
                   "bench attention` finds them), measured once and kept in OUT/efficiency/.")
@click.option("--efficiency-lengths", default=",".join(map(str, Efficiency.lengths)), show_default=True,
              help="The lengths swept before the bisection (comma-separated).")
@click.option("--dry-run", is_flag=True, help="Check every cell's config, the data and the models, print the plan "
                                              "and stop: nothing is trained or written.")
@click.option("--launcher", type=click.Choice(LAUNCHERS), default=None,
              help="Where the cells run: serial (one after another in this process; the default), local (several at "
                   "once on this machine, --jobs), slurm (one Slurm job per cell, through submitit). Also "
                   "launcher.name in the config's launcher: section, as every option below.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="local: cells at once, each in its own process (default: one per GPU, or one per 4 CPU cores); "
                   "on the CPU the cores are divided among them.")
@click.option("--cells-per-gpu", type=click.IntRange(min=1), default=None, help="local: cells that share one GPU.")
@click.option("--partition", default=None, help="slurm: the partition of the cells' jobs.")
@click.option("--gpus-per-cell", type=click.IntRange(min=0), default=None, help="slurm: GPUs of each cell's job.")
@click.option("--cpus-per-cell", type=click.IntRange(min=1), default=None,
              help="slurm: CPUs of each cell's job (and its torch threads).")
@click.option("--mem", default=None, help="slurm: memory of each cell's job, as sbatch --mem takes it (64G).")
@click.option("--time", "time_limit", default=None,
              help="slurm: time limit of each cell's job (minutes, HH:MM:SS or D-HH:MM:SS); a job stopped at its "
                   "limit or preempted is requeued and continues from the cell's last checkpoint.")
@click.option("--account", default=None, help="slurm: the account the jobs are charged to.")
@click.option("--qos", default=None, help="slurm: the jobs' quality of service.")
@click.option("--constraint", default=None, help="slurm: the nodes' features the jobs need (sbatch --constraint).")
@click.option("--slurm-option", "slurm_options", multiple=True, metavar="KEY=VALUE",
              help="slurm: any other sbatch option (repeatable), e.g. mail-type=END, or KEY alone for a flag.")
@click.option("--wait/--no-wait", default=None,
              help="slurm: wait for the cells, writing the table as they finish (default), or submit and return; "
                   "the same command later collects the finished cells and waits for (or reports) the others.")
def compare(config: str | None, overrides: tuple[str, ...], out: Path | None, collect_paths: bool,
            efficiency: bool, **given: Any) -> None:
    """Train and score CONFIG once per (attention, seed) with the same budget, then write a comparison table.

    Finished cells are kept and killed ones resume, so the same command continues an interrupted study. The cells
    run one after another here, several at once on this machine (--launcher local) or as jobs on a Slurm cluster
    (--launcher slurm); the study folder is the only coordination between them.
    """
    if out is None:  # --collect too: the table is written, not only printed; the dry run checks the cells in OUT
        raise UsageError("give --out DIR, the study folder (cells/, table.md, table.csv, chart.png)"
                         + ("; with --collect, where the table goes" if collect_paths else ""))
    if collect_paths:
        paths = [Path(p) for p in ([config] if config else []) + list(overrides)]
        check_table_files(out, {f"--collect {p}": p for p in paths})
        if not paths:
            raise UsageError("--collect needs results JSONs or folders, e.g. lavo-zoo compare --collect runs/a runs/b "
                             "--out runs/table")
        records, title = collect(paths, efficiency), "collected results"
    else:
        check_table_files(out, {"CONFIG": config})
        if not config:
            raise UsageError("give a CONFIG (e.g. lm/tiny-lavo), or --collect with existing results")
        study = _study(config, list(overrides), out, efficiency, given)
        settings = with_options(study.config.settings.get(LAUNCHER_SECTION), _launcher_given(given))
        records, title = _run(study, settings)
        if records is None:
            return
    for path in write_table(records, out, title):
        click.echo(f"wrote {path}")
    click.echo(table_text(records, title))  # this command's table (another one may write the study's at once)


def _study(config: str, overrides: list[str], out: Path, efficiency: bool, given: dict[str, Any]) -> Study:
    """The study the command line asks for (its study options, in ``given``), its config read once."""
    how = None  # how the efficiency lengths are measured (None: not at all)
    if efficiency:
        from lavo_zoo.bench.timing import parse_ints

        how = Efficiency(lengths=tuple(sorted(set(parse_ints(given["efficiency_lengths"], "--efficiency-lengths")))))
    max_steps = given["max_steps"]
    return Study.load(config, out, overrides + ([f"train.max_steps={max_steps}"] if max_steps is not None else []),
                      attentions=_csv_list(given["attentions"], "--attentions"),
                      seeds=_csv_list(given["seeds"], "--seeds", int) or [1], site=given["site"],
                      options=parse_options(given["options"]), device=given["device"], split=given["split"],
                      rerun=given["rerun"], max_batches=given["max_batches"], efficiency=how,
                      dry_run=given["dry_run"])


def _launcher_given(given: dict[str, Any]) -> dict[str, Any]:
    """The launcher settings the command line gives (None: not given), by :class:`LauncherSettings` field."""
    names = {"launcher": "name", "time_limit": "time"}  # the options whose names are not the settings'
    settings = {f.name for f in dataclasses.fields(LauncherSettings)}
    found = {names.get(option, option): value for option, value in given.items()
             if names.get(option, option) in settings}
    found["slurm_options"] = parse_slurm_options(found["slurm_options"])
    return found


def _run(study: Study, settings: LauncherSettings) -> tuple[list[CellRecord] | None, str]:
    """Run the study with the launcher ``settings`` choose: the finished cells' records (None: nothing to tabulate,
    said so) and the table's title. A table of the cells that finished is written as they finish (launchers running
    several at once) and when some fail."""
    title = f"{study.name} on {study.split}" + (f", varying {study.site}" if study.site else "")
    table = StudyTable(study.out_dir, title, max(1, len(study.attentions)) * len(study.seeds))
    chosen = make_launcher(settings, study.device)  # its checks (Slurm's commands, --time, ...) run in a dry run too
    try:
        records = run_study(study, launcher=None if study.dry_run else chosen,
                            progress=None if settings.name == "serial" else table.write)
    except CellsFailed as e:
        if e.records:
            table.write(e.records)
            click.echo(f"wrote {study.out_dir / 'table.md'} with the {len(e.records)} finished cell(s)")
        raise
    if study.dry_run:
        click.echo(f"  launcher     {chosen.plan(table.expected)}")
        return None, table.title
    if not records:
        click.echo("no cell has finished yet; the same command writes the table once one has")
        return None, table.title
    return records, table.title_of(len(records))


def make_launcher(settings: LauncherSettings, device: str | None) -> Launcher:
    """The launcher the settings name (here, above the launchers' modules, which import their shared parts from
    :mod:`~lavo_zoo.compare.outcomes` and :mod:`~lavo_zoo.compare.launchers`)."""
    if settings.name == "local":
        from lavo_zoo.compare.local import LocalLauncher

        return LocalLauncher(settings.jobs, settings.cells_per_gpu, device)
    if settings.name == "slurm":
        from lavo_zoo.compare.slurm.launcher import SlurmLauncher

        if device is not None and device.startswith("cuda") and not settings.gpus_per_cell:
            raise UsageError(f"--device {device}: the cells' jobs get no GPU unless asked for; add --gpus-per-cell 1 "
                             "(or launcher.gpus_per_cell in the config)")
        return SlurmLauncher(settings)
    return SerialLauncher()
