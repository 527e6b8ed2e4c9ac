"""The rules of a Slurm study's options, checked when the settings are read (a dry run refuses what sbatch would),
before submitit is imported: ``--time`` as Slurm reads a time limit (:func:`slurm_minutes`), ``--mem`` as sbatch
reads a memory size, and the free sbatch options of ``--slurm-option`` / ``launcher.slurm_options``
(:func:`parse_slurm_options`, :func:`check_slurm_options`). Torch-free and submitit-free."""
from __future__ import annotations

import re
from typing import Any

from lavo_zoo.errors import UsageError

_MEM = re.compile(r"^\d+[KMGTkmgt]?$")
_SBATCH_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# sbatch options a setting of its own gives (the option to use instead), or that the launcher sets itself (None)
_SBATCH_OWN = {"partition": "--partition", "p": "--partition", "time": "--time", "t": "--time", "mem": "--mem",
               "account": "--account", "A": "--account", "qos": "--qos", "q": "--qos", "constraint": "--constraint",
               "C": "--constraint", "cpus-per-task": "--cpus-per-cell", "c": "--cpus-per-cell",
               "gpus-per-node": "--gpus-per-cell", "gpus": "--gpus-per-cell", "G": "--gpus-per-cell",
               "gres": "--gpus-per-cell", "job-name": None, "J": None, "output": None, "o": None, "error": None,
               "e": None, "requeue": None, "no-requeue": None, "signal": None, "dependency": None, "d": None,
               "array": None, "a": None}
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def check_slurm_settings(settings: Any) -> None:
    """Refuse a launcher's Slurm settings that sbatch would not take: a malformed ``time`` or ``mem`` and a free
    option that is not one (:func:`check_slurm_options`). Settings no launcher uses yet are checked too (the config's
    section may describe the cluster for later).

    Args:
        settings: the :class:`~lavo_zoo.compare.launchers.LauncherSettings`.

    Raises:
        UsageError: naming the option and what to give instead.
    """
    if settings.time is not None:
        slurm_minutes(settings.time)
    if settings.mem is not None and not _MEM.match(str(settings.mem)):
        raise UsageError(f"--mem {settings.mem!r}: give the memory of a cell's job as sbatch reads it, a whole number "
                         "with an optional unit K, M, G or T (64G, 16000M)")
    check_slurm_options(settings.slurm_options)


def check_slurm_options(options: dict[str, Any]) -> None:
    """Refuse, before anything is submitted, a free sbatch option (``--slurm-option`` / ``launcher.slurm_options``)
    that is not one: a name sbatch cannot have (a space), a value that is not one line (a newline would become a
    line of the job's script), one that a setting of its own gives (``time``: use ``--time``), that the launcher
    sets itself (the job's name, logs, requeueing, dependencies) or that starts the job without this environment
    (an ``export`` without ``ALL``).

    Args:
        options: sbatch option name (with or without dashes for underscores) -> value (True: a flag).

    Raises:
        UsageError: naming the option and what to give instead.
    """
    for key, value in options.items():
        name = str(key).replace("_", "-")
        if not _SBATCH_KEY.match(str(key)):
            raise UsageError(f"--slurm-option {key!r}: an sbatch option's name is letters, digits and dashes "
                             "(mail-type=END); give one option per --slurm-option")
        if name in _SBATCH_OWN or key in _SBATCH_OWN:
            instead = _SBATCH_OWN.get(name, _SBATCH_OWN.get(key))
            raise UsageError(f"--slurm-option {key}: " + (f"give it as {instead} (or its key in the launcher: section)"
                                                         if instead else "the launcher sets this sbatch option "
                                                         "itself; leave it out"))
        if name == "export" and not str(value).upper().startswith("ALL"):
            raise UsageError(f"--slurm-option export={value}: a cell's job runs this Python with this environment (the "
                             "virtual environment, PYTHONPATH, and the variables submitit finds its job by); an export "
                             "without ALL leaves them out and every job fails before its cell starts. Give "
                             "export=ALL,NAME=VALUE to add variables, or leave the option out")
        if value is True:  # a flag (exclusive)
            continue
        if value is False:
            raise UsageError(f"--slurm-option {key}=false: an sbatch flag is given or left out; leave it out")
        if not isinstance(value, (str, int, float)) or any(c in str(value) for c in "\n\r\0"):
            raise UsageError(f"--slurm-option {key}={value!r}: the value must be one line of text (or true for a "
                             "flag)")


def slurm_minutes(value: str | int) -> int:
    """Slurm's ``--time`` in whole minutes (rounded up): ``90``, ``"90"``, ``"MM:SS"``, ``"HH:MM:SS"``, ``"D-HH"``,
    ``"D-HH:MM"``, ``"D-HH:MM:SS"``.

    Args:
        value: the time limit as given (a number of minutes, or Slurm's text).

    Raises:
        UsageError: a value Slurm would not read as a time limit.
    """
    text = str(value).strip()
    found = _TIME.match(text)
    if isinstance(value, bool) or not found:
        raise UsageError(f"--time {value!r}: give a time limit as Slurm writes one: minutes (240), HH:MM:SS "
                         "(4:00:00) or D-HH:MM:SS (1-00:00:00)")
    days, first, second, third = (int(x) if x is not None else None for x in found.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + first * 3600 + (second or 0) * 60 + (third or 0)
    elif third is not None:  # HH:MM:SS
        seconds = first * 3600 + second * 60 + third
    elif second is not None:  # MM:SS
        seconds = first * 60 + second
    else:  # minutes
        seconds = first * 60
    if seconds <= 0:
        raise UsageError(f"--time {value!r}: a cell's job needs a time limit above 0")
    return -(-seconds // 60)


def parse_slurm_options(items: tuple[str, ...]) -> dict[str, Any]:
    """``("exclusive", "mail-type=END")`` -> ``{"exclusive": True, "mail-type": "END"}`` (``--slurm-option``).

    Args:
        items: the ``--slurm-option`` values, ``KEY=VALUE`` or ``KEY`` alone for a flag.

    Raises:
        UsageError: an item with a key but no value after its ``=``, or no key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not key or (eq and not value):
            raise UsageError(f"--slurm-option {item}: write an sbatch option as KEY=VALUE (mail-type=END) or KEY "
                             "alone for a flag (exclusive)")
        out[key] = value if eq else True
    return out
