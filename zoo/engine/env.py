"""Facts about the running environment recorded with checkpoints and results: versions, git revision, device."""
from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from pathlib import Path

import torch

from lavo_zoo.errors import UsageError


def versions() -> dict[str, str]:
    import numpy

    import lavo_zoo
    return {"lavo_zoo": lavo_zoo.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The source tree's git commit (with ``-dirty`` for local changes), or None outside a checkout."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def pick_device(name: str | None) -> torch.device:
    """``None`` -> cuda when available, else cpu; an explicit cuda without a GPU is a usage error."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"unknown device '{name}'; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name} was asked for but no CUDA GPU is available; use --device cpu")
    return device
