"""The test layout (docs/architecture.md, "Tests"): the module ``<package path>/<name>.py`` is tested in
``tests/<package path>/test_<name>.py``, the package path as pyproject.toml's ``package-dir`` installs it
(``zoo/a/b.py`` -> ``tests/a/test_b.py``, ``recipes/lm/x.py`` -> ``tests/recipes/lm/test_x.py``). A package's
``__init__.py`` and ``__main__.py`` are not modules of the rule (what an ``__init__.py`` holds is tested in its
package's test folder); a ``cli.py`` is a module like any other.

A module without its mirrored test file is on :data:`NOT_MIRRORED` with the reason (where it is tested instead); a
module neither mirrored nor listed fails, and so does a listed module that has gained its mirrored file, so the list
only shrinks. A mirrored file must test its module: it holds a test and names the module (an import or its path)."""
from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

_REGISTRY = ("a mechanism with nothing particular beyond its naive reference: tested by the registry-driven tests "
             "(tests/attention/test_naive_references.py, test_recurrent.py, test_registry_contract.py)")
_TRITON = ("a LAVO Triton kernel: tested through tests/attention/lavo/test_triton.py, which runs every LAVO Triton "
           "kernel in one Triton-interpreter subprocess")
_FLA = "the op's flash-linear-attention glue: tested on fla's stand-in in tests/attention/ops/test_fla.py"
_RECURRENCE = ("the op's token-by-token recurrence, the reference that its test_chunk.py and "
               "tests/attention/ops/test_fla.py compare with")
_BENCH = "a `lavo-zoo bench` command: no test file of its own yet"
_SLURM = ("a part of the Slurm launcher: tested through tests/compare/slurm/test_launcher.py (a study's jobs on "
          "submitit's local executor and on a real Slurm)")
_LM_HF = "the lm recipe's transformers form: tested through tests/recipes/lm/test_hf.py (one file for lm/hf/)"
_LRA_DATA = ("what the LRA tasks' data share: tested through the tasks' tests in tests/recipes/lra/data/ and "
             "tests/recipes/lra/test_builtin.py")
_COMMANDS = "the domain's commands: tested through tests/recipes/{domain}/test_infer.py and test_recipe.py"
_MODEL = "the domain's network: tested through tests/recipes/{domain}/test_recipe.py and the recipe contract " \
         "(tests/recipes/test_recipe_contract.py)"
_PLOT = "the domain's figure: drawn by its command's tests in tests/recipes/{domain}/test_recipe.py"

