"""The write protocol (zoo/atomic.py): a file, a folder and a link reach their name whole or not at all, a crash
between two renames is undone by remove_leftovers, and no other package module renames files itself."""
from __future__ import annotations

import ast
import errno
import os
from pathlib import Path

import pytest

from lavo_zoo import atomic
from lavo_zoo.atomic import (
    NameTaken,
    put_file,
    remove_leftovers,
    replace_link,
    swap_folder,
    temporary_file,
    temporary_folder,
)

REPO = Path(__file__).resolve().parent.parent
NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_file_is_written_whole_from_bytes_text_or_a_fill(tmp_path):
    put_file(tmp_path / "a" / "b.bin", b"\x00\x01")
    put_file(tmp_path / "t.txt", "é")
    put_file(tmp_path / "f.txt", lambda f: f.write(b"filled"))
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "t.txt").read_bytes() == "é".encode()
    assert (tmp_path / "f.txt").read_text() == "filled"
    assert _names(tmp_path) == ["a", "f.txt", "t.txt"]  # no temporary file


def test_a_failed_fill_keeps_the_previous_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("previous")

    def half_then_full(f):
        f.write(b"half")
        raise NO_SPACE

    with pytest.raises(OSError) as e:
        put_file(target, half_then_full)
    assert e.value.errno == errno.ENOSPC
    assert target.read_text() == "previous" and _names(tmp_path) == ["r.json"]


def test_a_file_that_must_not_replace_one_is_refused_when_the_name_is_taken(tmp_path):
    target = tmp_path / "r.json"
    put_file(target, "mine", replace=False)
    with pytest.raises(NameTaken):
        put_file(target, "theirs", replace=False)
    assert target.read_text() == "mine" and _names(tmp_path) == ["r.json"]
    put_file(target, "theirs")
    assert target.read_text() == "theirs"


def test_a_folder_is_swapped_in_and_the_previous_one_removed(tmp_path):
    final = tmp_path / "ckpt"
    for content in ("first", "second"):
        tmp = temporary_folder(final)
        assert tmp.parent == tmp_path and tmp.is_dir() and not any(tmp.iterdir())
        (tmp / "w.txt").write_text(content)
        swap_folder(tmp, final)
        assert (final / "w.txt").read_text() == content and _names(tmp_path) == ["ckpt"]


def test_a_crash_between_the_two_renames_of_a_swap_is_undone(tmp_path, monkeypatch):
    final = tmp_path / "ckpt"
    final.mkdir()
    (final / "w.txt").write_text("previous")
    tmp = temporary_folder(final)
    (tmp / "w.txt").write_text("new")
    real_replace, calls = os.replace, []

    def killed_after_the_first(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process dies: nothing of swap_folder runs after this
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", killed_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        swap_folder(tmp, final)
    monkeypatch.undo()
    assert not final.exists() and any(p.name.startswith(".old-ckpt-") for p in tmp_path.iterdir())
    remove_leftovers(tmp_path)
    assert _names(tmp_path) == ["ckpt"] and (final / "w.txt").read_text() == "previous"


def test_leftovers_of_finished_swaps_and_killed_writes_are_removed(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / ".old-ckpt-123").mkdir()  # the new folder is in: the previous one goes
    (tmp_path / ".tmp-step-4-123").mkdir()
    (tmp_path / ".metrics.jsonl.123.tmp").write_text("{}")
    (tmp_path / ".last.123.tmp").symlink_to("ckpt")
    (tmp_path / "notes.txt").write_text("the user's")
    remove_leftovers(tmp_path)
    assert _names(tmp_path) == ["ckpt", "notes.txt"]


def test_a_link_is_repointed_atomically(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "last"
    replace_link(link, "a")
    replace_link(link, "b")
    assert os.readlink(link) == "b" and link.resolve() == tmp_path / "b"
    assert not temporary_file(link).exists() and not temporary_file(link).is_symlink()


def _renames(tree: ast.AST) -> list[int]:
    """Lines of calls that rename, link or make temporary files by hand (os.replace, Path.rename, ...)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        by_os = isinstance(owner, ast.Name) and owner.id in ("os", "tempfile")
        if (by_os and name in ("replace", "rename", "link", "symlink", "mkstemp", "mkdtemp")) \
                or name in ("symlink_to", "hardlink_to") or (name == "rename" and node.args):
            found.append(node.lineno)
    return found


def test_only_the_write_protocol_renames_files():
    """One tmp-and-rename implementation: any other module that writes a file, a folder or a link beside its name
    and renames it into place calls zoo/atomic.py instead of doing it by hand."""
    offenders = []
    for folder in ("zoo", "recipes", "evaluators", "checkpoints"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == REPO / "zoo" / "atomic.py" or "templates" in path.parts:
                continue
            lines = _renames(ast.parse(path.read_text(), str(path)))
            offenders += [f"{path.relative_to(REPO)}:{line}" for line in lines]
    assert offenders == []
    assert _renames(ast.parse((REPO / "zoo" / "atomic.py").read_text()))  # the check finds what it looks for
