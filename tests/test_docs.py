"""Every documented command and Python block runs: README.md, docs/*.md and each recipe's README, block by block in
order, in a fresh folder per file, as a user would type them; and every ``key=value`` override they and the --help
texts show validates.

- A shell block (fenced ``bash``, or an indented block of commands) runs through bash with ``lavo-zoo`` standing in
  for a recorder, so loops and variables expand as written; each recorded command then runs in this process
  (``lavo_zoo.cli.main``) and must exit 0. Other programs (``pip``, ``pytest``, ``torchrun``, ``python``) are not
  run: the blocks that need them are marked.
- Short by construction: ``train`` stops after 2 optimiser steps (validated and saved at step 2), ``compare`` runs
  its first seed for 2 steps, scores 1 batch per cell and measures no efficiency lengths, ``eval`` scores 1 batch,
  ``summarize`` writes summaries of at most 4 tokens.
  A block marked ``<!-- doc-test: dry-run -->`` (paper-size, GPU, real-dataset or study runs) runs its ``train``
  and ``compare`` commands with ``--dry-run``, after the documented ``lavo-zoo data`` command that writes their
  input; the commands that read what those runs would write (``eval``, ``generate``, ``compare --collect``, ...)
  are not run.
- A Python block runs with ``exec`` in the same folder.
- A block marked ``<!-- doc-test: slurm -->`` (studies submitted to a Slurm cluster) runs as written, shortened as
  above, in a folder of its own, where a Slurm cluster answers (CI starts a one-node one: .ci/slurm-cluster); where
  none does, its test skips, saying why.
- A block that cannot run is marked in the Markdown, on the line before it: ``<!-- doc-test: skip: REASON -->``;
  the marks are counted here (:data:`SKIPPED`), so a new one is a deliberate change. A dry-run block over a real
  dataset the reader fetches names the command that writes a stand-in of its layout:
  ``<!-- doc-test: dry-run: setup: lavo-zoo data lm --out data/pg19-mini -->``.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from lavo_zoo.cli import cli
from lavo_zoo.config import ConfigError
from lavo_zoo.engine.configs import available_configs, resolve_config
from lavo_zoo.engine.recipe import RECIPES, get_recipe

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "recipes").glob("*/README.md"))]
MARK = re.compile(r"<!--\s*doc-test:\s*(skip|dry-run|slurm)\s*(?::\s*(.*?))?\s*-->")
SETUP = re.compile(r"setup:\s*(.*)")
SHELL_START = re.compile(r"^\s*(?:\w+=\S+\s+)*(lavo-zoo|for|pip|pytest|torchrun|source|python3?|\.venv)\b")
SKIPPED = 18  # blocks marked skip in all of DOCS; change it together with the marks
# programs a shell block may name besides lavo-zoo: recorded as not run (their blocks carry a skip mark)
STAND_INS = "lavo-zoo pip pytest torchrun python python3 source"
TRAIN_CAP = ["--max-steps", "2", "train.eval_every=2", "train.eval_batches=1", "train.save_every=2"]
# commands that read what a training run wrote: in a dry-run block (whose runs are not trained) they are not run
FOLLOW_UPS = {"eval", "generate", "forecast", "forecast-plot", "synthesize", "summarize", "complete", "score",
              "recall-plot", "export", "push"}


@dataclass
class Block:
    file: Path
    line: int  # 1-based line of the block's first line
    kind: str  # "shell" or "python"
    text: str
    mark: str | None  # "skip", "dry-run", "slurm" or None
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def _mark_before(lines: list[str], index: int) -> tuple[str | None, str]:
    """The doc-test mark on the last non-blank line before line ``index``."""
    for j in range(index - 1, -1, -1):
        if lines[j].strip():
            found = MARK.search(lines[j])
            return (found.group(1), (found.group(2) or "").strip()) if found else (None, "")
    return None, ""


def blocks(file: Path) -> list[Block]:
    """The fenced ``bash`` and ``python`` blocks of a Markdown file, in order."""
    lines = file.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in ("bash", "sh", "python"):
            mark, reason = _mark_before(lines, i)
            kind = "python" if fence.group(1) == "python" else "shell"
            out.append(Block(file, i + 2, kind, "\n".join(lines[i + 1:end]), mark, reason))
        i = end + 1
    return out


def unfenced_commands(file: Path) -> list[int]:
    """Lines of ``file`` outside fences that look like commands in an indented block (which this test would miss)."""
    found, fenced = [], False
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("    ") and SHELL_START.match(line[4:]):
            found.append(number)
    return found


def expand(block: Block, folder: Path) -> list[list[str]]:
    """The ``lavo-zoo`` commands of a shell block as bash expands them (loops, variables), recorded, not run."""
    log = folder / ".doc-test-commands"
    log.unlink(missing_ok=True)
    # each command as its argument count, then its arguments, NUL-terminated (bash's printf: no process per command)
    record = "printf '%s\\0' \"$#\" \"$@\" >> \"$DOC_LOG\""
    recorder = ("__record() { " + record + "; }\n"
                + "".join(f"{name}() {{ __record {name} \"$@\"; }}\n" for name in STAND_INS.split()))
    result = subprocess.run(["bash", "-c", recorder + block.text], cwd=folder, capture_output=True, text=True,
                            env={**os.environ, "DOC_LOG": str(log)}, timeout=60, check=False)
    assert result.returncode == 0, f"{block}: the shell block does not run in bash: {result.stderr}"
    fields = log.read_bytes().decode().split("\0")[:-1] if log.exists() else []
    commands = []
    while fields:
        count, fields = int(fields[0]), fields[1:]
        commands.append(fields[:count])
        fields = fields[count:]
    others = [c for c in commands if c[0] != "lavo-zoo"]
    assert not others, (f"{block} runs {shlex.join(others[0])}, which this test does not run: mark the block "
                        "'<!-- doc-test: skip: REASON -->'")
    return [c[1:] for c in commands]


def _without(args: list[str], option: str) -> list[str]:
    """``args`` without ``option`` and its value."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == option:
            skip = True
        elif not a.startswith(option + "="):
            out.append(a)
    return out


