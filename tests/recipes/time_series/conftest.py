from pathlib import Path

import pytest

from lavo_zoo.cli import main


@pytest.fixture(scope="package")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the tiny config, 20 steps on 1000 built-in rows (validation at steps 10 and 20)."""
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "time_series/tiny-lavo", "--out", str(out), "--max-steps", "20", "train.eval_every=10",
                 "train.eval_batches=2", "data.builtin_size=1000"]) == 0
    return out
