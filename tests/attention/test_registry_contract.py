"""The attention contract (docs/architecture.md), checked for EVERY registered mechanism and each pattern it
declares, through the public kit :mod:`lavo_zoo.testing` that plugins run too (so the kit cannot rot).

A new mechanism is tested here for free by registering it. Random inputs are drawn from a seed derived from the
mechanism's name.
"""
from __future__ import annotations

import zlib

import pytest

from lavo_zoo.attention import ATTENTIONS
from lavo_zoo.testing import attention_checks

CHECKS = [check for name in ATTENTIONS.names() for check in attention_checks(name, seed=zlib.crc32(name.encode()))]


@pytest.mark.parametrize("check", CHECKS, ids=repr)
def test_contract(check) -> None:
    check()


def test_registry_is_not_empty() -> None:
    assert {"lavo", "sdpa", "local"} <= set(ATTENTIONS.names())