def shortened(args: list[str], dry_run: bool) -> list[str]:
    """A documented command cut to the test's budget (see the module docstring)."""
    if args[:1] == ["train"]:
        return [*args, "--dry-run"] if dry_run else [*_without(args, "--max-steps"), *TRAIN_CAP]
    if args[:1] == ["compare"] and "--collect" not in args:
        if dry_run:
            return [*args, "--dry-run"]
        seeds = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--seeds"), "1").split(",")[:1]
        kept = _without(_without(_without(args, "--max-steps"), "--max-batches"), "--seeds")
        return [*kept, "--seeds", seeds[0], "--max-steps", "2", "--max-batches", "1", "--no-efficiency"]
    if args[:1] == ["eval"]:
        return [*_without(args, "--max-batches"), "--max-batches", "1"]
    if args[:1] == ["summarize"]:  # a 2-step model never ends a summary: cap its length
        return [*_without(args, "--max-length"), "--max-length", "4"]
    return args


def run_command(args: list[str], block: Block) -> None:
    from lavo_zoo.cli import main

    output = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = main(args)
    if os.environ.get("DOC_TEST_TIMES"):
        print(f"{time.perf_counter() - start:6.1f} s  lavo-zoo {shlex.join(args)[:150]}", file=sys.__stderr__)
    assert code == 0, f"{block}: `lavo-zoo {shlex.join(args)}` exited {code}:\n{output.getvalue()[-3000:]}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_run(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for block in blocks(doc):
        if block.mark in ("skip", "slurm"):
            continue
        if block.kind == "python":
            exec(compile(block.text, str(block), "exec"), {"__name__": "__main__"})  # noqa: S102 - our own docs
            continue
        setup = SETUP.match(block.reason)
        if block.mark == "dry-run" and setup:
            args = shlex.split(setup.group(1))[1:]
            if not Path(args[args.index("--out") + 1]).exists():  # once per stand-in
                run_command(args, block)
        for args in expand(block, tmp_path):
            if block.mark == "dry-run" and (args[0] in FOLLOW_UPS or args[0] == "compare" and "--collect" in args):
                continue  # reads what the (dry) runs would have written
            run_command(shortened(args, block.mark == "dry-run"), block)
    # the examples write under runs/ and data/ only, which .gitignore keeps out of a clone
    stray = sorted(p.name for p in tmp_path.iterdir() if p.name not in {"runs", "data", ".doc-test-commands"})
    assert not stray, f"{doc.relative_to(ROOT)}: its examples write {stray} outside runs/ and data/"


SLURM_BLOCKS = [b for doc in DOCS for b in blocks(doc) if b.mark == "slurm"]


