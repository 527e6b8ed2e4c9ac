"""benchmarks/gpu/profile_lavo.py, the profile the GPU session takes: at toy size on the CPU it profiles each run
(LAVO on its kernels, sdpa), records the kernels LAVO ran, and writes the tables of top kernels and the JSON."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu" / "profile_lavo.py"


def _script():
    spec = importlib.util.spec_from_file_location("profile_lavo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_runs_at_toy_size_and_writes_the_tables(tmp_path):
    out = tmp_path / "profile"
    records = _script().main(["--device", "cpu", "--lengths", "48", "--embed-dim", "16", "--heads", "2",
                              "--num-bases", "4", "--window", "4", "--warmup", "1", "--repeats", "2", "--top", "5",
                              "--attentions", "lavo:triton,lavo:auto,sdpa", "--out", str(out)])
    assert [(r["attention"], r["length"], r["kernels"]) for r in records] == [
        ("lavo:triton", 48, "recompute"), ("lavo:auto", 48, "recompute"), ("sdpa", 48, None)]  # no Triton on a CPU
    for r in records:
        assert r["median_ms"] > 0 and 0 < len(r["top"]) <= 5 and r["timed_by"] == "cpu"
        assert all(row["self_ms"] > 0 for row in r["top"]) and 0 < sum(row["share"] for row in r["top"]) <= 1 + 1e-9
    assert json.loads((out / "profile.json").read_text()) == records
    table = (out / "profile.md").read_text()
    assert table.count("## ") == 3 and "## lavo:auto [recompute], T = 48, cpu, autocast none" in table
    assert table.count("| kernel | calls | self ms | share |") == 3
    assert all(r["calls"] >= sum(row["calls"] for row in r["top"]) > 0 and r["busy"] is None for r in records)
    lavo, sdpa = records[1]["ops"], records[2]["ops"]
    assert lavo > sdpa > 0 and f"; {lavo} PyTorch operations dispatched" in table


def test_a_device_profile_says_how_busy_the_device_was():
    """On a GPU the table says the kernel launches and the share of the median step the device spent in kernels
    (its kernels' self time over the step's wall time): what tells a launch-bound step from a compute-bound one."""
    record = {"attention": "lavo:triton", "length": 8192, "device": "NVIDIA H200", "autocast": "bfloat16",
              "kernels": "triton", "median_ms": 5.0, "peak_memory_mib": 132.0, "profiled_ms": 1.25, "calls": 180,
              "ops": 219, "busy": 0.25, "timed_by": "device",
              "top": [{"kernel": "k", "calls": 1, "self_ms": 1.25, "share": 1.0}]}
    table = _script()._markdown([record])
    assert "219 PyTorch operations dispatched, 180 kernel launches, the device busy for 25% of the median step" in table
