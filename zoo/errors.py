"""Exceptions the command line turns into short messages (exit 2 for usage errors, 1 for the rest)."""
from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from pathlib import Path


class ZooError(Exception):
    """A failure with a message meant for the user (exit code 1, no traceback)."""

    exit_code = 1


class UsageError(ZooError):
    """The user asked for something malformed: a bad config key, an unknown name, a wrong flag (exit code 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file or override that does not match the recipe's schema."""


class OptionError(UsageError, ValueError):
    """An option value a component refuses (e.g. num_bases > head_dim): a usage error for the CLI (exit 2) that
    library code can still catch as the ValueError the component raised."""


class InputError(UsageError, ValueError):
    """Arguments a library call cannot use (a mask with no real token, a cache from another model or batch): a
    usage error for the CLI (exit 2) that library code can catch as a ValueError."""


class PluginError(ZooError):
    """A package that extends lavo-zoo through an entry point (a plugin) whose module cannot be imported: named with
    its entry point and the package that declares it, so that the user can fix or uninstall it."""


class CheckpointError(ZooError):
    """A checkpoint that is missing, corrupt, truncated or does not match the model."""


class DataError(ZooError):
    """A dataset path or file that cannot be used (missing, empty, malformed)."""


class MissingInput(UsageError, DataError):
    """An input path that does not exist (``data.path``): a usage error (exit 2), as a missing file given on the
    command line is, that code handling data problems still catches as a DataError."""


class MissingSplit(DataError):
    """The files of a split are absent (as opposed to present and malformed): a training run goes on without
    periodic validation when the validation split is missing, and stops on any other DataError."""


def not_a_file(path: Path) -> str:
    """How ``path`` fails to be a file to read, for a message after its name: ``is missing`` where nothing is there,
    ``is a folder, not a file`` where a folder is, ``is not a regular file`` for anything else (a socket, a link to
    nowhere)."""
    path = Path(path)
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists():
        return "is not a regular file"
    return "is a link to nowhere" if path.is_symlink() else "is missing"


_OS_REASONS = {
    errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied", errno.EPERM: "permission denied",
    errno.ENAMETOOLONG: "the name is too long", errno.EISDIR: "it is a folder, not a file",
    errno.ENOTDIR: "a part of the path is a file, not a folder", errno.ENOENT: "no such file or folder",
    errno.EEXIST: "it already exists", errno.EXDEV: "it is on another file system",
}
_OS_FIXES = {
    errno.ENOSPC: "free some space, or write elsewhere", errno.EDQUOT: "free some space, or write elsewhere",
    errno.EROFS: "write to a folder you can write to", errno.EACCES: "write to a folder you can write to",
    errno.EPERM: "write to a folder you can write to",
}


def os_error_reason(error: OSError) -> str:
    """Why an operating-system call failed, in words for a message (``the disk is full``, ``the file system is
    read-only``, ``permission denied``, ...)."""
    return _OS_REASONS.get(error.errno) or error.strerror or str(error)


def os_error_message(error: OSError, action: str = "") -> str:
    """``"[<action> ]<file>: <reason>; <how to fix it>"`` for an OSError (``action``: e.g. ``could not write``)."""
    where = " and ".join(str(f) for f in (error.filename, getattr(error, "filename2", None)) if f)
    fix = _OS_FIXES.get(error.errno)
    text = " ".join(part for part in (action, where) if part)
    return f"{text + ': ' if text else ''}{os_error_reason(error)}" + (f"; {fix}" if fix else "")


# Names people type for a setting -> the words of lavo-zoo's name for it (matched on the last dotted part).
ALIASES = {
    "learning_rate": "lr", "lr_rate": "lr", "epochs": "max_epochs", "num_epochs": "max_epochs",
    "steps": "max_steps", "num_steps": "max_steps", "total_steps": "max_steps", "max_iters": "max_steps",
    "batch": "batch_size", "bs": "batch_size", "warmup": "warmup_steps", "wd": "weight_decay",
    "grad_clip": "clip_grad_norm", "clip_norm": "clip_grad_norm", "max_grad_norm": "clip_grad_norm",
    "gradient_accumulation_steps": "grad_accum", "accumulate_grad_batches": "grad_accum",
    "patience": "early_stopping_patience", "seq_length": "seq_len", "context_length": "block_size",
    "d_model": "embed_dim", "hidden_size": "embed_dim", "n_heads": "num_heads", "nhead": "num_heads",
    "d_ff": "ffn_dim", "dim_feedforward": "ffn_dim", "n_layers": "num_layers", "layers": "num_layers",
    "embed_dim": "d_model", "num_heads": "n_heads", "ffn_dim": "d_ff",
}
_SQUASHED_ALIASES = {k.replace("_", ""): v for k, v in ALIASES.items()}
# Abbreviations treated as the same word when comparing the words of two names.
_WORDS = {"lr": "learning rate", "num": "n", "dim": "d", "ffn": "ff", "max": "", "eval": "evaluation",
          "len": "length", "seq": "sequence", "grad": "gradient", "attn": "attention"}


def _words(name: str) -> set[str]:
    words: set[str] = set()
    for part in name.lower().replace("-", "_").split("_"):
        words.update(_WORDS.get(part, part).split())
    return {w for w in words if w}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or ``''`` when nothing is close.

    Dotted names (``train.learning_rate``) are compared on their last part among choices with the same prefix: a
    known alias first (``learning_rate`` -> ``lr``), then the most shared words (``lr`` = learning rate), then
    spelling (difflib).
    """
    choices = list(choices)
    prefix, _, leaf = word.rpartition(".")
    siblings = {c.rpartition(".")[2]: c for c in choices if c.rpartition(".")[0] == prefix}
    alias = _SQUASHED_ALIASES.get(leaf.lower().replace("_", "").replace("-", ""))
    if alias in siblings:
        return f" (did you mean '{siblings[alias]}'?)"
    words = _words(leaf)
    scored = sorted(((len(words & _words(s)) / len(words | _words(s)), s) for s in siblings), reverse=True)
    if scored and scored[0][0] >= 0.5 and (len(scored) == 1 or scored[1][0] < scored[0][0]):
        return f" (did you mean '{siblings[scored[0][1]]}'?)"
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.5) if siblings and prefix else []
    if close:
        return f" (did you mean '{siblings[close[0]]}'?)"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""
