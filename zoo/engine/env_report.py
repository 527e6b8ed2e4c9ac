"""``lavo-zoo env``: what a bug report needs to know about this installation, read without writing anything.

As ``python -m torch.utils.collect_env``, ``transformers env`` and ``accelerate env`` do: the versions of Python,
lavo-zoo and every dependency it declares (with the range each must satisfy), whether the environment is the
project's lock (``requirements/lock.txt``, the set the suite passed with; in a source checkout), whether each
compiled extension loads (torchaudio beside this torch, Triton), CUDA, the GPUs and NCCL, which kernels LAVO takes
by default on CUDA, espeak-ng (the text-to-speech recipe's built-in corpus), the cache folder with its size, whether
each optional extra can be used (its modules import), the plugins other packages add and whether each loads, and
PYTHONPATH. Every probe is guarded: a failing one is reported in its line, never raised.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from lavo_zoo.dependencies import (
    LOCK_VARIABLE,
    check_torchaudio_matches,
    declared_requirements,
    import_torchaudio,
    installed_version,
    lock_status,
)
from lavo_zoo.engine.env import cache_root, git_revision
from lavo_zoo.engine.memory import format_bytes
from lavo_zoo.version import __version__

# the entry-point groups through which other packages extend lavo-zoo (pyproject.toml names them)
PLUGIN_GROUPS = ("lavo_zoo.plugins.attentions", "lavo_zoo.plugins.recipes", "lavo_zoo.plugins.evaluators",
                 "lavo_zoo.plugins.transformers")
# environment variables that change what lavo-zoo does; their values are reported where set
VARIABLES = ("LAVO_ZOO_CACHE", LOCK_VARIABLE, "LAVO_ZOO_OFFLINE", "LAVO_ZOO_TRITON", "LAVO_ZOO_FLEX",
             "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "HF_HUB_OFFLINE", "HF_ENDPOINT")


def _probe(fn: Callable[[], Any]) -> Any:
    """``fn()``, or ``"error: <type>: <first line>"`` where it raises: a report never fails on one probe."""
    try:
        return fn()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the report shows what failed (a module that calls exit)
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"error: {type(e).__name__}{': ' + text if text else ''}"


def dependency_rows() -> list[dict[str, Any]]:
    """Every requirement lavo-zoo declares (extras included) with its installed version and whether that version is
    in the declared range (``ok`` None where it is not installed)."""
    rows: dict[str, dict[str, Any]] = {}
    for name, spec, extra in declared_requirements():
        if name.lower() in rows:  # declared again by another extra (dev repeats some): one row, every extra named
            row = rows[name.lower()]
            row["extra"] = ",".join(e for e in (row["extra"], extra) if e) if row["extra"] else ""
            continue
        version = installed_version(name)
        try:
            ok = None if version is None else SpecifierSet(spec).contains(version, prereleases=True)
        except InvalidSpecifier:
            ok = None
        rows[name.lower()] = {"name": name, "required": spec or "any", "extra": extra, "installed": version,
                              "ok": ok}
    return list(rows.values())


def _torchaudio() -> dict[str, Any]:
    check_torchaudio_matches()
    module = import_torchaudio()
    return {"loads": True, "version": module.__version__}


def _triton() -> dict[str, Any]:
    import triton

    return {"loads": True, "version": triton.__version__}


def _cuda() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch_cuda": torch.version.cuda, "available": torch.cuda.is_available(),
                            "devices": [], "nccl": None, "cudnn": None}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            info["devices"].append({"index": i, "name": props.name, "memory": format_bytes(props.total_memory),
                                    "capability": f"{props.major}.{props.minor}"})
        info["cudnn"] = torch.backends.cudnn.version()
        info["nccl"] = _probe(lambda: ".".join(map(str, torch.cuda.nccl.version())))
    info["nccl_backend"] = _probe(lambda: torch.distributed.is_nccl_available())
    return info


def _lavo_kernels() -> dict[str, Any]:
    from lavo_zoo.attention.ops.dispatch import triton_by_default

    return {"triton_by_default_on_cuda": triton_by_default(),
            "cuda_default": "triton" if triton_by_default() else "flex window + recompute read",
            "LAVO_ZOO_TRITON": os.environ.get("LAVO_ZOO_TRITON")}


def _espeak() -> dict[str, Any]:
    import espeakng_loader

    library = espeakng_loader.get_library_path()
    lib = ctypes.CDLL(str(library))
    lib.espeak_Info.restype = ctypes.c_char_p
    lib.espeak_Info.argtypes = [ctypes.c_void_p]
    return {"loads": True, "version": (lib.espeak_Info(None) or b"").decode(errors="replace"),
            "library": str(library), "data": str(espeakng_loader.get_data_path())}


CACHE_COUNT_SECONDS = 5.0  # the cache's size is counted for at most this long (LAVO_ZOO_CACHE=/ took 22 s)


def folder_size(folder: Path, seconds: float | None = None) -> tuple[int, bool]:
    """(the bytes of the files under ``folder`` (links not followed), whether every file was counted): counting
    stops after ``seconds`` (None: never), so a report on a huge tree still comes at once."""
    import time

    total, deadline = 0, None if seconds is None else time.monotonic() + seconds
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while walking
                pass
        if deadline is not None and time.monotonic() > deadline:
            return total, False
    return total, True


def _cache() -> dict[str, Any]:
    root = cache_root()
    exists = root.is_dir()
    info: dict[str, Any] = {"folder": str(root), "exists": exists, "bytes": 0}
    if exists:
        info["bytes"], complete = folder_size(root, CACHE_COUNT_SECONDS)
        if not complete:
            info["complete"] = False  # bytes is a lower bound
    elif root.exists() or root.is_symlink():
        info["problem"] = "not a folder: set LAVO_ZOO_CACHE to a folder"
    return info


def _cache_line(cache: Any) -> str:
    if not isinstance(cache, dict):
        return f"cache: {cache}"
    if cache.get("problem"):
        return f"cache: {cache['folder']} ({cache['problem']})"
    if not cache["exists"]:
        return f"cache: {cache['folder']} (absent)"
    size = format_bytes(cache["bytes"])
    if not cache.get("complete", True):
        size = f"at least {size}: counting stopped after {CACHE_COUNT_SECONDS:g} s"
    return f"cache: {cache['folder']} ({size})"


LOCK_DIFFERENCES_SHOWN = 10  # a report lists this many differences from the lock, then counts the rest


def _lock_line(lock: Any) -> str:
    """The lock's verdict: matches, or the differences and the command that installs the locked set."""
    if not isinstance(lock, dict):
        return f"lock: {lock}"
    if lock["lock"] is None:
        return f"lock: none ({lock['reason']})"
    where = f"{lock['lock']}, for {lock['for']}"
    if lock["matches"]:
        return f"lock: this environment is the locked set ({where})"
    shown = lock["differences"][:LOCK_DIFFERENCES_SHOWN]
    more = len(lock["differences"]) - len(shown)
    count = len(lock["differences"])
    lines = [f"lock: this environment differs from the lock ({where}) in {count} package{'s' * (count != 1)}:"]
    lines += [f"  {d}" for d in shown]
    if more:
        lines.append(f"  ... and {more} more (lavo-zoo env --json lists them all)")
    if not lock["fits_this_machine"]:
        lines.append(f"  (the lock is for {lock['for']}: on another platform or Python some differences are "
                     "expected)")
    lines.append(f"  install the locked set: {lock['repair']}")
    return "\n".join(lines)


