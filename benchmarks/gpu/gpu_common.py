"""What the device check's Python steps share: the toy switch, the device, relative errors, JSON records.

``LAVO_GPU_TOY=1`` (``run.sh --toy``) shrinks every size so that the same steps run on the CPU in seconds (Triton's
interpreter for the kernels, ``TRITON_INTERPRET=1``); the test suite runs them that way. Each step script runs as
``python benchmarks/gpu/<step>.py``, so this folder is on its import path.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Self

TOY = os.environ.get("LAVO_GPU_TOY", "0") == "1"


def device() -> Any:
    """cuda for the device run (an error when there is none), cpu at toy size."""
    import torch

    if TOY:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the device check needs a GPU (run.sh --toy runs it on the CPU)")
    return torch.device("cuda")


def errors(got: Any, want: Any) -> dict[str, float]:
    """{"rel": ||got - want|| / ||want||, "peak": max |got - want| / max |want|} in float64 (NaN: inf)."""
    import torch

    a, b = got.detach().double(), want.detach().double()
    diff = a - b
    if not torch.isfinite(a).all():
        return {"rel": float("inf"), "peak": float("inf")}
    scale, peak = b.norm().item(), b.abs().max().item() if b.numel() else 0.0
    return {"rel": diff.norm().item() / scale if scale else diff.norm().item(),
            "peak": diff.abs().max().item() / peak if peak else (diff.abs().max().item() if diff.numel() else 0.0)}


def write_json(path: str | Path, data: Any) -> None:
    """``data`` as indented JSON, written whole (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """One JSON line, flushed at once (a step killed at its time limit keeps what it finished)."""
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()


def environment() -> dict[str, Any]:
    """The device and the versions the figures depend on."""
    import platform

    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "toy": TOY,
                            "cuda": torch.version.cuda, "device": "cpu"}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available() and not TOY:
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, sm_count=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1), capability=f"{props.major}.{props.minor}")
    return info


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self) -> Self:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = round(time.perf_counter() - self.start, 3)
