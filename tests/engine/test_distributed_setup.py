"""The DDP set-up on CUDA without GPUs: each process binds to its own GPU before joining the NCCL group, and the
numbers averaged across processes are reduced on that GPU (NCCL rejects CPU tensors), checked against a stand-in
process group that records what it is given."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from lavo_zoo.engine import distributed
from lavo_zoo.engine.distributed import DistInfo, init_distributed, local_device, mean_across


class _Reduced(Exception):
    """Raised by the stand-in all-reduce once it has seen a tensor it accepts (a meta tensor has no value to read)."""


def test_each_cuda_process_binds_its_gpu_before_joining_the_nccl_group(monkeypatch):
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", torch.device(d))))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend)))
    info = init_distributed(torch.device("cuda"))
    assert calls == [("set_device", torch.device("cuda", 1)), ("init", "nccl")]
    assert (info.rank, info.world_size, info.local_rank, info.device) == (1, 2, 1, torch.device("cuda", 1))
    assert local_device(torch.device("cuda"), info) == torch.device("cuda", 1)


def test_cpu_processes_join_gloo_and_bind_no_gpu(monkeypatch):
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend)))
    info = init_distributed(torch.device("cpu"))
    assert calls == [("init", "gloo")] and info.device == torch.device("cpu") and info.is_main


def test_mean_across_reduces_on_the_collective_device(monkeypatch):
    """Under NCCL the tensor must sit on the process's GPU (a meta device stands in for it here)."""
    seen = []

    def nccl_all_reduce(t: torch.Tensor) -> None:
        if t.device.type == "cpu":
            raise RuntimeError("No backend type associated with device type cpu")  # what an NCCL-only group says
        seen.append(t.device)
        raise _Reduced

    monkeypatch.setattr(distributed.dist, "all_reduce", nccl_all_reduce)
    with pytest.raises(_Reduced):
        mean_across(3.0, DistInfo(1, 2, 1, torch.device("meta")))
    assert seen == [torch.device("meta")]


def test_mean_across_averages_over_processes(monkeypatch):
    monkeypatch.setattr(distributed.dist, "all_reduce", lambda t: t.add_(5.0))  # the other process holds 5
    assert mean_across(3.0, DistInfo(0, 2, 0)) == 4.0
    assert mean_across(3.0, DistInfo()) == 3.0  # one process: no collective at all
