"""Fixtures of the compare tests: the test-only recipe registered for one test, efficiency measured in process."""
from __future__ import annotations

import pytest

from lavo_zoo.engine.recipe import RECIPES
from tests.compare.helpers import SeqRecipe


@pytest.fixture
def study(tmp_path):
    RECIPES.register("compare_toy", SeqRecipe)
    config = tmp_path / "seq.yaml"
    config.write_text("recipe: compare_toy\ntrain: {max_steps: 3, batch_size: 8, save_every: 1, eval_every: 0, "
                      "log_every: 1}\n")
    yield config
    RECIPES._entries.pop("compare_toy", None)
    SeqRecipe.fail_at_call, SeqRecipe.calls, SeqRecipe.first_step_cost_s = 0, 0, 0.0


@pytest.fixture
def in_process(monkeypatch):
    """Isolated efficiency measurements run in this process (isolation is tested in tests/bench)."""
    from lavo_zoo.bench import attention

    monkeypatch.setattr(attention, "run_isolated", lambda target, spec, timeout=None: attention.measure(spec))
