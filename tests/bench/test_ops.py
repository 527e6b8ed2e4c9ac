"""``lavo-zoo bench ops``: the operations one step of a layer dispatches, per path, and the counts pinned here so
that they cannot creep back (the GPU's fixed cost per step: benchmarks/RESULTS.md). The Triton path's counts are
pinned in tests/attention/lavo/test_triton.py, where the kernels run in Triton's interpreter."""
from __future__ import annotations

import json

import pytest
import torch

from lavo_zoo.bench.counting import counting
from lavo_zoo.bench.ops import count_path

# The benchmark layer's shape in small: the counts do not depend on D, H or T (r = d keeps the kernels' tiles exact)
SMALL = {"embed_dim": 32, "heads": 2, "num_bases": 16, "window": 4, "device": "cpu", "warmup": True}
# Counted when the fused path and the decoding step were written (lavo-zoo bench ops, D 768, 12 heads, r 64, w 16;
# the same here): a change that adds operations must raise these on purpose
SDPA_DECODE = 38           # the sdpa layer's decoding step, the bar for LAVO's
LAVO_CPU_DECODE = 38       # LAVO's PyTorch decoding step
LAVO_CPU_FWDBWD = 467      # LAVO's CPU default (the recompute kernels), fwd+bwd of 64 tokens under bf16 autocast


def test_counting_counts_views_and_casts_and_a_launch_once():
    """Every dispatched operation counts (a view and a cast too); a Triton launch counts once and nothing inside it
    (the interpreter's own operations), through the one launch context every kernel of the project goes through."""
    triton_utils = pytest.importorskip("lavo_zoo.attention.ops.triton_utils")
    x = torch.randn(4, 6)
    with counting() as c:
        y = x.view(6, 4).to(torch.float64) + 1                          # view, _to_copy, add
        with triton_utils.compiling("toy_kernel"):
            torch.ones(3).add_(y.sum())                                 # inside a launch: not counted
    assert c.ops == {"view": 1, "_to_copy": 1, "add": 1} and c.total == 3 and c.launches == ["toy_kernel"]


@pytest.mark.parametrize("path, mode, length, pinned", [
    ("lavo:auto", "decode", 100, LAVO_CPU_DECODE),
    ("lavo:auto", "fwdbwd", 64, LAVO_CPU_FWDBWD),
])
def test_lavo_cpu_counts_are_pinned(path, mode, length, pinned):
    """LAVO's CPU default: a decoding step at most sdpa's and the pinned count; a training step at most its
    pinned count (the recompute kernels loop over chunks, so this one holds at this length)."""
    autocast = "none" if mode == "decode" else "bfloat16"
    lavo = count_path({"path": path, "mode": mode, "length": length, "autocast": autocast, **SMALL})
    assert lavo["kernels"] == "recompute" and lavo["launches"] == 0
    assert lavo["total"] <= pinned, lavo["by_op"]
    if mode == "decode":
        sdpa = count_path({"path": "sdpa", "mode": mode, "length": length, "autocast": autocast, **SMALL})
        assert sdpa["total"] == SDPA_DECODE and lavo["total"] <= sdpa["total"], (lavo["by_op"], sdpa["by_op"])


def test_the_command_prints_each_path_and_writes_its_record(tmp_path, capsys):
    from lavo_zoo.cli import main

    out = tmp_path / "ops.json"
    assert main(["bench", "ops", "--paths", "sdpa,lavo:auto", "--mode", "decode", "--length", "20,40",
                 "--autocast", "none", "--embed-dim", "32", "--heads", "2", "--num-bases", "16", "--window", "4",
                 "--json", str(out)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| path | kernels | tokens | operations | launches | total |"
    records = json.loads(out.read_text())["records"]
    assert [(r["path"], r["length"], r["kernels"]) for r in records] == [
        ("sdpa", 20, None), ("lavo:auto", 20, "recompute"), ("sdpa", 40, None), ("lavo:auto", 40, "recompute")]
    assert all(r["total"] == r["ops"] == sum(r["by_op"].values()) > 0 and r["launches"] == 0 for r in records)
    lavo = [r["total"] for r in records if r["path"] == "lavo:auto"]
    assert lavo[0] == lavo[1]                                    # a decoding step costs the same at any position
    assert rows[1:] == [f"| {r['path']} | {r['kernels'] or '-'} | {r['length']} | {r['ops']} | 0 | {r['total']} |"
                        for r in records]


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N, got 'tpu'"),
    (["--paths", " , "], "--paths ' , ' names no path; give comma-separated name[:kernels]"),
] + ([] if torch.cuda.is_available() else [(["--device", "cuda"], "no CUDA GPU is available; use --device cpu")]))
def test_a_device_it_cannot_use_or_no_path_is_a_usage_error_before_any_runs(args, message, capsys):
    """Found by the sweep: --device tpu or cuda on a machine without one printed torch's RuntimeError after the
    table's header, one path in; an empty --paths printed an empty table and succeeded."""
    from lavo_zoo.cli import main

    assert main(["bench", "ops", "--paths", "sdpa", "--embed-dim", "8", "--heads", "2", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "| path |" not in captured.out
