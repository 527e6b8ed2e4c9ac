"""The public contract kit catches broken mechanisms: each check fails on an attention built to break it."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import ATTENTIONS, Attention
from lavo_zoo.testing import (
    check_attention,
    check_causality,
    check_padding_invariance,
    check_refuses_unsupported_patterns,
    check_streaming_matches_full,
)


class _MeanMixer(Attention):
    """y_t = W (mean of x over the whole sequence) + x_t: deliberately ignores masks and causality."""

    patterns = ("causal", "noncausal")
    description = "test-only broken mechanism"

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal") -> None:
        super().__init__(embed_dim, num_heads, pattern)
        self.proj = torch.nn.Linear(embed_dim, embed_dim)

    def attend(self, x, padding_mask, context, context_mask, state, return_state):
        y = x + self.proj(x.mean(1, keepdim=True))  # [B, T, D]: every output sees every token
        return (y, None) if return_state else y


class _ForgetfulStreamer(Attention):
    """A correct causal running mean whose streaming state forgets everything: claims streaming=True."""

    patterns = ("causal",)
    streaming = True
    description = "test-only broken streaming"

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal") -> None:
        super().__init__(embed_dim, num_heads, pattern)
        self.proj = torch.nn.Linear(embed_dim, embed_dim)

    def attend(self, x, padding_mask, context, context_mask, state, return_state):
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[None, :, None]
        y = self.proj(x.cumsum(1) / n)  # [B, T, D] causal running mean, but the state below carries nothing
        return (y, object()) if return_state else y


class _PermissivePatterns(_MeanMixer):
    """Declares only causal but never refuses another pattern itself."""

    patterns = ("causal",)

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal") -> None:
        torch.nn.Module.__init__(self)
        self.embed_dim, self.num_heads, self.pattern = embed_dim, num_heads, pattern
        self.head_dim = embed_dim // num_heads
        self.proj = torch.nn.Linear(embed_dim, embed_dim)


@pytest.fixture
def registered():
    names = []

    def add(name: str, cls: type) -> str:
        ATTENTIONS.register(name, cls)
        names.append(name)
        return name
    yield add
    for name in names:
        ATTENTIONS._entries.pop(name, None)


def test_kit_catches_future_leakage(registered):
    with pytest.raises(AssertionError, match="future"):
        check_causality(registered("_test_mean_mixer", _MeanMixer))


def test_kit_catches_padding_leakage(registered):
    with pytest.raises(AssertionError, match="padded content changed real outputs"):
        check_padding_invariance(registered("_test_mean_mixer", _MeanMixer), "noncausal")


def test_kit_catches_broken_streaming(registered):
    with pytest.raises(AssertionError, match="streaming differs"):
        check_streaming_matches_full(registered("_test_forgetful", _ForgetfulStreamer))


def test_kit_catches_a_class_that_accepts_unsupported_patterns(registered):
    with pytest.raises(AssertionError, match="the class itself accepted"):
        check_refuses_unsupported_patterns(registered("_test_permissive", _PermissivePatterns))


def test_check_attention_passes_a_correct_mechanism():
    check_attention("local")  # a built-in: every applicable check passes outside pytest's parametrisation too
