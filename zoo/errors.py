"""Exceptions the command line turns into short messages (exit 2 for usage errors, 1 for the rest)."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


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


class CheckpointError(ZooError):
    """A checkpoint that is missing, corrupt, truncated or does not match the model."""


class DataError(ZooError):
    """A dataset path or file that cannot be used (missing, empty, malformed)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or ``''`` when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""
