"""The built-in corpus: code -> docstring summaries from this Python's standard library, in the Multi-News layout, so
that every command works offline (what ``lavo-zoo data summarization`` writes and a config without ``data.path``
reads).

Each example summarises code by the first paragraph of its docstring (:func:`module_examples`): a module by its
top-level definitions, a class by its header and methods, a function by its body and up to four functions it calls.
The split of every example is fixed by a hash of its module's name (:func:`builtin_split`).
"""
from __future__ import annotations

import ast
import logging
import platform
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from lavo_zoo.data.split import hash_split
from lavo_zoo.data.stdlib import stdlib_files, stdlib_root
from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.recipes.summarization.data import SPLIT_FILES, DataConfig, Example, write_multinews

log = logging.getLogger(__name__)
BUILTIN_VERSION = 1  # bump when the built-in corpus changes, so that cached copies are regenerated


class BuiltinCorpus(BuiltinData):
    """``stdlib``: the corpus of this Python's standard library (its version and location), a fixed size."""

    datasets = ("stdlib",)

    def key(self, data: DataConfig) -> dict:
        return {"dataset": "stdlib", "python": platform.python_version(), "stdlib": sysconfig.get_paths()["stdlib"],
                "format": BUILTIN_VERSION}

    def write(self, out: Path, data: DataConfig) -> Path:
        """The standard-library corpus in the Multi-News layout ({train,val,test}.src/.tgt)."""
        log.info("generated the built-in summarization corpus: %s", write_stdlib_corpus(out))
        return out


def _first_paragraph(docstring: str | None) -> str:
    """The first paragraph of a docstring on one line ('' if absent or shorter than 4 words)."""
    if not docstring:
        return ""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    return paragraph if len(paragraph.split()) >= 4 and ">>>" not in paragraph else ""


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """``tree`` and every statement (and except handler / match case) nested in it, without entering expressions:
    where definitions, and so docstrings, can be (``ast.walk`` over every expression node is 10x slower)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case)))


def _strip_docstrings(tree: ast.AST) -> None:
    """Remove, in place, the docstring of ``tree`` and of every function or class inside (``pass`` where a body
    would become empty)."""
    for node in _statements(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
MAX_CALLEES = 4


def _callees(function: ast.AST, scope: dict[str, ast.AST]) -> list[ast.AST]:
    """Functions of ``scope`` that ``function`` calls by name (``f(...)`` or ``self.f(...)``), first calls first."""
    found: list[ast.AST] = []
    for sub in ast.walk(function):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) \
                and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls") else None
            target = scope.get(name) if name else None
            if target is not None and target is not function and target not in found:
                found.append(target)
    return found[:MAX_CALLEES]


def module_examples(name: str, text: str) -> list[Example]:
    """The examples of one module's source: three kinds, each summarised by the first paragraph of a docstring.

    - ``<module>``: articles = the module's top-level definitions; summary = the module docstring.
    - ``<module>.<Class>``: articles = the class header with its attributes, then each method; summary = the class
      docstring.
    - ``<module>.<function>`` and ``<module>.<Class>.<method>``: articles = the function, then up to 4 functions of
      the same module (or class) that it calls; summary = the function's docstring (functions of 3+ statements).

    Every article is the code as ``ast.unparse`` prints it (comments and docstrings removed).
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    # (id, summary, article nodes) found before the docstrings are stripped, unparsed after
    found: list[tuple[str, str, list[ast.AST]]] = []
    definitions = [n for n in tree.body if isinstance(n, (*FUNCTIONS, ast.ClassDef))]
    if (summary := _first_paragraph(ast.get_docstring(tree))) and definitions:
        found.append((name, summary, definitions))

    def functions(owner: str, body: list[ast.stmt], scope: dict[str, ast.AST]) -> None:
        for node in body:
            if isinstance(node, FUNCTIONS) and len(node.body) >= 3 \
                    and (summary := _first_paragraph(ast.get_docstring(node))):
                found.append((f"{owner}.{node.name}", summary, [node, *_callees(node, scope)]))

    functions(name, tree.body, {n.name: n for n in tree.body if isinstance(n, FUNCTIONS)})
    headers = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = [n for n in cls.body if isinstance(n, FUNCTIONS)]
        if (summary := _first_paragraph(ast.get_docstring(cls))) and methods:
            headers[cls.name] = header = ast.ClassDef(
                name=cls.name, bases=cls.bases, keywords=cls.keywords, decorator_list=cls.decorator_list,
                body=[n for n in cls.body if not isinstance(n, FUNCTIONS)], type_params=[])
            found.append((f"{name}.{cls.name}", summary, [header, *methods]))
        functions(f"{name}.{cls.name}", cls.body, {m.name: m for m in methods})
    _strip_docstrings(tree)
    for header in headers.values():
        _strip_docstrings(header)
        header.body = header.body or [ast.Pass()]
    sources: dict[int, str] = {}

    def source(node: ast.AST) -> str:
        if id(node) not in sources:
            sources[id(node)] = ast.unparse(node)
        return sources[id(node)]

    return [Example(example_id, [source(n) for n in nodes], summary) for example_id, summary, nodes in found]


SKIP_FOLDERS = {"site-packages", "dist-packages", "idle_test", "lib2to3", "__pycache__"}


def stdlib_sources() -> list[tuple[str, Path]]:
    """(dotted module name, file) of every standard-library module outside tests and site-packages, sorted."""
    root = stdlib_root()
    out = []
    for path in stdlib_files(skip_folders=SKIP_FOLDERS, skip=_skipped):
        parts = path.relative_to(root).with_suffix("").parts
        out.append((".".join(p for p in parts if p != "__init__") or "__init__", path))
    return out


def _skipped(rel: Path) -> bool:
    return any(part.startswith("test") for part in rel.with_suffix("").parts)


def builtin_split(module: str) -> str:
    """The split of every example of ``module``, fixed by a hash of its name: ~90% train, 5% validation, 5% test
    (whole modules, so that no module's code is in two splits)."""
    return hash_split(module)


def stdlib_examples(sources: list[tuple[str, Path]] | None = None) -> dict[str, list[Example]]:
    """The built-in corpus by split, from the standard library's modules (see :func:`module_examples`)."""
    splits: dict[str, list[Example]] = {split: [] for split in SPLIT_FILES}
    for module, path in sources if sources is not None else stdlib_sources():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        splits[builtin_split(module)].extend(module_examples(module, text))
    return splits


def write_stdlib_corpus(out: Path, sources: list[tuple[str, Path]] | None = None) -> dict[str, int]:
    """Write the built-in corpus to ``out`` in the Multi-News layout; returns the number of examples per split."""
    split_names = {"train": "train", "validation": "val", "test": "test"}
    return {split: write_multinews(examples, out, split_names[split])
            for split, examples in stdlib_examples(sources).items()}


