"""The ``lavo-zoo`` command line (click).

Exit codes: 0 success, 2 usage error (bad flag, config key, unknown name), 1 any other failure. Errors print one
short paragraph; ``--debug`` shows the traceback. Commands that live with their subsystem (``bench`` in
``lavo_zoo.bench``, ``download``/``cache``/``info``/``export`` in ``lavo_zoo.checkpoints.cli``) and the recipes' own
commands (``Recipe.commands`` -> ``lavo-zoo <name>``, ``Recipe.score_commands`` -> ``lavo-zoo score <name>``) are
imported only when used, so ``lavo-zoo --help`` stays fast: a built-in recipe's hooks are read from its recipe.py
source without importing it (torch, pandas), and a recipe's cli.py imports its heavy modules inside the commands.
"""
from __future__ import annotations

import ast
import importlib
import json
import sys
import traceback
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

from lavo_zoo.errors import UsageError, ZooError

LAZY_COMMANDS = {
    "bench": "lavo_zoo.bench:bench",
    "compare": "lavo_zoo.compare:compare",
    "new": "lavo_zoo.scaffold:new",
    "download": "lavo_zoo.checkpoints.cli:download",
    "cache": "lavo_zoo.checkpoints.cli:cache",
    "info": "lavo_zoo.checkpoints.cli:info",
    "export": "lavo_zoo.checkpoints.cli:export",
}
LAZY_HELP = {
    "bench": "Benchmark attentions: time and peak memory against length.",
    "compare": "Train and score one config per attention and seed; a paper-style table.",
    "new": "Scaffold a plugin package (a recipe or an attention).",
    "download": "Download a released checkpoint (verified, resumable, cached).",
    "cache": "List, verify or remove cached downloads.",
    "info": "Show one entry of the checkpoint index.",
    "export": "Pack a checkpoint directory for release and print its index entry.",
}
_DEBUG = False


# ------------------------------------------------------------------------------------------- recipe hooks
def _literal_hooks(path: Path) -> dict[str, dict[str, Any]] | None:
    """{recipe name: {"commands": {...}, "score_commands": {...}}} read from a recipe.py's source (no import), or
    None when a hook is not a literal (then the module is imported)."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        names = [d.args[0].value for d in node.decorator_list if isinstance(d, ast.Call) and d.args
                 and getattr(d.func, "id", "") == "register_recipe" and isinstance(d.args[0], ast.Constant)]
        if not names:
            continue
        hooks: dict[str, Any] = {"commands": {}, "score_commands": {}}
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in hooks and getattr(stmt, "value", None):
                    try:
                        hooks[target.id] = ast.literal_eval(stmt.value)
                    except ValueError:
                        return None
        out[names[0]] = hooks
    return out


@cache
def recipe_hooks() -> dict[str, dict[str, Any]]:
    """Every recipe's ``commands`` and ``score_commands`` ({recipe: {hook: {command: "module:attr"}}})."""
    from lavo_zoo.config import recipes_dir

    hooks: dict[str, dict[str, Any]] = {}
    for path in sorted(recipes_dir().glob("*/recipe.py")):
        found = _literal_hooks(path)
        if found is None:
            module = importlib.import_module(f"lavo_zoo.recipes.{path.parent.name}.recipe")
            found = {c.name: {"commands": c.commands, "score_commands": c.score_commands}
                     for c in vars(module).values() if isinstance(c, type) and "name" in vars(c)
                     and hasattr(c, "score_commands")}
        hooks.update(found)
    for ep in entry_points(group="lavo_zoo.recipes"):  # third-party recipes: imported to read their hooks
        if ep.name not in hooks:
            cls = ep.load()
            hooks[ep.name] = {"commands": dict(getattr(cls, "commands", {})),
                              "score_commands": dict(getattr(cls, "score_commands", {}))}
    return hooks


