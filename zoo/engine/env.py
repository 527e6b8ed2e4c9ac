"""Facts about the running environment recorded with checkpoints and results: versions, git revision, device."""
from __future__ import annotations

import os
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import platformdirs
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
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5,
                             check=False)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5, check=False).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def cache_root(cache_dir: Path | str | None = None) -> Path:
    """The project's cache root: the argument, else ``LAVO_ZOO_CACHE``, else the platform's user cache directory."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get("LAVO_ZOO_CACHE"):
        return Path(os.environ["LAVO_ZOO_CACHE"]).expanduser()
    return Path(platformdirs.user_cache_dir("lavo-zoo"))


def pick_device(name: str | None) -> torch.device:
    """``None`` -> cuda when available, else cpu; an explicit cuda without a GPU is a usage error."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise UsageError(f"--device must be cpu, cuda or cuda:N, got '{name}'")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name} was asked for but no CUDA GPU is available; use --device cpu")
    return device
