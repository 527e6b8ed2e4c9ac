"""What the sliding-window op's tests share: float64 leaves on each available device."""
from __future__ import annotations

import torch

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _leaves(*shapes: tuple[int, ...], device: str) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=F64, device=device, requires_grad=True) for s in shapes]