def recipe_commands(kind: str) -> dict[str, tuple[str, str]]:
    """{command name: (recipe, "module:attr")} for hook ``kind`` ("commands" or "score_commands")."""
    out: dict[str, tuple[str, str]] = {}
    for recipe, hooks in recipe_hooks().items():
        for name, target in hooks[kind].items():
            if name in out or (kind == "commands" and (name in LAZY_COMMANDS or name in cli.commands)):
                other = out[name][0] if name in out else "lavo-zoo itself"
                raise UsageError(f"recipe '{recipe}' declares command '{name}', which {other} already has; "
                                 f"rename one of them (Recipe.{kind})")
            out[name] = (recipe, target)
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
        return sorted([*self.commands, *LAZY_COMMANDS, *recipe_commands("commands")])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        if name in LAZY_COMMANDS:
            return _load_command(name, LAZY_COMMANDS[name], LAZY_HELP[name])
        recipe, target = recipe_commands("commands").get(name, (None, ""))
        return _load_command(name, target, f"A command of recipe '{recipe}'.") if recipe else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, self.commands[n].get_short_help_str(70) if n in self.commands else LAZY_HELP[n])
                for n in sorted([*self.commands, *LAZY_COMMANDS])]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        rows = [(n, f"[{recipe}] " + self.get_command(ctx, n).get_short_help_str(56 - len(recipe)))
                for n, (recipe, _) in sorted(recipe_commands("commands").items())]
        with formatter.section("Recipe commands [recipe]"):
            formatter.write_dl(rows)


class ScoreGroup(click.Group):
    """``lavo-zoo score <metric>``: the recipes' ``score_commands``, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(recipe_commands("score_commands"))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        recipe, target = recipe_commands("score_commands").get(name, (None, ""))
        return _load_command(name, target, f"A metric of recipe '{recipe}'.") if recipe else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, f"[{recipe}] " + self.get_command(ctx, n).get_short_help_str(56 - len(recipe)))
                for n, (recipe, _) in sorted(recipe_commands("score_commands").items())]
        with formatter.section("Metrics [recipe]"):
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
    """lavo-zoo: LAVO attention, its baselines, and six domain recipes to train, evaluate and compare them."""
    global _DEBUG
    _DEBUG = debug


# ---------------------------------------------------------------------------------------------------------- list
LIST_KINDS = ("recipes", "attentions", "evaluators", "configs", "checkpoints")


SITE_PATTERNS = {"encoder_self": "noncausal", "decoder_self": "causal", "cross": "cross"}
DECODING_LEGEND = ("decoding (step by step): state = streaming state, cache = source prepared once, "
                   "source = source kept and re-projected each step, prefix = falls back to re-running the prefix")


def _list_rows(kind: str, pattern: str | None, supports: str | None = None) -> list[dict[str, Any]]:
    if kind == "attentions":
        from dataclasses import asdict

        from lavo_zoo.attention import list_attentions
        return [asdict(i) for i in list_attentions(pattern, SITE_PATTERNS.get(supports, supports))]
    if kind == "recipes":
        from lavo_zoo.recipes import RECIPES
        return RECIPES.describe(pattern, lambda e: {
            "description": e.load().description, "evaluator": e.load().evaluator,
            "commands": sorted(e.load().commands) + [f"score {n}" for n in sorted(e.load().score_commands)],
            "tiny_config": e.load().tiny_config, "source": e.source})
    if kind == "evaluators":
        from lavo_zoo.evaluators import EVALUATORS
        return EVALUATORS.describe(pattern, lambda e: {
            "metrics": sorted(e.load().higher_is_better),
            "description": (e.load().__doc__ or "").strip().split("\n")[0], "source": e.source})
    if kind == "configs":
        import fnmatch

        from lavo_zoo.config import available_configs
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--pattern", "supports", default=None, metavar="PATTERN|SITE",
              type=click.Choice(["causal", "noncausal", "cross", *SITE_PATTERNS]),
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
            extra = {key: v for key, v in row.items() if key not in ("name", "options", "source")}
            desc = "  ".join(f"{key}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                             for key, v in extra.items() if key != "description")
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
  lavo-zoo train my_config.yaml --out runs/x --resume auto      # continue where runs/x stopped""")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory (default: runs/<domain>-<name>).")
@click.option("--resume", default=None, metavar="auto|PATH",
              help="'auto': continue from OUT's newest complete checkpoint if any; or a checkpoint directory.")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
