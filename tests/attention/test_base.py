"""The attention contract's helpers (base.py) beyond what the contract kit checks of every mechanism: a state's bytes
measured from the state object (``tensor_bytes``, which the recall study plots memory against)."""
import torch

from lavo_zoo.attention import tensor_bytes


def test_tensor_bytes_walks_nested_containers():
    t = torch.zeros(3, 4, dtype=torch.float16)
    assert tensor_bytes({"a": [t, (t, 7)], "b": None}) == 2 * t.numel() * 2  # the same tensor twice; the int counts 0
    assert tensor_bytes(torch.zeros(2, dtype=torch.complex64)) == 16
