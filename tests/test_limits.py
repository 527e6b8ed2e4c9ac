"""The option ranges of lavo_zoo.limits: one check per option, the same for the predictor (an InputError naming the
option and its range) and the command (a usage error, exit 2, with the same words), and every recipe command's
option of a shared name takes its type from there."""
import math

import click
import numpy as np
import pytest
from click.testing import CliRunner

from lavo_zoo import limits
from lavo_zoo.errors import InputError, UsageError

LIMITS = {value.name: value for value in vars(limits).values() if isinstance(value, limits.Limit)}


def _edges(limit: limits.Limit) -> tuple[list, list]:
    """(values at the limits, which are valid; values just past them and of other kinds, which are not)."""
    step = 1 if limit.kind is int else 1e-9
    good, bad = [], [math.nan, "3", None, True, [1]]
    if limit.low is not None:
        (bad if limit.low_open else good).append(limit.kind(limit.low))
        bad.append(limit.kind(limit.low) - step)
    if limit.high is not None:
        (bad if limit.high_open else good).append(limit.kind(limit.high))
        bad.append(limit.kind(limit.high) + step * max(1, abs(limit.high)))
    if limit.kind is int:
        bad += [2.5, math.inf]
    else:
        bad += [math.inf, -math.inf]
    return good, bad


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_values_at_the_limits_pass_and_past_them_are_refused_naming_option_and_range(name: str) -> None:
    limit = LIMITS[name]
    good, bad = _edges(limit)
    for value in good:
        assert limit.check(value) == value and type(limit.check(value)) is limit.kind
        assert limit.check(np.asarray(value)[()]) == value  # numpy scalars are numbers too
    for value in bad:
        with pytest.raises(InputError) as caught:
            limit.check(value)
        message = str(caught.value)
        assert message.startswith(f"{name} must be {limit.describe()}") and repr(value) in message
        assert isinstance(caught.value, UsageError) and isinstance(caught.value, ValueError)
    assert limit.check_optional(None) is None


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_the_command_line_runs_the_same_check(name: str) -> None:
    limit = LIMITS[name]

    @click.command()
    @click.option(limit.option, type=limit.click_type())
    def command(**kwargs):
        click.echo(f"ok {kwargs[name]!r}")

    good, bad = _edges(limit)
    for value in good:
        result = CliRunner().invoke(command, [limit.option, str(value)])
        assert result.exit_code == 0 and result.output == f"ok {value!r}\n", result.output
    for value in bad:
        if value is None or isinstance(value, (bool, list, str)):
            continue  # not something a command line can hold
        result = CliRunner().invoke(command, [limit.option, str(value)])
        assert result.exit_code == 2, result.output
        assert f"Invalid value for '{limit.option}': must be {limit.describe()}" in result.output


def test_a_tighter_bound_is_said_with_its_reason() -> None:
    assert limits.MAX_LENGTH.check(24, 24, "the model's positions") == 24
    with pytest.raises(InputError, match=r"max_length must be an integer from 1 to 24, got 25 \(the model's pos"):
        limits.MAX_LENGTH.check(25, 24, "the model's positions")


def test_every_recipe_command_option_of_a_shared_name_uses_the_shared_check() -> None:
    """`summarize --beam`, `generate --top-p`, `synthesize --max-frames`...: the command's option is declared with
    the Limit's click type, so the command and the predictor cannot drift apart."""
    from lavo_zoo.cli import recipe_commands

    seen = set()
    for _, command in recipe_commands().values():
        for param in command.params:
            if param.name in LIMITS:
                assert getattr(param.type, "limit", None) is LIMITS[param.name], f"{command.name} --{param.name}"
                seen.add(param.name)
    assert {"beam", "max_length", "batch_size", "max_new_tokens", "temperature", "top_k", "top_p", "seed",
            "max_frames", "stop_threshold", "windows"} <= seen
