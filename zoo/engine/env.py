"""Facts about the running environment recorded with checkpoints and results (versions, git revision, device) and
where the project caches things (``cache_root``; the built-in datasets in it: :mod:`lavo_zoo.engine.builtin_data`)."""
from __future__ import annotations

import os
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

import platformdirs
import torch

from lavo_zoo.errors import InputError, UsageError


def versions() -> dict[str, str]:
    """The versions a checkpoint records: lavo_zoo, torch, numpy, Python."""
    import numpy

    from lavo_zoo.version import __version__
    return {"lavo_zoo": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")


def machine(device: torch.device | str | None = None, cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """What a timing depends on besides the code: CPU model, its vector instruction sets (from /proc/cpuinfo where
    there is one), logical cores, torch's intra-op threads, versions, and the GPU's name when ``device`` is CUDA.
    Benchmarks record it, since figures from different machines are not comparable (benchmarks/RESULTS.md shows
    the same LRA ratio differing by host)."""
    info: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "isa": [],
                            "logical_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), **versions()}
    try:
        text = cpuinfo.read_text()
    except OSError:
        text = ""
    fields = dict(line.split(":", 1) for line in text.splitlines()[:64] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    info["cpu"] = fields.get("model name") or info["cpu"]
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    info["isa"] = [f for f in ISA_FLAGS if f in flags]
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def describe_machine(info: dict[str, Any]) -> str:
    """One line for a benchmark's header from :func:`machine`'s record: processor (GPU where there is one), vector
    ISA, torch version and threads."""
    isa = ", ".join(info["isa"]) or "no ISA flags read"
    return f"{info.get('gpu', info['cpu'])} ({isa}), torch {info['torch']}, {info['torch_threads']} thread(s)"


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


def pick_device(name: str | torch.device | int | None, argument: str = "--device") -> torch.device:
    """``None`` -> cuda when available, else cpu; an explicit cuda without a GPU is a usage error.

    Args:
        name: ``cpu``, ``cuda``, ``cuda:N``, a ``torch.device`` of those, or a GPU index N (as torch reads it).
        argument: how the caller names it in messages (``--device`` on the command line, ``device`` in Python,
            where the error is an :class:`~lavo_zoo.errors.InputError`, a ValueError too).

    Raises:
        UsageError: anything else, or a GPU this machine does not have.
    """
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    error = UsageError if argument.startswith("--") else InputError
    if isinstance(name, int) and not isinstance(name, bool) and name >= 0:
        name = f"cuda:{name}"
    elif isinstance(name, torch.device):
        name = str(name)
    if not isinstance(name, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise error(f"{argument} must be cpu, cuda or cuda:N, got {name!r}"
                    + ("" if error is UsageError else " (a GPU index N or a torch.device work too)"))
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise error(f"{argument} {name} was asked for but no CUDA GPU is available; use "
                    + ("--device cpu" if argument == "--device" else f"{argument}='cpu'"))
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise error(f"{argument} {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from "
                    "0; use cuda:0 or cpu")
    return device
