"""Imports run down the layers of docs/architecture.md (the contracts in pyproject.toml's [tool.importlinter]):
cli and studies > benchmarks > recipes > checkpoints > engine > evaluators > nn, formats > attention > config, options,
registry > errors, and no recipe imports another. Checked with import-linter, imports inside functions included.

import-linter reads one package from one folder, and this repository installs ``lavo_zoo`` from four (zoo/,
recipes/, evaluators/, checkpoints/): the check runs on a copy assembled as the installed package is.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"zoo": "lavo_zoo", "recipes": "lavo_zoo/recipes", "evaluators": "lavo_zoo/evaluators",
           "checkpoints": "lavo_zoo/checkpoints"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    """Caches and templates; and links in zoo/ that map the other folders into one package for a checkout run
    without installing (zoo/recipes -> ../recipes): those folders are copied into place themselves."""
    skipped = {n for n in names if n == "__pycache__" or n == "templates"}
    if Path(folder) == REPO / "zoo":
        skipped |= {n for n in names if n in FOLDERS and (Path(folder) / n).is_symlink()}
    return skipped


def _assemble(root: Path) -> Path:
    for folder, target in FOLDERS.items():
        shutil.copytree(REPO / folder, root / target, ignore=_ignore)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "lint-imports"
    return subprocess.run([str(script), "--no-cache"], cwd=root, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_imports_run_down_the_layers(tmp_path):
    result = _lint(_assemble(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    root = _assemble(tmp_path)
    with open(root / "lavo_zoo" / "engine" / "trainer.py", "a") as f:
        f.write("\n\ndef _sneaky():\n    from lavo_zoo.recipes.lm import model  # noqa: F401\n")
    with open(root / "lavo_zoo" / "recipes" / "tts" / "data.py", "a") as f:
        f.write("\n\ndef _other_recipe():\n    from lavo_zoo.recipes.lm.data import read_book  # noqa: F401\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "lavo_zoo.engine.trainer -> lavo_zoo.recipes.lm" in result.stdout
    assert "lavo_zoo.recipes.tts.data -> lavo_zoo.recipes.lm.data" in result.stdout


def test_every_package_and_recipe_has_its_place_in_the_contracts():
    """A new top-level module or recipe must be placed in a layer, or its imports go unchecked."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {m.strip() for line in contracts[0]["layers"] for m in line.split("|")}
    top = {f"lavo_zoo.{p.stem}" for p in (REPO / "zoo").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    top |= {f"lavo_zoo.{folder}" for folder in ("recipes", "evaluators", "checkpoints")}
    assert top == layered
    recipes = {f"lavo_zoo.recipes.{p.parent.name}" for p in (REPO / "recipes").glob("*/recipe.py")}
    assert recipes == set(contracts[1]["modules"])


CIRCLES = """
import json, sys
import grimp

package = sys.argv[1]
graph = grimp.build_graph("lavo_zoo", include_external_packages=False, cache_dir=None)
inside = {m for m in graph.modules if m == package or m.startswith(package + ".")}
edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in sorted(inside)}
order, low, stack, on_stack, circles = {}, {}, [], set(), []

def visit(m):  # Tarjan's strongly connected components
    order[m] = low[m] = len(order)
    stack.append(m)
    on_stack.add(m)
    for n in edges[m]:
        if n not in order:
            visit(n)
            low[m] = min(low[m], low[n])
        elif n in on_stack:
            low[m] = min(low[m], order[n])
    if low[m] == order[m]:
        component = []
        while not component or component[-1] != m:
            component.append(stack.pop())
            on_stack.discard(component[-1])
        if len(component) > 1:
            circles.append(sorted(component))

for m in edges:
    if m not in order:
        visit(m)
print(json.dumps(circles))
"""


def _circles(root: Path, package: str) -> list[list[str]]:
    """The import circles among the modules of ``package`` (strongly connected components of more than one module)
    in the assembled copy, read by grimp (import-linter's graph: imports inside functions included)."""
    result = subprocess.run([sys.executable, "-c", CIRCLES, package], cwd=root, capture_output=True, text=True,
                            check=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    return json.loads(result.stdout)


def test_the_attention_layer_has_no_import_circle(tmp_path):
    """No module of lavo_zoo.attention imports itself back through others (the kernel choice and a kernel module
    importing each other was one): shared pieces sit beneath the modules that use them."""
    assert _circles(_assemble(tmp_path), "lavo_zoo.attention") == []


def test_the_house_has_no_import_circle(tmp_path):
    """No module of the whole package imports itself back through others (a package and its own submodule, a
    launcher factory and the launchers it builds, were the last ones): what two modules share sits beneath both."""
    assert _circles(_assemble(tmp_path), "lavo_zoo") == []


def test_an_import_circle_is_found(tmp_path):
    root = _assemble(tmp_path)
    with open(root / "lavo_zoo" / "attention" / "ops" / "dropout.py", "a") as f:
        f.write("\n\ndef _back():\n    from lavo_zoo.attention.ops.window import blocked  # noqa: F401\n")
    circles = _circles(root, "lavo_zoo.attention")
    assert any({"lavo_zoo.attention.ops.dropout", "lavo_zoo.attention.ops.window.blocked"} <= set(c) for c in circles)
