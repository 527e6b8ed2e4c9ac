"""``compare --rerun`` (zoo/compare/rerun.py): a dry run removes nothing, a rerun removes nothing until every cell has
checked out, and removes only what the study wrote (never through a link, never a file of the user's)."""
from __future__ import annotations

import pytest

from lavo_zoo.compare import run_study
from lavo_zoo.errors import UsageError
from tests.compare.helpers import a_study


def _study(config, out, steps, attentions=("sdpa",), seeds=(1,), options=None, **kwargs):
    return run_study(a_study(config, out, attentions, seeds, overrides=[f"train.max_steps={steps}"],
                             options=options or {}, **kwargs))


def _snapshot(folder):
    """Every file under ``folder`` (links not followed) with its bytes."""
    return {p.relative_to(folder): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(folder.rglob("*"))}


def test_a_dry_run_of_a_rerun_removes_nothing(study, tmp_path, capsys):
    """--rerun --dry-run said 'nothing is trained or written' while it removed, whole, the cell it would train again
    (the removal happened while the cells were planned)."""
    out = tmp_path / "cmp"
    _study(study, out, 2)
    before = _snapshot(out)
    assert _study(study, out, 3, rerun=True, dry_run=True) == []
    assert _snapshot(out) == before
    said = capsys.readouterr().out
    assert "nothing is trained, written or removed" in said and "sdpa-seed1" in said and "trained again" in said


def test_a_rerun_removes_nothing_until_every_cell_checks_out(study, tmp_path):
    """A later cell whose option its model refuses stops the study before the earlier stale cell is removed (the
    removal came first, then the first cell trained, then the later one failed)."""
    out = tmp_path / "cmp"
    _study(study, out, 2, attentions=("sdpa", "lavo"))
    before = _snapshot(out)
    with pytest.raises(UsageError, match=r"config key 'model.attention' in .*num_bases \(64\) must be between 1"):
        _study(study, out, 3, attentions=("sdpa", "lavo"), options={"lavo": {"num_bases": 64}}, rerun=True)
    assert _snapshot(out) == before


def test_a_rerun_refuses_a_linked_cell_before_removing_any(study, tmp_path):
    """A cell folder that is a link stopped --rerun with a raw 'Cannot call rmtree on a symbolic link', after an
    earlier cell was removed."""
    out, elsewhere = tmp_path / "cmp", tmp_path / "elsewhere"
    _study(study, out, 2, seeds=(1, 2))
    (out / "cells" / "sdpa-seed2").rename(elsewhere)
    (out / "cells" / "sdpa-seed2").symlink_to(elsewhere)
    before, target = _snapshot(out), _snapshot(elsewhere)
    with pytest.raises(UsageError, match=r"--rerun: .*sdpa-seed2 is a link \(to .*elsewhere\).*remove the link"):
        _study(study, out, 3, seeds=(1, 2), rerun=True)
    assert _snapshot(out) == before and _snapshot(elsewhere) == target


def test_a_rerun_removes_only_what_the_study_wrote(study, tmp_path):
    out = tmp_path / "cmp"
    _study(study, out, 2)
    cell = out / "cells" / "sdpa-seed1"
    (cell / "notes.txt").write_text("mine")
    before = _snapshot(out)
    with pytest.raises(UsageError, match=r"sdpa-seed1 holds notes.txt, which the study did not write"):
        _study(study, out, 3, rerun=True)
    assert _snapshot(out) == before
    (cell / "notes.txt").unlink()
    (cell / ".cell.lock.4242.tmp").write_text("")  # what a writer killed mid-write leaves is the study's
    (record,) = _study(study, out, 3, rerun=True)
    assert record.overrides[0] == "train.max_steps=3" and not (cell / ".cell.lock.4242.tmp").exists()
