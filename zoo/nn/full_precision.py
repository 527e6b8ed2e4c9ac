"""Full precision inside mixed-precision code: the computations that must not follow training's bf16 autocast
(distances, signal processing, metrics) switch it off around themselves and upcast half-precision inputs."""
from __future__ import annotations

import contextlib

import torch


def no_autocast(device: torch.device | str) -> contextlib.AbstractContextManager:
    """Autocast switched off on ``device``'s type for the operations inside (it would run products in bf16 / fp16).
    Autocast of one device type leaves the other's tensors alone: CPU work under CUDA autocast needs nothing."""
    kind = torch.device(device).type
    if torch.amp.is_autocast_available(kind):
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()


def full(t: torch.Tensor) -> torch.Tensor:
    """t in fp32 when it is in a half precision (fp16, bf16); fp32, fp64 and integer tensors stay as they are."""
    return t.float() if t.is_floating_point() and t.element_size() < 4 else t
