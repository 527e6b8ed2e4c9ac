"""The ``lavo-zoo`` command line (click).

Exit codes: 0 success, 2 usage error (bad flag, config key, unknown name, missing input file), 1 any other failure.
Errors print one short paragraph; ``--debug`` shows the traceback. Commands that live with their subsystem
(``bench`` in ``lavo_zoo.bench``, ``compare`` in ``lavo_zoo.compare``, ``download``/``cache``/``info``/``export``/
``push`` in ``lavo_zoo.checkpoints.cli``) and the recipes' own commands (the ``COMMANDS`` list of each recipe's
torch-free ``cli.py``) are imported only when used, so ``lavo-zoo --help`` stays fast.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import shlex
import sys
import traceback
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

from lavo_zoo.atomic import put_file
from lavo_zoo.errors import UsageError, ZooError, os_error_message
from lavo_zoo.options import device_option, json_flag, out_option, overwrite_option
from lavo_zoo.outputs import RESULTS, Outputs, check_run_output
from lavo_zoo.registry import plugin_failure

LAZY_COMMANDS = {
    "bench": "lavo_zoo.bench:bench",
    "compare": "lavo_zoo.compare.command:compare",
    "new": "lavo_zoo.scaffold:new",
    "download": "lavo_zoo.checkpoints.cli:download",
    "cache": "lavo_zoo.checkpoints.cli:cache",
    "info": "lavo_zoo.checkpoints.cli:info",
    "export": "lavo_zoo.checkpoints.cli:export",
    "push": "lavo_zoo.checkpoints.cli:push",
}
LAZY_HELP = {
    "bench": "Benchmarks: attention time and memory against length, recipes' throughput and speed.",
    "compare": "Train and score one config per attention and seed; a table with mean and spread.",
    "new": "Scaffold a plugin package (a recipe or an attention).",
    "download": "Download a released checkpoint (verified, resumable, cached).",
    "cache": "List, verify or remove cached downloads.",
    "info": "Show one entry of the checkpoint index and, once downloaded, its model card.",
    "export": "Pack a checkpoint directory with its model card for release; print its index entry.",
    "push": "Export a checkpoint to a Hugging Face repository, verify the upload, print its index entry.",
}


# ------------------------------------------------------------------------------------------- recipe commands
def recipe_cli_modules() -> dict[str, str]:
    """{recipe: its cli module}, found without importing any recipe (they load torch): for every recipe of the
    ``lavo_zoo.plugins.recipes`` entry-point group (the built-in ones and plugins alike), the ``cli`` module beside
    its recipe module, where there is one."""
    out: dict[str, str] = {}
    for ep in entry_points(group="lavo_zoo.plugins.recipes"):
        package = ep.value.partition(":")[0].rpartition(".")[0]
        module = f"{package}.cli" if package else "cli"
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken plugin is reported when it is used
            found = False
        if ep.name not in out and found:
            out[ep.name] = module
    return out


@cache
def recipe_commands() -> dict[str, tuple[str, click.Command]]:
    """{command name: (recipe, click command)} from the ``COMMANDS`` list of every recipe's ``cli.py``. Those
    modules are torch-free, so that ``lavo-zoo --help`` stays fast."""
    out: dict[str, tuple[str, click.Command]] = {}
    for recipe, module in recipe_cli_modules().items():
        try:
            commands = getattr(importlib.import_module(module), "COMMANDS", [])
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's commands module that raises or exits
            ep = next(ep for ep in entry_points(group="lavo_zoo.plugins.recipes") if ep.name == recipe)
            click.echo(f"warning: the commands of {plugin_failure(ep, e)} (its commands module {module} is left "
                       "out)", err=True)
            continue
        for command in commands:
            if command.name in out or command.name in LAZY_COMMANDS or command.name in cli.commands:
                other = out[command.name][0] if command.name in out else "lavo-zoo itself"
                raise UsageError(f"recipe '{recipe}' declares command '{command.name}', which {other} already "
                                 "has; rename one of them (COMMANDS in its cli.py)")
            out[command.name] = (recipe, command)
    return out


def _load_command(name: str, target: str, summary: str) -> click.Command:
    """The click command at ``"module:attr"``, or a stand-in that explains why it cannot be imported."""
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        reason = str(e)  # `e` itself is unbound once the except block ends

        @click.command(name, help=summary + " (unavailable in this installation)",
                       epilog=f"Examples:\n  lavo-zoo {name} --help   # shows why: {reason}")
        def unavailable() -> None:
            raise ZooError(f"`lavo-zoo {name}` is not available: {reason}")
        return unavailable


class ZooGroup(click.Group):
    """A group whose subsystem and recipe commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*self.commands, *LAZY_COMMANDS, *recipe_commands()])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        if name in LAZY_COMMANDS:
            return _load_command(name, LAZY_COMMANDS[name], LAZY_HELP[name])
        return recipe_commands().get(name, (None, None))[1]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, self.commands[n].get_short_help_str(70) if n in self.commands else LAZY_HELP[n])
                for n in sorted([*self.commands, *LAZY_COMMANDS])]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        rows = [(n, f"[{recipe}] " + command.get_short_help_str(56 - len(recipe)))
                for n, (recipe, command) in sorted(recipe_commands().items())]
        with formatter.section("Recipe commands [recipe]"):
            formatter.write_dl(rows)


