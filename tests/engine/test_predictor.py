"""The rules every predictor keeps (engine/predictor.py): one input or a list of them and nothing else, memory that
fits, finite outputs, and a device it can use."""
import numpy as np
import pytest
import torch

from lavo_zoo.engine.predictor import Predictor, as_batch
from lavo_zoo.errors import InputError, UsageError


def _is_text(value) -> bool:
    return isinstance(value, str)


def test_one_item_or_a_list_of_them() -> None:
    assert as_batch("a text", _is_text, "texts", "a text (str)") == (["a text"], True)
    assert as_batch(["a", "b"], _is_text, "texts", "a text (str)") == (["a", "b"], False)
    assert as_batch([], _is_text, "texts", "a text (str)") == ([], False)


@pytest.mark.parametrize("value,words", [
    (("a", "b"), "got tuple of 2; give a list"), (np.array(["a", "b"]), r"got ndarray of shape \[2\]; give a list"),
    (torch.tensor([1, 2]), r"got Tensor of shape \[2\]; give a list"), (b"bytes", "got bytes b'bytes'"),
    (7, "got int"), (None, "got NoneType"), ({"a"}, "got set"),
])
def test_anything_else_is_refused_naming_the_argument_and_what_it_takes(value, words) -> None:
    with pytest.raises(InputError, match=r"texts must be a text \(str\) or a list of them, " + words):
        as_batch(value, _is_text, "texts", "a text (str)")


def test_a_list_element_of_another_type_is_refused_by_its_index() -> None:
    with pytest.raises(InputError, match=r"texts\[2\] must be a text \(str\), got int"):
        as_batch(["a", "b", 3], _is_text, "texts", "a text (str)")
    assert as_batch([["a"], "b"], _is_text, "docs", "a doc", lambda v: isinstance(v, (str, list)), "a doc or list") \
        == ([["a"], "b"], False)


def _predictor() -> Predictor:
    return Predictor(recipe=None, cfg=None, model=torch.nn.Linear(2, 2))


def test_outputs_that_are_not_finite_are_refused_naming_the_input() -> None:
    Predictor.check_finite(np.ones(3), "x")
    Predictor.check_finite(torch.ones(3), "x")
    for bad in (np.array([1.0, np.nan]), torch.tensor([np.inf]), np.array([-np.inf])):
        with pytest.raises(InputError, match="output for input 3 .* is not finite"):
            Predictor.check_finite(bad, "input 3 (far away)")


def test_a_request_that_cannot_fit_is_refused(monkeypatch) -> None:
    from lavo_zoo.engine import memory

    predictor = _predictor()
    monkeypatch.setattr(memory, "available_memory", lambda device: 2_000_000_000)
    predictor.check_fits(1_999_999_999, "a request", "ask for less")
    with pytest.raises(InputError, match="a request needs about 3 GB of memory, but cpu has 2 GB free; ask for less"):
        predictor.check_fits(3e9, "a request", "ask for less")


def test_available_memory_is_what_the_kernel_says_and_at_most_the_cgroup_room() -> None:
    import re
    from pathlib import Path

    from lavo_zoo.engine.memory import available_memory

    room = available_memory("cpu")
    assert room > 0
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        kernel = int(re.search(r"MemAvailable:\s+(\d+)", meminfo.read_text()).group(1)) * 1024
        assert room <= kernel * 1.1  # memory moves between the two reads


def test_a_device_it_cannot_use_is_refused() -> None:
    predictor = _predictor()
    with pytest.raises(UsageError, match="must be cpu, cuda or cuda:N, got 'gpu'"):
        predictor.to("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="no CUDA GPU"):
            predictor.to("cuda:0")
    else:
        with pytest.raises(UsageError, match="numbered from 0"):
            predictor.to(f"cuda:{torch.cuda.device_count()}")
    assert predictor.to("cpu") is predictor and predictor.device == torch.device("cpu")


@pytest.mark.parametrize("device, match", [(1.5, "got 1.5"), (b"cpu", "got b'cpu'"), (["cpu"], r"got \['cpu'\]"),
                                           (True, "got True")])
def test_a_device_of_another_type_is_an_input_error_naming_the_argument(device, match) -> None:
    """Python callers get an InputError that names `device` (not `--device`), never a TypeError; a GPU index reads
    as torch reads it (0 is cuda:0), and a torch.device is taken."""
    from lavo_zoo.errors import InputError

    predictor = _predictor()
    with pytest.raises(InputError, match=rf"^device must be cpu, cuda or cuda:N, {match} \(a GPU index N or a"):
        predictor.to(device)
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="^device cuda:0 was asked for but no CUDA GPU is available; use "
                                             "device='cpu'"):
            predictor.to(0)
    assert predictor.to(torch.device("cpu")).device == torch.device("cpu")