def _extras() -> dict[str, Any]:
    """Whether each optional extra can be used here (its modules import), not only whether its packages' metadata is
    there: ``{"hf": "usable"}`` or ``{"hf": "transformers is not installed"}``."""
    from lavo_zoo.dependencies import EXTRA_MODULES, extra_problem

    return {extra: extra_problem(extra) or "usable" for extra in EXTRA_MODULES}


def _plugins() -> list[dict[str, Any]]:
    """Every package that extends lavo-zoo through an entry point (lavo-zoo's own left out), with whether its module
    imports: a broken plugin is what makes a command fail, and a report should say which."""
    from importlib.metadata import entry_points

    from lavo_zoo.registry import plugin_failure

    rows = []
    found = [ep for group in PLUGIN_GROUPS for ep in entry_points(group=group)]
    for ep in sorted(found, key=lambda ep: (ep.group, ep.name)):
        if ep.value.startswith("lavo_zoo."):
            continue
        dist = getattr(ep, "dist", None)
        try:
            ep.load()
            state = "loads"
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin may raise anything on import, or exit
            state = plugin_failure(ep, e)
        rows.append({"group": ep.group, "name": ep.name, "value": ep.value, "state": state,
                     "package": f"{dist.name} {dist.version}" if dist is not None else None})
    return rows


