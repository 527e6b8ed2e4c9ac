"""The ``lavo-zoo compare`` command: the study (:mod:`~lavo_zoo.compare.study`) or ``--collect``
(:mod:`~lavo_zoo.compare.collect`), then the table (:mod:`~lavo_zoo.compare.table`)."""
from __future__ import annotations

from pathlib import Path

import click

from lavo_zoo.compare.collect import collect
from lavo_zoo.compare.efficiency import Efficiency
from lavo_zoo.compare.study import parse_options, run_study
from lavo_zoo.compare.table import write_table
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
def compare(config: str | None, overrides: tuple[str, ...], attentions: str | None, site: str | None, seeds: str,
            options: tuple[str, ...], out: Path, split: str, device: str | None, max_steps: int | None,
            max_batches: int | None, rerun: bool, collect_paths: bool, efficiency: bool,
            efficiency_lengths: str, dry_run: bool) -> None:
    """Train and score CONFIG once per (attention, seed) with the same budget, then write a comparison table.

    Finished cells are kept and killed ones resume, so the same command continues an interrupted study.
    """
    if out is None:  # --collect too: the table is written, not only printed; the dry run checks the cells in OUT
        raise UsageError("give --out DIR, the study folder (cells/, table.md, table.csv, chart.png)"
                         + ("; with --collect, where the table goes" if collect_paths else ""))
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
