"""Wide public signatures say what their arguments mean: every public function or method of the installed package
(zoo/, recipes/, evaluators/, checkpoints/) with four or more parameters (``self``/``cls``/``ctx`` not counted,
``*args``/``**kwargs`` counted by name) has a Google-style ``Args:`` section, or states its arguments once elsewhere:

- an override of a method whose base class (in this package) documents it: the base's ``Args:`` is the statement;
- a pointer in the docstring, "arguments are stated on `name`" (``name``: a function, method, class or module of
  the package, dotted from ``lavo_zoo`` or local to the module), where that target's docstring describes each of the
  parameters as a ``name: ...`` entry, except those the function's own docstring names in backticks;
- a click command: its options' ``help`` texts are the statement (an ``Args:`` section would print in ``--help``).

That an ``Args:`` section names every parameter is ruff's D417 (pyproject.toml), not this test.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"zoo": "lavo_zoo", "recipes": "lavo_zoo.recipes", "evaluators": "lavo_zoo.evaluators",
         "checkpoints": "lavo_zoo.checkpoints"}
WIDE = 4
NOT_COUNTED = ("self", "cls", "ctx")  # the instance, the class, an autograd Function's context
POINTER = re.compile(r"arguments\s+(?:are\s+)?(?:as\s+)?stated\s+(?:on|in)\s+`+~?([\w.]+)`+", re.IGNORECASE)
ENTRY = re.compile(r"^\s+\**(\w+)\s*(?:\([^)]*\))?:", re.MULTILINE)  # "    name (type): ..." in a section


@dataclass
class Function:
    module: str        # lavo_zoo.attention.base
    qualname: str      # Attention.attend
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: ast.ClassDef | None
    where: str         # zoo/attention/base.py:196

    @property
    def doc(self) -> str:
        return ast.get_docstring(self.node) or ""

    def params(self) -> list[str]:
        a = self.node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        if self.cls is not None and names and names[0] in NOT_COUNTED:
            names = names[1:]
        return names


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO)
    parts = [ROOTS[rel.parts[0]], *rel.parts[1:-1]]
    if path.stem != "__init__":
        parts.append(path.stem)
    return ".".join(parts)


def _collect() -> tuple[dict[str, ast.Module], list[Function]]:
    modules: dict[str, ast.Module] = {}
    functions: list[Function] = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            if any(part.startswith("_") and part != "__init__.py" for part in rel.parts) or \
                    any(p in ("templates", "__pycache__") for p in rel.parts):
                continue
            name = _module_name(path)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            modules[name] = tree

            def visit(body: list[ast.stmt], cls: ast.ClassDef | None, name: str = name, rel: Path = rel) -> None:
                for node in body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                        qual = f"{cls.name}.{node.name}" if cls else node.name
                        functions.append(Function(name, qual, node, cls, f"{rel}:{node.lineno}"))
                    elif isinstance(node, ast.ClassDef) and cls is None and not node.name.startswith("_"):
                        visit(node.body, node)
            visit(tree.body, None)
    return modules, functions


MODULES, FUNCTIONS = _collect()


def _classes(module: str) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in MODULES[module].body if isinstance(n, ast.ClassDef)}


def _find_class(name: str, module: str) -> tuple[str, ast.ClassDef] | None:
    """A class named ``name``: in ``module`` first, else the one class of that name in the package."""
    if name in _classes(module):
        return module, _classes(module)[name]
    found = [(m, _classes(m)[name]) for m in MODULES if name in _classes(m)]
    return found[0] if len(found) == 1 else None


def _base_documents(fn: Function) -> bool:
    """Whether a base class of ``fn``'s class (followed through the package) documents the method with ``Args:``."""
    if fn.cls is None:
        return False
    todo, seen = [(fn.module, fn.cls)], set()
    while todo:
        module, cls = todo.pop()
        for base in cls.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            found = name and _find_class(name, module)
            if not found or (found[0], name) in seen:
                continue
            seen.add((found[0], name))
            method = next((n for n in found[1].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and n.name == fn.node.name), None)
            if method is not None and "Args:" in (ast.get_docstring(method) or ""):
                return True
            todo.append(found)
    return False


def _resolve(target: str, module: str) -> str | None:
    """The docstring that ``target`` (dotted from lavo_zoo, or local to ``module``) names, or None."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):  # the longest module prefix, then attributes within it
        if ".".join(parts[:cut]) in MODULES:
            mod, rest = ".".join(parts[:cut]), parts[cut:]
            break
    else:
        mod, rest = module, parts
    node: ast.AST = MODULES[mod]
    for name in rest:
        node = next((n for n in getattr(node, "body", []) if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name), None)
        if node is None:
            return None
    return ast.get_docstring(node) or ""


def _pointer_problem(fn: Function) -> str | None:
    """None when ``fn`` points at a statement of its arguments that covers them; else what is wrong."""
    match = POINTER.search(fn.doc)
    if match is None:
        return "no Args: section"
    target = _resolve(match.group(1), fn.module)
    if target is None:
        return f"points at `{match.group(1)}`, which is not in the package"
    stated = set(ENTRY.findall(target))
    own = set(re.findall(r"`+\**(\w+)`+", fn.doc))
    missing = [p for p in fn.params() if p not in stated and p not in own]
    return f"points at `{match.group(1)}`, which does not describe {missing}" if missing else None


def _is_click_command(fn: Function) -> bool:
    for dec in fn.node.decorator_list:
        call = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(call, ast.Attribute) and call.attr in ("command", "group"):
            return True
    return False


def undocumented() -> dict[str, str]:
    """{"module:qualname (file:line)": why} for each wide public function whose arguments are stated nowhere."""
    out = {}
    for fn in FUNCTIONS:
        if len(fn.params()) < WIDE or "Args:" in fn.doc or _is_click_command(fn) or _base_documents(fn):
            continue
        problem = _pointer_problem(fn)
        if problem:
            out[f"{fn.module}:{fn.qualname} ({fn.where})"] = problem
    return out


def test_wide_public_functions_state_their_arguments():
    missing = undocumented()
    assert not missing, (f"{len(missing)} public functions with {WIDE}+ parameters state their arguments nowhere "
                         "(add an Args: section, or point at where they are stated):\n"
                         + "\n".join(f"  {k}: {v}" for k, v in sorted(missing.items())))


def test_a_pointer_must_cover_the_arguments():
    """The pointer rule rejects a target that does not describe the parameters (so it cannot pass by naming)."""
    fn = Function("lavo_zoo.attention.base", "probe", ast.parse(
        'def probe(x, padding_mask, context, bogus):\n    """Probe; arguments are stated on `Attention.attend`."""'
    ).body[0], None, "probe")
    assert "bogus" in (_pointer_problem(fn) or "")
    fn.node.body[0].value.value += " ``bogus`` is extra."
    assert _pointer_problem(fn) is None


def test_an_override_takes_its_base_methods_statement(monkeypatch):
    """The override rule accepts a method whose base class's method has Args:, and only then."""
    source = '''
class Base:
    def run(self, a, b, c, d):
        """Run.

        Args:
            a: one.
            b: two.
            c: three.
            d: four.
        """


class Child(Base):
    def run(self, a, b, c, d):
        pass
'''
    for documented in (True, False):
        tree = ast.parse(source if documented else source.replace("Args:", "Notes:"))
        monkeypatch.setitem(MODULES, "lavo_zoo.probe", tree)
        child = tree.body[1]
        fn = Function("lavo_zoo.probe", "Child.run", child.body[0], child, "probe")
        assert _base_documents(fn) is documented