@click.group(cls=ZooGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="""\b
Examples:
  lavo-zoo list attentions
  lavo-zoo train lm/tiny-lavo --out runs/tiny --max-steps 200
  lavo-zoo eval runs/tiny/checkpoints/last --split test --out results.json
  lavo-zoo generate runs/tiny/checkpoints/last --prompt "def main("
  lavo-zoo data time_series/etth1 --out data/ETT-small
  lavo-zoo bench attention --attentions lavo,sdpa --lengths 1024,4096 --mode fwdbwd""")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="lavo-zoo")
def cli(debug: bool) -> None:
    """lavo-zoo: LAVO attention, its baselines, and seven domain recipes to train, evaluate and compare them."""


# ---------------------------------------------------------------------------------------------------------- list
LIST_KINDS = ("recipes", "attentions", "evaluators", "configs", "checkpoints")


DECODING_LEGEND = ("decoding (step by step): state = streaming state, cache = source prepared once, "
                   "source = source kept and re-projected each step, prefix = falls back to re-running the prefix")


def _list_rows(kind: str, pattern: str | None, supports: str | None = None) -> list[dict[str, Any]]:
    if kind == "attentions":
        from dataclasses import asdict

        from lavo_zoo.attention import ATTENTIONS, attention_info
        from lavo_zoo.attention.spec import SITE_PATTERNS
        from lavo_zoo.errors import PluginError

        wanted, rows = SITE_PATTERNS.get(supports, supports), []
        for name in ATTENTIONS.names(pattern):  # as list_attentions, with a plugin that cannot load as its error
            try:
                info = attention_info(name)
            except PluginError as e:
                rows.append({"name": name, "error": str(e)})
                continue
            if wanted is None or wanted in info.patterns:
                rows.append(asdict(info))
        return rows
    if kind == "recipes":
        from lavo_zoo.engine.recipe import RECIPES
        commands = recipe_commands()
        return RECIPES.describe(pattern, lambda e: {
            "description": e.load().description, "evaluator": e.load().evaluator,
            "commands": sorted(n for n, (recipe, _) in commands.items() if recipe == e.name),
            "datasets": list(e.load().builtin.datasets if e.load().builtin else ()),
            "tiny_config": e.load().tiny_config, "source": e.source})
    if kind == "evaluators":
        from lavo_zoo.evaluators import EVALUATORS
        return EVALUATORS.describe(pattern, lambda e: {
            "metrics": sorted(e.load().higher_is_better), "scores_files": bool(e.load().files),
            "description": (e.load().__doc__ or "").strip().split("\n")[0], "source": e.source})
    if kind == "configs":
        import fnmatch

        from lavo_zoo.engine.configs import available_configs
        return [{"name": n} for n in available_configs() if pattern is None or fnmatch.fnmatch(n, pattern)]
    from lavo_zoo.checkpoints import list_checkpoints
    return list_checkpoints(pattern)


@cli.command("list", epilog="""\b
Examples:
  lavo-zoo list                       # everything
  lavo-zoo list attentions            # mechanisms, their patterns and streaming support
  lavo-zoo list attentions --pattern cross   # what can sit at the cross-attention site
  lavo-zoo list configs 'lm/*'        # built-in configs matching a glob
  lavo-zoo list recipes --json""")
@click.argument("kind", required=False, type=click.Choice(LIST_KINDS))
@click.argument("pattern", required=False)
@json_flag
@click.option("--pattern", "supports", default=None, metavar="PATTERN|SITE",
              type=click.Choice(["causal", "noncausal", "cross", "encoder_self", "decoder_self"]),
              help="Attentions only: those supporting this attention pattern, or an encoder-decoder site "
                   "(encoder_self = noncausal, decoder_self = causal, cross).")
