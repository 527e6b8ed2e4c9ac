"""benchmarks/hf_decode_cost.py at toy size: the transformers form decodes through its cache after prompts of two
lengths, LAVO's cache the same size at both and sdpa's growing with the prompt."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

pytest.importorskip("transformers")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_decode_cost.py"


def test_lavo_keeps_one_cache_size_and_sdpa_grows(tmp_path):
    decode_cost = runpy.run_path(str(SCRIPT))["decode_cost"]
    lavo = decode_cost("lm/tiny-lavo", [20, 300], 2, tmp_path)
    sdpa = decode_cost("lm/tiny-sdpa", [20, 300], 2, tmp_path)
    assert [r["position"] for r in lavo] == [20, 300]
    assert lavo[0]["state_bytes"] == lavo[1]["state_bytes"] > 0
    assert sdpa[1]["state_bytes"] > 2 * sdpa[0]["state_bytes"]  # the keys and values of every position
    assert all(r["min_ms"] > 0 and r["median_ms"] >= r["min_ms"] for r in lavo + sdpa)
