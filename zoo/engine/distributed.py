"""DistributedDataParallel set-up from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK); nothing home-made.

On CUDA each process binds to its own GPU (``torch.cuda.set_device(LOCAL_RANK)``) before joining the NCCL group, so
NCCL's collectives (``all_reduce``, ``all_gather_object``, ``barrier``) and every kernel launch use that GPU rather
than cuda:0, and the tensors the helpers here reduce live on it (NCCL rejects CPU tensors).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

CPU = torch.device("cpu")


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = CPU  # where this process's collectives put their tensors

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0, the one that writes files."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """Whether more than one process trains (``torchrun``)."""
        return self.world_size > 1


def init_distributed(device: torch.device) -> DistInfo:
    """Join the torchrun process group (gloo on CPU; on CUDA, nccl after binding this process to GPU LOCAL_RANK); a
    single process gets the default DistInfo."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    collective = CPU
    if device.type == "cuda":
        collective = torch.device("cuda", local_rank)
        torch.cuda.set_device(collective)  # before the group exists: NCCL's communicator binds to the current GPU
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank, world, local_rank, collective)


def local_device(device: torch.device, info: DistInfo) -> torch.device:
    """The device this process trains on: its own GPU under ``torchrun`` on CUDA, else ``device``."""
    return info.device if device.type == "cuda" and info.enabled else device


def mean_across(value: float, info: DistInfo) -> float:
    """The mean of ``value`` over all processes (an all-reduce of one number on the collective device)."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return float(t.item()) / info.world_size


def barrier(info: DistInfo) -> None:
    """Wait until every process gets here (nothing with one process)."""
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    """End the process group, if one was started."""
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