# module -> where it is tested instead of its mirrored file (shrink it: a module that gains its file must leave)
NOT_MIRRORED: dict[str, str] = {
    "zoo/attention/based.py": _REGISTRY,
    "zoo/attention/deltanet.py": _REGISTRY,
    "zoo/attention/gated_deltanet.py": _REGISTRY,
    "zoo/attention/gla.py": _REGISTRY,
    "zoo/attention/mamba2.py": _REGISTRY,
    "zoo/attention/vanilla.py": _REGISTRY,
    "zoo/attention/lavo/fused.py": _TRITON,
    "zoo/attention/lavo/triton_memory.py": _TRITON,
    "zoo/attention/ops/window/triton.py": _TRITON,
    "zoo/attention/lavo/memory.py": "LAVO's memory rows: tested through the layer and the op against lavo/naive.py "
                                    "(tests/attention/lavo/test_layer.py, test_ops.py, test_binding.py)",
    "zoo/attention/lavo/naive.py": "LAVO's slow reference, what every test in tests/attention/lavo/ compares with",
    "zoo/attention/ops/naive.py": "the dense references and masks the attention tests compare with",
    "zoo/attention/ops/window/naive.py": "the window's dense reference, what tests/attention/test_local.py and "
                                         "tests/attention/lavo/test_triton.py compare with",
    "zoo/attention/ops/chunking.py": "what the chunked forms share: tested through tests/attention/ops/*/test_chunk.py "
                                     "and tests/attention/test_recurrent_finite.py",
    "zoo/attention/ops/delta_rule/fla.py": _FLA,
    "zoo/attention/ops/gated_linear/fla.py": _FLA,
    "zoo/attention/ops/delta_rule/naive.py": _RECURRENCE,
    "zoo/attention/ops/gated_linear/naive.py": _RECURRENCE,
    "zoo/attention/ops/window/sinks.py": "local's attention sinks: tested through tests/attention/test_local.py",
    "zoo/bench/chamfer.py": _BENCH,
    "zoo/bench/decode.py": _BENCH,
    "zoo/bench/report.py": _BENCH,
    "zoo/bench/step.py": _BENCH,
    "zoo/bench/summarization.py": _BENCH,
    "zoo/bench/counting.py": "tested through tests/bench/test_ops.py (`bench ops`, the counts it pins)",
    "zoo/bench/timing.py": "tested through tests/bench/test_attention.py",
    "zoo/cli.py": "the click application: its commands are tested in tests/cli/ and each command's own folder",
    "zoo/compare/outcomes.py": "what the launchers share: tested through tests/compare/test_local.py and "
                               "tests/compare/slurm/test_launcher.py",
    "zoo/compare/slurm/cell_jobs.py": _SLURM,
    "zoo/compare/slurm/efficiency_job.py": _SLURM,
    "zoo/compare/slurm/submissions.py": _SLURM,
    "zoo/data/split.py": "tested through tests/data/test_stdlib.py",
    "zoo/engine/data.py": "the trainer's batching: tested through tests/engine/test_trainer.py (an exact resume)",
    "zoo/engine/dry_run.py": "`train --dry-run`: run by tests/test_docs.py's documented commands",
    "zoo/engine/interrupt.py": "the clean stop: tested through tests/engine/test_trainer.py (SIGINT / SIGTERM)",
    "zoo/engine/env.py": "tested through tests/engine/test_env_report.py and tests/checkpoints/test_card.py",
    "zoo/engine/recipe.py": "the recipe contract: tested through tests/recipes/test_recipe_contract.py",
    "zoo/engine/run_config.py": "the run schema: tested through tests/test_config.py and "
                                "tests/recipes/test_recipe_contract.py",
    "zoo/errors.py": "the exception types: asserted by every test of a refusal (the messages: tests/cli/)",
    "zoo/formats/multinews.py": "tested through tests/recipes/summarization/test_data.py",
    "zoo/formats/text.py": "tested through the readers' tests (tests/recipes/*/test_data.py, tests/cli/)",
    "zoo/free_memory.py": "tested through tests/engine/test_predictor.py and tests/attention/test_base.py",
    "zoo/hf.py": "the transformers plugins: tested through tests/test_registry.py",
    "zoo/nn/full_precision.py": "tested through the models that use it (tests/recipes/summarization/test_model.py)",
    "zoo/nn/position.py": "tested through tests/nn/test_transformer.py",
    "zoo/options.py": "the commands' shared click options: tested through tests/cli/",
    "zoo/testing/recipe.py": "the recipe kit: run on every recipe by tests/recipes/test_recipe_contract.py",
    "zoo/version.py": "one line, the installed version: read by tests/engine/test_env_report.py",
    "recipes/lm/cli.py": _COMMANDS.format(domain="lm"),
    "recipes/lm/plot.py": "`eval.plot`: drawn by tests/recipes/lm/test_recipe.py",
    "recipes/lm/hf/configuration.py": _LM_HF,
    "recipes/lm/hf/folder.py": _LM_HF,
    "recipes/lm/hf/modeling.py": _LM_HF,
    "recipes/lm/hf/tokenizer.py": _LM_HF,
    "recipes/lra/cli.py": "the lra recipe declares no command of its own",
    "recipes/lra/data/common.py": _LRA_DATA,
    "recipes/lra/data/stdlib.py": "the built-in Text and Retrieval corpus: tested through "
                                  "tests/recipes/lra/test_builtin.py and tests/data/test_stdlib.py",
    "recipes/lra/model.py": _MODEL.format(domain="lra"),
    "recipes/point_cloud/cli.py": _COMMANDS.format(domain="point_cloud"),
    "recipes/point_cloud/model.py": _MODEL.format(domain="point_cloud"),
    "recipes/point_cloud/plot.py": _PLOT.format(domain="point_cloud"),
    "recipes/recall/builtin.py": "tested through tests/recipes/recall/test_data.py",
    "recipes/recall/cli.py": _COMMANDS.format(domain="recall"),
    "recipes/recall/infer.py": "the recall predictor: tested through tests/recipes/recall/test_recipe.py",
    "recipes/recall/plot.py": _PLOT.format(domain="recall"),
    "recipes/summarization/cli.py": _COMMANDS.format(domain="summarization"),
    "recipes/time_series/cli.py": _COMMANDS.format(domain="time_series"),
    "recipes/time_series/model.py": _MODEL.format(domain="time_series"),
    "recipes/time_series/plot.py": _PLOT.format(domain="time_series"),
    "recipes/tts/cli.py": _COMMANDS.format(domain="tts"),
    "recipes/tts/plot.py": _PLOT.format(domain="tts"),
    "evaluators/loss.py": "the mean loss: tested through tests/engine/test_precision.py",
    "checkpoints/cache.py": "tested through tests/checkpoints/test_download.py and test_cli.py (cache ls|verify|rm)",
    "checkpoints/load.py": "`lavo_zoo.load`: tested through tests/checkpoints/test_cli.py and test_push.py",
    "checkpoints/release.py": "what a release publishes: tested through tests/checkpoints/test_card.py and "
                              "test_cli.py (export)",
    "checkpoints/resolve.py": "tested through tests/checkpoints/test_cli.py and test_index.py",
}