def _python_path() -> list[dict[str, Any]]:
    """The folders ``PYTHONPATH`` puts before the installed packages (each: whether it exists): what makes this
    process import other code than the installation's."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [{"folder": p, "exists": Path(p).is_dir()} for p in entries]


def _installation_lines(info: dict[str, Any]) -> list[str]:
    """The report's lines on the optional extras' real state, the plugins and PYTHONPATH."""
    lines = ["", "optional extras (do their modules import?):"]
    extras = info.get("extras")
    lines += ([f"  {name}: {state}" for name, state in extras.items()] if isinstance(extras, dict)
              else [f"  {extras}"])
    plugins = info.get("plugins")
    lines += ["", "plugins (entry points of other packages):"]
    if isinstance(plugins, list):
        lines += [f"  {p['group'].rsplit('.', 1)[-1]}: {p['name']} = {p['value']} ({p['package'] or 'unknown package'}"
                  f"): {p['state']}" for p in plugins] or ["  none"]
    else:
        lines.append(f"  {plugins}")
    path = info.get("python_path")
    lines += ["", "PYTHONPATH:"]
    if isinstance(path, list):
        lines += [f"  {p['folder']}" + ("" if p["exists"] else " (does not exist)") for p in path] or ["  unset"]
    else:
        lines.append(f"  {path}")
    return lines


def collect() -> dict[str, Any]:
    """The whole report as a JSON-ready dict (``lavo-zoo env --json``)."""
    import torch

    return {
        "lavo_zoo": {"version": __version__, "git": git_revision(),
                     "location": str(Path(__file__).resolve().parents[1])},
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "implementation": platform.python_implementation()},
        "platform": {"system": platform.platform(), "machine": platform.machine(),
                     "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "torch": {"version": torch.__version__, "debug": torch.version.debug},
        "dependencies": dependency_rows(),
        "lock": _probe(lock_status),
        "extensions": {"torchaudio": _probe(_torchaudio), "triton": _probe(_triton)},
        "cuda": _probe(_cuda),
        "lavo_kernels": _probe(_lavo_kernels),
        "espeak_ng": _probe(_espeak),
        "cache": _probe(_cache),
        "variables": {name: os.environ[name] for name in VARIABLES if name in os.environ},
        "extras": _probe(_extras), "plugins": _probe(_plugins), "python_path": _probe(_python_path),
    }


def _loads(entry: Any) -> str:
    if isinstance(entry, dict):
        return f"loads ({entry['version']})"
    return entry


def format_report(info: dict[str, Any]) -> str:
    """The report as plain text to paste into a bug report."""
    z, py, plat = info["lavo_zoo"], info["python"], info["platform"]
    lines = [f"lavo-zoo {z['version']}" + (f" (git {z['git']})" if z["git"] else "") + f" at {z['location']}",
             f"Python {py['version']} ({py['implementation']}) at {py['executable']}",
             (f"platform: {plat['system']}, {plat['machine']}, {plat['cpus']} CPUs, {plat['torch_threads']} torch "
              "threads"),
             f"torch {info['torch']['version']}", "", "dependencies (installed / required):"]
    for row in info["dependencies"]:
        mark = {True: "", False: "  <- outside the required range", None: ""}[row["ok"]]
        where = f" [{row['extra']}]" if row["extra"] else ""
        lines.append(f"  {row['name']:<24} {row['installed'] or 'not installed':<16} {row['required']}{where}{mark}")
    lines.append(_lock_line(info["lock"]))
    ext = info["extensions"]
    lines += ["", "compiled extensions:", f"  torchaudio: {_loads(ext['torchaudio'])}",
              f"  triton: {_loads(ext['triton'])}"]
    cuda = info["cuda"]
    lines += ["", "CUDA:"]
    if isinstance(cuda, dict):
        lines.append(f"  torch built with CUDA {cuda['torch_cuda'] or 'none (CPU build)'}; available: "
                     f"{cuda['available']}; NCCL backend: {cuda['nccl_backend']}")
        lines += [f"  GPU {d['index']}: {d['name']}, {d['memory']}, compute capability {d['capability']}"
                  for d in cuda["devices"]]
        if cuda["available"]:
            lines.append(f"  cuDNN {cuda['cudnn']}, NCCL {cuda['nccl']}")
    else:
        lines.append(f"  {cuda}")
    kernels = info["lavo_kernels"]
    lines.append("LAVO on CUDA: " + (f"{kernels['cuda_default']} (LAVO_ZOO_TRITON="
                                     f"{kernels['LAVO_ZOO_TRITON'] or 'unset'})" if isinstance(kernels, dict)
                                     else kernels))
    es = info["espeak_ng"]
    lines.append("espeak-ng: " + (f"loads ({es['version']}, data {es['data']})" if isinstance(es, dict) else es))
    cache = info["cache"]
    lines.append(_cache_line(cache))
    if info["variables"]:
        lines += ["", "environment variables:"] + [f"  {k}={v}" for k, v in info["variables"].items()]
    lines += _installation_lines(info)
    return "\n".join(lines)