@click.option("--max-steps", type=int, default=None, help="Shortcut for train.max_steps=N.")
def train(config: str, overrides: tuple[str, ...], out_dir: Path | None, resume: str | None, device: str | None,
          max_steps: int | None) -> None:
    """Train CONFIG (a <domain>/<name> or a YAML path) with optional key.sub=value OVERRIDES.

    The run directory receives config.yaml (resolved), metrics.jsonl and checkpoints/step-N/ with checkpoints/last
    pointing at the newest complete one.
    """
    from lavo_zoo.config import resolve_config
    from lavo_zoo.engine.trainer import Trainer

    overrides = list(overrides) + ([f"train.max_steps={max_steps}"] if max_steps is not None else [])
    recipe, cfg = resolve_config(config, overrides)
    if out_dir is None:
        out_dir = Path("runs") / str(config).replace("/", "-").removesuffix(".yaml")
    Trainer(recipe, cfg, out_dir, device=device, resume=resume).fit()


# ---------------------------------------------------------------------------------------------------------- eval
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
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the results JSON here.")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
@click.option("--max-batches", type=click.IntRange(min=1), default=None,
              help="Score only the first N batches, N >= 1 (quick checks).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file (refused otherwise).")
def eval_cmd(checkpoint: str, overrides: tuple[str, ...], split: str, out_file: Path | None, device: str | None,
             max_batches: int | None, overwrite: bool) -> None:
    """Score CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL or an hf:// reference) on a split.

    The model is rebuilt from the checkpoint's own config.yaml (OVERRIDES may change evaluation and data settings,
    not model.* ones: the weights fix the model), its recipe's evaluator runs, the metrics print as a table and,
    with --out, go to a results JSON. Recipes that write files while scoring (tts: synthesised wavs and plots) put
    them in a folder beside it (results.json -> results/).
    """
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.evaluate import evaluate_checkpoint, format_table

    if out_file is not None and out_file.exists() and not overwrite:  # before scoring: nothing is lost or wasted
        raise click.UsageError(f"--out {out_file} already exists; eval does not replace earlier results. Give "
                               "another --out, or add --overwrite to replace it.")
    with open_checkpoint(checkpoint) as path:
        results = evaluate_checkpoint(path, list(overrides), split=split, device=device, max_batches=max_batches,
                                      files_dir=out_file.with_suffix("") if out_file is not None else None,
                                      out_file=out_file)
    results["checkpoint"] = checkpoint
    click.echo(format_table(results))
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(results, indent=2) + "\n")
        click.echo(f"wrote {out_file}" + "".join(f" and {p}" for p in results.get("outputs", [])))


# ---------------------------------------------------------------------------------------------------- score
@cli.group("score", cls=ScoreGroup, epilog="""\b
Examples:
  lavo-zoo score --help                                    # the metrics the recipes provide
  lavo-zoo score forecast --pred forecast.npy --true truth.npy""")
def score() -> None:
    """Score files of predictions against references with a recipe's metric (no model needed)."""


# ----------------------------------------------------------------------------------------------------- data
@cli.command("data", epilog="""\b
Examples:
  lavo-zoo data lm --out data/builtin-pg19                 # the built-in corpus in the PG-19 layout
  lavo-zoo data time_series/ettm1 --out data/ETT-small     # a 15-minute ETT-layout CSV
  lavo-zoo data time_series --out data/ETT-small --size 2000""")
@click.argument("target", metavar="DOMAIN[/DATASET]")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write into (created if needed).")
@click.option("--size", type=click.IntRange(min=1), default=None,
              help="A smaller (or larger) instance, in the recipe's unit (books, rows, examples).")
def data_cmd(target: str, out_dir: Path, size: int | None) -> None:
    """Write a recipe's built-in (generated) dataset to disk in the real dataset's layout; train on it with
    data.path=PATH."""
    from lavo_zoo.recipes import get_recipe

    domain, _, dataset = target.partition("/")
    path = get_recipe(domain).write_data(out_dir, dataset or None, size)
    click.echo(f"wrote {path}")


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
    except Exception as e:  # noqa: BLE001 - last resort: a short message, the traceback with --debug
        if debug:
            traceback.print_exc()
        hint = "" if debug else "\n(run with --debug for the traceback)"
        click.echo(f"error: {type(e).__name__}: {e}{hint}", err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