def package_dirs() -> dict[str, Path]:
    """Each installed package and the folder it is installed from (pyproject.toml's ``package-dir``)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {package: REPO / folder for package, folder in pyproject["tool"]["setuptools"]["package-dir"].items()}


def mirrored_test(package: str, relative: Path) -> Path:
    """The test file of the module ``relative`` (a path inside the folder of ``package``): the package path below
    ``lavo_zoo``, the module's folders, then ``test_<name>.py``."""
    return TESTS.joinpath(*package.split(".")[1:], *relative.parent.parts, f"test_{relative.stem}.py")


@cache
def modules() -> dict[str, Path]:
    """Every module of the rule (repository path -> its mirrored test file): the ``.py`` files of the installed
    packages, in folders that are packages (so not a template's), less ``__init__.py`` and ``__main__.py``."""
    found = {}
    for package, folder in package_dirs().items():
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder)
            if path.name in ("__init__.py", "__main__.py"):
                continue
            if not all((folder / Path(*relative.parts[:i]) / "__init__.py").is_file()
                       for i in range(len(relative.parts))):
                continue
            found[path.relative_to(REPO).as_posix()] = mirrored_test(package, relative)
    return found


def test_the_rule_maps_each_package_folder_to_its_tests() -> None:
    mapped = {module: test.relative_to(REPO).as_posix() for module, test in modules().items()}
    assert mapped["zoo/locking.py"] == "tests/test_locking.py"
    assert mapped["zoo/attention/lavo/layer.py"] == "tests/attention/lavo/test_layer.py"
    assert mapped["zoo/attention/ops/window/flex.py"] == "tests/attention/ops/window/test_flex.py"
    assert mapped["recipes/lm/data.py"] == "tests/recipes/lm/test_data.py"
    assert mapped["evaluators/rouge.py"] == "tests/evaluators/test_rouge.py"
    assert mapped["checkpoints/archive.py"] == "tests/checkpoints/test_archive.py"
    assert not any(module.endswith(("/__init__.py", "/__main__.py")) for module in mapped)
    assert len(mapped) > 200  # every package was walked


def test_every_module_has_its_mirrored_test_file_or_a_reason() -> None:
    unlisted = [f"{module} (add {test.relative_to(REPO)}, or a reason to NOT_MIRRORED)"
                for module, test in modules().items() if not test.is_file() and module not in NOT_MIRRORED]
    assert not unlisted, "modules without their mirrored test file:\n" + "\n".join(unlisted)


def test_a_listed_module_that_gained_its_mirrored_file_leaves_the_list() -> None:
    found = modules()
    gained = [f"{module} (it has {found[module].relative_to(REPO)})" for module in NOT_MIRRORED
              if module in found and found[module].is_file()]
    assert not gained, "remove from NOT_MIRRORED, the list only shrinks:\n" + "\n".join(gained)


def test_the_list_names_only_modules_of_the_rule() -> None:
    stale = sorted(set(NOT_MIRRORED) - set(modules()))
    assert not stale, f"NOT_MIRRORED names what is no module of the rule (moved or removed?): {stale}"


def _tests_of(tree: ast.Module) -> list[str]:
    tests = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            tests += [f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return tests


def test_a_mirrored_file_tests_its_module() -> None:
    """No empty file to make a module look tested: each mirrored file holds a test and names its module (its dotted
    path, its file name or its name as a word outside the file's own name)."""
    wrong = []
    for module, test in modules().items():
        if not test.is_file():
            continue
        text = test.read_text()
        stem = Path(module).stem
        if not _tests_of(ast.parse(text)):
            wrong.append(f"{test.relative_to(REPO)} holds no test of {module}")
        elif not re.search(rf"\b{re.escape(stem)}\b", text.replace(f"test_{stem}", "")):
            wrong.append(f"{test.relative_to(REPO)} never names its module {module}")
    assert not wrong, "\n".join(wrong)
