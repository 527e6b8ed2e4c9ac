"""Deterministic, resumable batching: the batches of epoch e depend only on (seed, e, rank, world size)."""
from __future__ import annotations

import torch

from lavo_zoo.errors import DataError


class EpochBatches:
    """Shuffled index batches per epoch, sharded across ranks, incomplete global batches dropped.

    Resuming at (epoch, offset) replays exactly the batches an uninterrupted run would have drawn next.
    """

    def __init__(self, num_samples: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 shuffle: bool = True) -> None:
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.rank, self.world_size, self.shuffle = rank, world_size, shuffle
        if len(self) == 0:
            raise DataError(f"the training split has {num_samples} samples, fewer than one batch of "
                            f"{batch_size} x {world_size} process(es); lower train.batch_size or add data")

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
