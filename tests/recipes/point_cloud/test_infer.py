"""The completer (infer.py): one cloud or a list of them, batches, and never a cloud of NaN written with exit 0."""
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.errors import InputError
from lavo_zoo.formats.pcd import write_pcd
from lavo_zoo.recipes.point_cloud.cli import complete
from lavo_zoo.recipes.point_cloud.infer import Completer
from tests.recipes.point_cloud.helpers import SMALL


@pytest.fixture(scope="module")
def completer() -> Completer:
    """A tiny PoinTr with random weights (no data needed: the config's sizes are all it reads)."""
    recipe, cfg = resolve_config("point_cloud/tiny-lavo", SMALL)
    torch.manual_seed(0)
    return Completer(recipe, cfg, recipe.build_model(cfg).eval(), "cpu", checkpoint="tiny")


def _scan(n: int = 200, scale: float = 0.3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-scale, scale, (n, 3)).astype(np.float32)


def test_a_list_is_completed_in_batches_as_each_cloud_alone(completer: Completer) -> None:
    scans = [_scan(n, seed=n) for n in (200, 90, 150)]
    together = completer.complete(scans, seed=3, batch_size=2)  # the subsets are drawn in order, whatever the batches
    assert len(together) == 3
    for scan, done in zip(scans, together):
        assert done.shape == (128 + min(len(scan), 128), 3) and np.isfinite(done).all()
    np.testing.assert_allclose(completer.complete(scans, seed=3, batch_size=3)[2], together[2], atol=1e-5)
    assert completer.complete([]) == []


@pytest.mark.parametrize("points,message", [
    (torch.zeros(10, 3), r"points must be a cloud \(a numpy array \[N, 3\]\) or a list of them, got Tensor"),
    ((np.zeros((10, 3)),), "got tuple of 1; give a list"),
    (np.zeros((2, 10, 3)), r"got ndarray of shape \[2, 10, 3\]; give a list"),
    ([[0.0, 0.0, 0.0]], r"points\[0\] must be a cloud"),
    ("scan.pcd", "got str"),
    (np.zeros((0, 3)), r"cloud 0: expected finite points \[N, 3\] with N >= 1"),
    (np.array([[1, 2, 3]], dtype=complex), "of complex128"),
    (np.full((10, 3), 1e39), "beyond float32"),
])
def test_other_inputs_are_refused(completer: Completer, points, message) -> None:
    with pytest.raises(InputError, match=message):
        completer.complete(points)


@pytest.mark.parametrize("option,value", [("seed", -1), ("batch_size", 0)])
def test_options_are_checked(completer: Completer, option, value) -> None:
    with pytest.raises(InputError, match=f"{option} must be an integer"):
        completer.complete(_scan(), **{option: value})


def test_a_completion_that_is_not_finite_is_refused_naming_the_scan(completer: Completer, tmp_path: Path) -> None:
    """A scan far outside the training scale (coordinates of 1e30, finite in float32) completes to NaN: refused, and
    the command writes nothing."""
    from lavo_zoo.engine.checkpoint_io import save_checkpoint

    far = _scan(scale=1e30)
    with pytest.raises(InputError, match=r"output for cloud 0 \(its coordinates reach 9.99e\+29.* not finite"):
        completer.complete(far)
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, completer.model, completer.cfg, "point_cloud")
    write_pcd(tmp_path / "far.pcd", far, "binary")
    result = CliRunner().invoke(complete, [str(ckpt), str(tmp_path / "far.pcd"), "--out", str(tmp_path / "x.pcd"),
                                           "--device", "cpu"])
    assert isinstance(result.exception, InputError) and result.exception.exit_code == 2
    assert str(result.exception).startswith(f"{tmp_path / 'far.pcd'}: the model's output for the scan")
    assert not (tmp_path / "x.pcd").exists()


def test_a_scan_far_outside_the_training_scale_is_warned_about_with_that_scale(completer: Completer, caplog) -> None:
    """A scan of coordinates in the hundreds (not normalised) still completes, with a warning that names the range
    the model was trained on (the one the refusal of a non-finite completion names too); a normalised one gets none."""
    with caplog.at_level("WARNING"):
        completer.complete(_scan())
    assert not caplog.records
    with caplog.at_level("WARNING"):
        completer.complete([_scan(), _scan(scale=500)])
    assert [r.getMessage() for r in caplog.records] == [
        (f"cloud 1 reaches {caplog.records[0].args[1]:.4g}, far outside the range the model was trained on (clouds "
        "normalised as PCN's, coordinates about [-1, 1]): its output there is an extrapolation; scale the input as "
        "the training data was")]
    assert abs(caplog.records[0].args[1]) > 100


def test_a_batch_that_cannot_fit_is_refused_before_it_starts(completer: Completer, monkeypatch) -> None:
    from lavo_zoo.engine import memory

    monkeypatch.setattr(memory, "available_memory", lambda device: completer.memory_estimate(3))
    assert len(completer.complete([_scan()] * 4, batch_size=2)) == 4
    with pytest.raises(InputError, match="completing batches of 4 clouds needs about .* lower batch_size"):
        completer.complete([_scan()] * 4, batch_size=4)