@pytest.mark.parametrize("block", SLURM_BLOCKS, ids=str)
def test_documented_slurm_studies_run_on_a_cluster(block: Block, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import slurm_missing

    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    from lavo_zoo.compare.slurm import queue

    monkeypatch.setattr(queue, "POLL_S", 1.0)
    commands = expand(block, tmp_path)
    assert commands, f"{block} runs no lavo-zoo command"
    for args in commands:
        run_command(shortened(args, dry_run=False), block)
    assert list(tmp_path.glob("runs/*/table.md")), f"{block}: no study wrote its table"


def test_the_readme_shows_a_slurm_study() -> None:
    assert any(b.file.name == "README.md" for b in SLURM_BLOCKS)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_are_in_fenced_blocks(doc: Path) -> None:
    assert not unfenced_commands(doc), f"{doc}: lines {unfenced_commands(doc)} show commands in an indented block; " \
        "put them in a fenced ```bash block so that they are run"


def test_every_skipped_block_says_why() -> None:
    skipped = [b for doc in DOCS for b in blocks(doc) if b.mark == "skip"]
    assert all(b.reason for b in skipped), [str(b) for b in skipped if not b.reason]
    assert len(skipped) == SKIPPED, f"{len(skipped)} blocks are marked skip, SKIPPED says {SKIPPED}: " + \
        ", ".join(f"{b} ({b.reason})" for b in skipped)


# ------------------------------------------------------------------------------------------ override examples
# Every `key=value` override the README, the recipes' READMEs and the --help texts show validates against the config
# its example names (else against at least one recipe's tiny config).
_OVERRIDE = re.compile(r"(?<![\w.$/-])((?:train|model|data|eval)(?:\.\w+)+=(?:\[[^\]]*\]|[^\s`'\"),;]+))")
_PLACEHOLDER = re.compile(r"=(?:[A-Z_]+\.?|.*\$.*)$")  # key=N, data.path=FILE: a placeholder, not an example;
# train.seed=$s: a shell variable (the blocks above run as bash expands them)


def _help_texts() -> str:
    def walk(group: click.Group, ctx: click.Context):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            sub = click.Context(cmd, parent=ctx, info_name=name)
            yield cmd.get_help(sub)
            if isinstance(cmd, click.Group):
                yield from walk(cmd, sub)
    return "\n".join(walk(cli, click.Context(cli, info_name="lavo-zoo")))


def _snippets(text: str) -> list[str]:
    """A markdown text's examples: each line of a fenced block (continuations joined) and each inline code span."""
    out, prose = [], []
    for i, part in enumerate(re.split(r"^```.*$", text, flags=re.MULTILINE)):
        (out.extend(part.replace("\\\n", " ").splitlines()) if i % 2 else prose.append(part))
    out += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return out


def _examples() -> list[tuple[str, str | None, list[str]]]:
    """(where, config named in the same example or None, overrides) for every example that shows overrides."""
    sources = {p.relative_to(ROOT).as_posix(): _snippets(p.read_text())
               for p in [ROOT / "README.md", *sorted(ROOT.glob("recipes/*/README.md"))]}
    sources["--help"] = _help_texts().replace("\\\n", " ").splitlines()
    configs = set(available_configs())
    found = []
    for where, snippets in sources.items():
        for snippet in snippets:
            overrides = [o for o in _OVERRIDE.findall(snippet) if not _PLACEHOLDER.search(o)]
            if not overrides:
                continue
            named = [w for w in re.findall(r"[\w.-]+/[\w.$-]+", snippet) if w in configs]
            found.append((where, named[0] if named else None, overrides))
    return found


EXAMPLES = _examples()


def test_the_documentation_shows_override_examples():
    assert len(EXAMPLES) >= 10
    shown = {o for _, _, overrides in EXAMPLES for o in overrides}
    assert {"model.attention.name=sdpa", "model.attention.cross.name=performer"} <= shown


@pytest.mark.parametrize("where,config,overrides", EXAMPLES, ids=[f"{w}:{' '.join(o)}" for w, _, o in EXAMPLES])
def test_override_examples_in_the_readme_and_help_validate(where, config, overrides, tmp_path):
    """Each example applies to the config its line names, else to at least one recipe's tiny config (an example on a
    checkpoint, e.g. `lavo-zoo eval CKPT eval.beam=4`, names no config)."""
    overrides = [o.replace("$", "") for o in overrides if "${" not in o]
    candidates = [config] if config else [get_recipe(name).tiny_config for name in RECIPES.names()]
    errors = []
    for name in candidates:
        try:
            resolve_config(name, overrides)
            return
        except ConfigError as e:
            errors.append(str(e))
    pytest.fail(f"{where}: {' '.join(overrides)} does not validate: {errors}")