def list_cmd(kind: str | None, pattern: str | None, as_json: bool, supports: str | None) -> None:
    """List recipes, attentions, evaluators, configs or released checkpoints (PATTERN is a glob on the name)."""
    if supports is not None and kind not in (None, "attentions"):
        raise click.UsageError("--pattern filters attentions: use it with `lavo-zoo list attentions`")
    kinds = [kind] if kind else list(LIST_KINDS)
    result = {k: _list_rows(k, pattern, supports) for k in kinds}
    if as_json:
        click.echo(json.dumps(result if kind is None else result[kind], indent=2, default=str))
        return
    for k, rows in result.items():
        click.echo(f"{k} ({len(rows)})")
        for row in rows:
            if "error" in row:
                click.echo(f"  {row['name']:<24} {row['error']}")
                continue
            extra = {key: v for key, v in row.items() if key not in ("name", "options", "source")}
            desc = "  ".join(f"{key}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                             for key, v in extra.items() if key != "description" and v != "")
            text = row.get("description", "")
            click.echo(f"  {row['name']:<24} {desc}" + (f"  - {text}" if text else ""))
        if k == "attentions":
            click.echo(f"  ({DECODING_LEGEND})")
        if kind is None:
            click.echo()


# --------------------------------------------------------------------------------------------------------- train
@cli.command(epilog="""\b
Examples:
  lavo-zoo train lm/tiny-lavo --out runs/tiny                  # built-in data, CPU
  lavo-zoo train lm/tiny-lavo train.lr=1e-3 model.num_layers=2 --max-steps 100
  torchrun --nproc-per-node 2 -m lavo_zoo.cli train lm/tiny-lavo --out runs/ddp   # DDP, 2 processes
  lavo-zoo train my_config.yaml --out runs/x --resume auto      # continue where runs/x stopped
  lavo-zoo train lm/pg19-lavo data.path=data/pg19 --dry-run     # check a long run first""")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@out_option("Run directory (default: runs/<domain>-<name>).", folder=True)
@click.option("--resume", default=None, metavar="auto|PATH",
              help="'auto': continue from OUT's newest complete checkpoint if any; or a checkpoint directory.")
@device_option
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Shortcut for train.max_steps=N (N >= 1).")
@click.option("--dry-run", is_flag=True,
              help="Check the config, the data's layout, the model and --out, print what the run would do and "
                   "write, and stop: nothing is trained or written.")
def train(config: str, overrides: tuple[str, ...], out: Path | None, resume: str | None, device: str | None,
          max_steps: int | None, dry_run: bool) -> None:
    """Train CONFIG (a <domain>/<name> or a YAML path) with optional key.sub=value OVERRIDES.

    The run directory receives config.yaml (resolved), metrics.jsonl and checkpoints/step-N/ with checkpoints/last
    pointing at the newest complete one.
    """
    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.engine.trainer import Trainer

    command = command_line("train", config, *overrides, out=out, resume=resume, device=device, max_steps=max_steps)
    overrides = list(overrides) + ([f"train.max_steps={max_steps}"] if max_steps is not None else [])
    recipe, cfg = resolve_config(config, overrides)
    if out is None:
        out = Path("runs") / str(config).replace("/", "-").removesuffix(".yaml")
    check_run_output(out)  # the output policy: never another command's run, a study's cell, nor inside a run
    if dry_run:
        from lavo_zoo.engine.dry_run import describe_run

        rows = describe_run(recipe, cfg, out, device, resume, config_name=config)
        click.echo("dry run: the config, data, model and --out check out; nothing is trained or written")
        for label, text in rows:
            click.echo(f"  {label:<12} {text}")
        return
    Trainer(recipe, cfg, out, device=device, resume=resume, command=command).fit()


# ---------------------------------------------------------------------------------------------------------- eval
def command_line(*args: str, **options: Any) -> str:
    """The ``lavo-zoo`` command line of a run, built from its arguments (not ``sys.argv``, which is another program
    under a test or ``python -m``): ``--name value`` for each set option, ``--name`` for a true flag."""
    words = ["lavo-zoo", *map(str, args)]
    for name, value in options.items():
        if value is None or value is False:
            continue
        words += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return shlex.join(words)


@cli.command("eval", epilog="""\b
Examples:
  lavo-zoo eval runs/tiny/checkpoints/last
  lavo-zoo eval runs/tiny/checkpoints/last --split validation --out val.json
  lavo-zoo eval runs/tiny/checkpoints/last --out val.json --overwrite   # replace an earlier val.json
  lavo-zoo eval runs/tiny/checkpoints/last eval.batch_size=4 --device cpu
  lavo-zoo eval release/tiny-lavo.tar.gz         # a packed checkpoint (lavo-zoo export)
  lavo-zoo eval lm/tiny-lavo@v1                 # a name from the checkpoint index (downloads once)""")
@click.argument("checkpoint")
@click.argument("overrides", nargs=-1)
@click.option("--split", default="test", show_default=True, help="Which split to score.")
@out_option("Write the results JSON here (its files, if the recipe writes any, go to the folder of the same stem).")
@device_option
@click.option("--max-batches", type=click.IntRange(min=1), default=None,
              help="Score only the first N batches, N >= 1 (quick checks).")
@overwrite_option
def eval_cmd(checkpoint: str, overrides: tuple[str, ...], split: str, out: Path | None, device: str | None,
             max_batches: int | None, overwrite: bool) -> None:
    """Score CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL or an hf:// reference) on a split.

    The model is rebuilt from the checkpoint's own config.yaml (OVERRIDES may change evaluation and data settings,
    not model.* ones: the weights fix the model), its recipe's evaluator runs, the metrics print as a table and,
    with --out, go to a results JSON. Recipes that write files while scoring (tts: synthesised wavs and plots) put
    them in a folder beside it (results.json -> results/), listed in its eval-manifest.json: --overwrite replaces
    only the files an earlier evaluation listed there, and a folder holding anything else is refused.
    """
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.evaluate import evaluate_checkpoint, files_folder, format_table

    command = command_line("eval", checkpoint, *overrides, "--split", split, device=device, max_batches=max_batches,
                           out=out, overwrite=overwrite)
    with Outputs("eval", overwrite, inputs={"CHECKPOINT": checkpoint}, command_line=command) as outputs:
        staged = outputs.file(out, RESULTS) if out is not None else None  # before scoring: nothing lost or wasted
        with open_checkpoint(checkpoint) as path:
            results = evaluate_checkpoint(path, list(overrides), split=split, device=device, max_batches=max_batches,
                                          files_dir=files_folder(out) if out is not None else None,
                                          out_file=out, overwrite=overwrite, command=command, reference=checkpoint,
                                          require_finite=True, outputs=outputs)
        click.echo(format_table(results))
        if staged is not None:
            put_file(staged, json.dumps(results, indent=2) + "\n")
    if out is not None:
        click.echo(f"wrote {out}" + "".join(f" and {p}" for p in results.get("outputs", []))
                   + (f" and the files in {results['files']}/" if results.get("files") else ""))


# ---------------------------------------------------------------------------------------------------- score
class ScoreCommand(click.Command):
    """``lavo-zoo score``: its help lists the evaluators that score files, with what each reads."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from lavo_zoo.evaluators import EVALUATORS

        rows = [(e.name, e.load().files) for e in EVALUATORS if getattr(e.load(), "files", "")]
        with formatter.section("Metrics (METRIC: what --pred and --ref hold)"):
            formatter.write_dl(rows)
        super().format_epilog(ctx, formatter)


@cli.command("score", cls=ScoreCommand, epilog="""\b
Examples:
  lavo-zoo score forecast --pred forecast.npy --ref truth.npy
  lavo-zoo score accuracy --pred runs/lra/predictions.txt --ref data/lra/labels.txt --out accuracy.json
  lavo-zoo score rouge --pred runs/summ/test.summaries.jsonl          # the summaries `eval --out` wrote
  lavo-zoo score chamfer --pred runs/pc/completed/ --ref data/pcn/test/complete/ --json
  lavo-zoo score mcd --pred runs/tts/test/synthesized --ref runs/tts/test/reference""")
@click.argument("metric")
@click.option("--pred", type=click.Path(path_type=Path), default=None,
              help="The predictions: a file or a folder, as the metric reads them (see below).")
@click.option("--ref", type=click.Path(path_type=Path), default=None, help="The references (ground truth).")
@out_option("Also write the results JSON here.")
@overwrite_option
@json_flag
@click.option("--true", "--gt", "old_ref", type=click.Path(path_type=Path), default=None, hidden=True)
@click.option("--hyp", "--syn", "old_pred", type=click.Path(path_type=Path), default=None, hidden=True)
@click.option("--pairs", "old_pairs", type=click.Path(path_type=Path), default=None, hidden=True)
def score(metric: str, pred: Path | None, ref: Path | None, out: Path | None, overwrite: bool, as_json: bool,
          old_ref: Path | None, old_pred: Path | None, old_pairs: Path | None) -> None:
    """Score saved predictions against references with METRIC's evaluator (no model needed).

    The results JSON has `eval`'s schema ({"metrics": {name: {"value", "higher_is_better"}}, "num_samples"}), with
    per-file, per-category or per-class results under "details". Older spellings (--true, --gt, --hyp, --syn,
    --pairs) still work and will be removed in a later release.
    """
    from lavo_zoo.engine.evaluate import format_table, score_files

    pred, ref = pred or old_pred or old_pairs, ref or old_ref
    if pred is None:
        raise click.UsageError("give --pred (the predictions) and --ref (the references); "
                               "`lavo-zoo score --help` says what each metric reads")
    with Outputs("score", overwrite, inputs={"--pred": pred, "--ref": ref}) as outputs:
        staged = outputs.file(out, RESULTS) if out is not None else None
        results = score_files(metric, pred, ref, command_line("score", metric, pred=pred, ref=ref, out=out,
                                                              overwrite=overwrite))
        click.echo(json.dumps(results, indent=2) if as_json else format_table(results))
        if staged is not None:
            put_file(staged, json.dumps(results, indent=2) + "\n")
    if out is not None and not as_json:
        click.echo(f"wrote {out}")


# ----------------------------------------------------------------------------------------------------- data
@cli.command("data", epilog="""\b
Examples:
  lavo-zoo data lm --out data/builtin-pg19                 # the built-in corpus in the PG-19 layout
  lavo-zoo data time_series/ettm1 --out data/ETT-small     # a 15-minute ETT-layout CSV
  lavo-zoo data time_series --out data/ETT-small --size 2000""")
@click.argument("target", metavar="DOMAIN[/DATASET]")
@out_option("Folder to write into (created if needed).", required=True, folder=True)
@click.option("--size", type=click.IntRange(min=1), default=None,
              help="A smaller (or larger) instance, in the recipe's unit (books, rows, examples).")
@overwrite_option
def data_cmd(target: str, out: Path, size: int | None, overwrite: bool) -> None:
    """Write a recipe's built-in (generated) dataset to disk in the real dataset's layout; train on it with
    data.path=PATH."""
    from lavo_zoo.engine.recipe import get_recipe

    domain, _, dataset = target.partition("/")
    path = get_recipe(domain).write_data(out, dataset or None, size, overwrite)
    click.echo(f"wrote {path}")


# ----------------------------------------------------------------------------------------------------------- env
@cli.command("env", epilog="""\b
Examples:
  lavo-zoo env                 # paste this into a bug report
  lavo-zoo env --json          # the same, for a program""")
@json_flag
def env_cmd(as_json: bool) -> None:
    """Show this installation: versions of Python, lavo-zoo and every dependency (and the range each must be in),
    whether it is the project's lock (requirements/lock.txt, in a source checkout), whether torchaudio and Triton
    load, CUDA / GPUs / NCCL, LAVO's kernels on CUDA, espeak-ng, the cache folder and its size. Writes nothing."""
    from lavo_zoo.engine.env_report import collect, format_report

    info = collect()
    click.echo(json.dumps(info, indent=2, default=str) if as_json else format_report(info))


# ---------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and map errors to exit codes (2 usage, 1 failure) without tracebacks."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="lavo-zoo", standalone_mode=False)
        return 0
    except click.exceptions.Abort as e:  # click turns Ctrl-C into Abort; a declined confirmation is one too
        if isinstance(e.__cause__, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            return 130
        click.echo("aborted", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except ZooError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {e}", err=True)
        return e.exit_code
    except OSError as e:  # a full or read-only disk, a file that vanished: which file, why, and what to do
        if debug:
            traceback.print_exc()
        click.echo(f"error: {os_error_message(e)}", err=True)
        return 1
    except Exception as e:  # noqa: BLE001 - last resort: a short message, the traceback with --debug
        from lavo_zoo.engine.memory import is_out_of_memory

        if is_out_of_memory(e):  # Python's, torch's (CUDA), torch's CPU allocator
            if debug:
                traceback.print_exc()
            click.echo(f"error: out of memory ({str(e).splitlines()[0] if str(e) else type(e).__name__}): a size "
                       "of this request (a sequence length, a batch, --size) needs more than this machine holds; "
                       "lower it", err=True)
            return 1
        if debug:
            traceback.print_exc()
        hint = "" if debug else "\n(run with --debug for the traceback)"
        click.echo(f"error: {type(e).__name__}: {e}{hint}", err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
