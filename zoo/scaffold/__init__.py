"""``lavo-zoo new recipe|attention NAME --out DIR``: write a small pip-installable plugin package that works as
written (``pip install -e DIR``, then ``lavo-zoo list``, ``train NAME/tiny``, ``eval`` and its own tests).

The files come from ``templates/<kind>/``: a path segment ``PKG`` becomes the package name, a ``.tmpl`` suffix is
dropped, and ``{{name}}``, ``{{pkg}}``, ``{{cls}}``, ``{{camel}}``, ``{{dist}}``, ``{{command}}`` in the text are
replaced. A recipe plugin has every room a built-in recipe has (docs/architecture.md, "Every recipe has the same
rooms"): recipe.py, model.py, data.py, builtin.py, infer.py, cli.py, configs/ and README.md.
"""
from __future__ import annotations

import importlib.util
import keyword
import re
from pathlib import Path

import click

from lavo_zoo.atomic import put_file
from lavo_zoo.errors import UsageError
from lavo_zoo.options import out_option
from lavo_zoo.outputs import PLUGIN_FOLDER, Outputs

TEMPLATES = Path(__file__).parent / "templates"
KINDS = ("recipe", "attention")


def check_name(kind: str, name: str) -> None:
    """Refuse a NAME that is not a lower-case Python identifier, shadows an importable module, or is registered."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise UsageError(f"'{name}' is not a valid {kind} name: use a lower-case Python identifier (letters, digits, "
                         "underscores; starting with a letter), e.g. my_" + kind)
    if importlib.util.find_spec(name) is not None:
        raise UsageError(f"'{name}' would shadow the importable module '{name}' (the package is named after the "
                         f"{kind}); choose another name")
    if kind == "attention":
        from lavo_zoo.attention import ATTENTIONS as registry
    else:
        from lavo_zoo.engine.recipe import RECIPES as registry
    if name in registry:
        raise UsageError(f"{kind} '{name}' is already registered (source: {registry.entry(name).source}); "
                         "choose another name")


def substitutions(kind: str, name: str) -> dict[str, str]:
    """The placeholders of a ``kind`` template (``attention`` | ``recipe``) for the plugin ``name``: the package, the
    class, the distribution and the command names."""
    camel = "".join(part.capitalize() for part in name.split("_"))
    suffix = "Attention" if kind == "attention" else "Recipe"
    return {"name": name, "pkg": name, "cls": camel + suffix, "camel": camel,
            "dist": "lavo-zoo-" + name.replace("_", "-"), "command": name.replace("_", "-") + "-classify"}


def render(kind: str, name: str, out: Path) -> list[Path]:
    """Write the ``kind`` template for ``name`` into the empty folder ``out``; returns the files written."""
    if kind not in KINDS:
        raise UsageError(f"unknown kind '{kind}'; choose one of {', '.join(KINDS)}")
    check_name(kind, name)
    subs = substitutions(kind, name)
    root = TEMPLATES / kind
    written = []
    for src in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = Path(*(subs["pkg"] if part == "PKG" else part.replace("PKG", subs["pkg"])
                     for part in src.relative_to(root).parts))
        dest = out / (str(rel).removesuffix(".tmpl"))
        text = src.read_text()
        for key, value in subs.items():
            text = text.replace("{{" + key + "}}", value)
        put_file(dest, text)
        written.append(dest)
    return written


def _new(kind: str, name: str, out: Path | None) -> None:
    """The plugin package folder ``out`` (an output of :mod:`lavo_zoo.outputs`: absent or empty, put in place whole
    once written)."""
    out = out or Path(name)
    with Outputs("new", False) as outputs:
        staging = outputs.folder(out, PLUGIN_FOLDER)
        files = [f.relative_to(staging) for f in render(kind, name, staging)]
    click.echo(f"wrote {len(files)} files into {out}/:")
    for f in files:
        click.echo(f"  {f}")
    click.echo(f"\nnext:\n  pip install -e {out}\n  lavo-zoo list {kind}s {name}\n  pytest -q {out}/tests")
    if kind == "recipe":
        click.echo(f"  lavo-zoo train {name}/tiny --out runs/{name}\n  lavo-zoo eval runs/{name}/checkpoints/last")


@click.group("new", epilog="""\b
Examples:
  lavo-zoo new attention my_attention --out my-attention && pip install -e my-attention
  lavo-zoo new recipe my_domain --out my-domain && pip install -e my-domain && lavo-zoo train my_domain/tiny""")
def new() -> None:
    """Scaffold a plugin package (a recipe or an attention) that works after `pip install -e`."""


@new.command("attention", epilog="""\b
Examples:
  lavo-zoo new attention my_attention --out my-attention
  pip install -e my-attention && pytest -q my-attention/tests
  lavo-zoo bench attention --attentions my_attention,lavo --lengths 1024,4096""")
@click.argument("name")
@out_option("Directory to create (default: ./NAME); refused if it exists and is not empty.", folder=True)
def new_attention(name: str, out: Path | None) -> None:
    """An attention plugin: a working linear attention (causal with streaming state, noncausal, cross), its dense
    reference, and tests that run the lavo-zoo contract kit."""
    _new("attention", name, out)


@new.command("recipe", epilog="""\b
Examples:
  lavo-zoo new recipe my_domain --out my-domain
  pip install -e my-domain && pytest -q my-domain/tests
  lavo-zoo train my_domain/tiny --out runs/mine && lavo-zoo eval runs/mine/checkpoints/last""")
@click.argument("name")
@out_option("Directory to create (default: ./NAME); refused if it exists and is not empty.", folder=True)
def new_recipe(name: str, out: Path | None) -> None:
    """A recipe plugin with every room a built-in recipe has: recipe.py (the glue and its training defaults), model.py,
    data.py (a real on-disk format), builtin.py (its generator), infer.py (the predictor lavo_zoo.load returns),
    cli.py (a command), a tiny config, a README and tests that run the lavo-zoo recipe kit."""
    _new("recipe", name, out)
