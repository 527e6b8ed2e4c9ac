"""Deterministic, resumable batching: the batches of epoch e depend only on (seed, e, rank, world size)."""
from __future__ import annotations

import torch

from lavo_zoo.errors import UsageError


def epoch_steps(num_samples: int, batch_size: int, grad_accum: int = 1, world_size: int = 1) -> int:
    """Optimiser steps one epoch of ``num_samples`` examples gives (incomplete batches and steps dropped); a
    :class:`UsageError` naming the settings when it gives none, since such a run would train nothing.

    Args:
        num_samples: the training split's examples.
        batch_size: examples per batch, per process (``train.batch_size``).
        grad_accum: batches per optimiser step (``train.grad_accum``).
        world_size: processes training together.
    """
    per_step = batch_size * grad_accum * world_size
    steps = num_samples // per_step
    if steps == 0:
        processes = f" x {world_size} processes" if world_size > 1 else ""
        raise UsageError(f"one optimiser step takes train.batch_size={batch_size} x train.grad_accum={grad_accum}"
                         f"{processes} = {per_step} examples, but the training split has {num_samples}: lower "
                         "train.batch_size (or train.grad_accum), or give more data")
    return steps


class EpochBatches:
    """Shuffled index batches per epoch, sharded across ranks, incomplete global batches dropped.

    Resuming at (epoch, offset) replays exactly the batches an uninterrupted run would have drawn next.
    """

    def __init__(self, num_samples: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 shuffle: bool = True) -> None:
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.rank, self.world_size, self.shuffle = rank, world_size, shuffle

    def __len__(self) -> int:
        return self.num_samples // (self.batch_size * self.world_size)

    def epoch(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch``, in order."""
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.num_samples, generator=g).tolist()
        else:
            order = list(range(self.num_samples))
        step = self.batch_size * self.world_size
        lo = self.rank * self.batch_size
        return [order[b * step + lo: b * step + lo + self.batch_size] for b in range(len(self))]
