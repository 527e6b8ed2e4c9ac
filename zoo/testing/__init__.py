"""``lavo_zoo.testing``: the contract checks every built-in attention and recipe passes, for plugins to run in
their own test suites (``lavo-zoo new`` writes tests that use them).

    from lavo_zoo.testing import attention_checks, recipe_checks
    import pytest

    @pytest.mark.parametrize("check", attention_checks("my_attention"), ids=repr)
    def test_attention_contract(check):
        check()

    @pytest.mark.parametrize("check", recipe_checks("my_domain/tiny"), ids=repr)
    def test_recipe_contract(check, tmp_path):
        check(tmp_path)

``randomise_zero_parameters(module)`` draws the zero-initialised parameters (position biases, gates) of a module at
random, so that a comparison with a slow reference sees them; the checks and the zoo's own tests use it.

Each check raises ``AssertionError`` with a message naming the mechanism and what broke; a check that does not apply
(e.g. an exact comparison for a mechanism that samples) calls ``pytest.skip`` with the reason.
"""
from lavo_zoo.testing.attention import (
    attention_checks,
    check_attention,
    check_causality,
    check_cross_cache,
    check_declared_capabilities,
    check_decoding_step,
    check_finite_gradients,
    check_output_shapes,
    check_padded_row_alone,
    check_padding_invariance,
    check_refuses_unsupported_patterns,
    check_reproducible,
    check_streaming_matches_full,
    randomise_zero_parameters,
)
from lavo_zoo.testing.recipe import (
    check_evaluates,
    check_refuses_missing_data,
    check_resumes_exactly,
    check_trains,
    recipe_checks,
)

__all__ = [
    "attention_checks",
    "check_attention",
    "check_causality",
    "check_cross_cache",
    "check_declared_capabilities",
    "check_decoding_step",
    "check_evaluates",
    "check_finite_gradients",
    "check_output_shapes",
    "check_padded_row_alone",
    "check_padding_invariance",
    "check_refuses_missing_data",
    "check_refuses_unsupported_patterns",
    "check_reproducible",
    "check_resumes_exactly",
    "check_streaming_matches_full",
    "check_trains",
    "randomise_zero_parameters",
    "recipe_checks",
]
