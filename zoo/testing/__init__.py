"""``lavo_zoo.testing``: the contract checks every built-in attention and recipe passes, for plugins to run in
their own test suites (``lavo-zoo new`` writes tests that use them).

    from lavo_zoo.testing import attention_checks, check_attention
    import pytest

    @pytest.mark.parametrize("check", attention_checks("my_attention"))
    def test_contract(check):
        check()

Each check raises ``AssertionError`` with a message naming the mechanism and what broke; a check that does not apply
(e.g. an exact comparison for a mechanism that samples) calls ``pytest.skip`` with the reason.
"""
from lavo_zoo.testing.attention import (
    attention_checks,
    check_attention,
    check_causality,
    check_declared_capabilities,
    check_finite_gradients,
    check_output_shapes,
    check_padding_invariance,
    check_refuses_unsupported_patterns,
    check_reproducible,
    check_streaming_matches_full,
)

__all__ = ["attention_checks", "check_attention", "check_causality", "check_declared_capabilities",
           "check_finite_gradients", "check_output_shapes", "check_padding_invariance",
           "check_refuses_unsupported_patterns", "check_reproducible", "check_streaming_matches_full"]
