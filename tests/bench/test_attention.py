"""``lavo-zoo bench attention``: every mode, JSON and plot output, peak memory that sees torch's allocations, any
registered attention, timing and memory measured in separate processes, and usage errors (exit code 2)."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from click.testing import CliRunner

from lavo_zoo.attention import list_attentions
from lavo_zoo.bench import bench
from lavo_zoo.bench.timing import run_isolated
from lavo_zoo.cli import main
from lavo_zoo.engine.env import machine
from lavo_zoo.errors import UsageError

TINY = ["--embed-dim", "32", "--heads", "4", "--repeats", "2", "--warmup", "1"]


@pytest.mark.parametrize("mode", ["fwd", "fwdbwd", "decode", "stream"])
def test_modes_json_and_plot(tmp_path, mode):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["bench", "attention", "--attentions", "lavo,sdpa,local", "--lengths", "40,100", "--mode", mode,
                 "--chunk-size", "32", "--no-isolate", "--json", str(out), "--plot", str(png), *TINY])
    assert code == 0
    records = json.loads(out.read_text())["results"]
    assert [(r["attention"], r["length"]) for r in records] == [(a, n) for a in ("lavo", "sdpa", "local")
                                                                for n in (40, 100)]
    for r in records:
        assert "error" not in r, r
        assert r["time_s"] > 0 and r["tokens_per_s"] > 0 and len(r["times_s"]) == 2 and r["peak_memory_bytes"] >= 0
        assert ("state_bytes" in r) == (mode in ("decode", "stream"))
    if mode == "decode":  # the KV cache grows with the context, LAVO's and local's state do not
        by = {(r["attention"], r["length"]): r["state_bytes"] for r in records}
        assert by["sdpa", 100] > by["sdpa", 40] and by["lavo", 100] == by["lavo", 40]
    assert png.read_bytes()[:4] == b"\x89PNG"
    host = json.loads(out.read_text())["settings"]["machine"]  # what the figures depend on besides the code
    assert host["torch"] == torch.__version__ and host["torch_threads"] == torch.get_num_threads()


def test_machine_reads_the_cpu_model_and_vector_units(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 fma avx2 avx avx512_vnni\n\n"
                    "processor\t: 1\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 fma avx2 avx avx512_vnni\n")
    host = machine("cpu", cpuinfo=info)
    assert host["cpu"] == "Test CPU 9000" and host["isa"] == ["avx", "avx2", "fma", "avx512_vnni"]
    assert "gpu" not in host and host["logical_cores"] == os.cpu_count()
    bare = machine("cpu", cpuinfo=tmp_path / "missing")  # no /proc (macOS, Windows): no flags, still a CPU name
    assert bare["isa"] == [] and isinstance(bare["cpu"], str)


def test_isolated_peak_memory_sees_torch_allocations(tmp_path):
    out = tmp_path / "r.json"
    T, D = 8192, 128
    assert main(["bench", "attention", "--attentions", "lavo", "--lengths", str(T), "--mode", "fwdbwd",
                 "--embed-dim", str(D), "--heads", "2", "--repeats", "1", "--warmup", "0", "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())["results"]
    assert r["memory_method"] in ("VmHWM-reset", "ru_maxrss")
    assert r["peak_memory_bytes"] >= 8 * T * D * 4  # q, k, v, local, output... each [T, D] fp32 are kept for backward


def test_isolated_runs_time_with_the_default_allocator_and_measure_memory_apart(tmp_path, monkeypatch):
    """The timed process must not carry MEMORY_ENV (it slows allocation-heavy kernels), the memory process must."""
    (tmp_path / "fake_worker.py").write_text(
        "import os, sys\n"
        "def measure(spec):\n"
        "    mem = os.environ.get('MALLOC_MMAP_THRESHOLD_') == '65536'\n"
        "    if spec.get('fail') == mem: sys.exit(3)\n"
        "    return {'times_s': [9.0 if mem else 1.0] * spec['repeats'], 'memory_method': 'fake',\n"
        "            'peak_memory_bytes': 123 if mem else 0}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    record = run_isolated("fake_worker:measure", {"repeats": 3}, 60)
    assert record == {"times_s": [1.0, 1.0, 1.0], "peak_memory_bytes": 123, "memory_method": "fake"}
    failed = run_isolated("fake_worker:measure", {"repeats": 3, "fail": True}, 60)  # the memory run fails
    assert "exited with 3" in failed["error"]
    assert "exited with 3" in run_isolated("fake_worker:measure", {"repeats": 3, "fail": False}, 60)["error"]


def test_every_registered_attention_runs_with_defaults(tmp_path):
    names = [i.name for i in list_attentions() if "causal" in i.patterns]
    out = tmp_path / "r.json"
    assert main(["bench", "attention", "--attentions", ",".join(names), "--lengths", "24", "--mode", "fwdbwd",
                 "--no-isolate", "--json", str(out), *TINY]) == 0
    errors = {r["attention"]: r["error"] for r in json.loads(out.read_text())["results"] if "error" in r}
    assert not errors


@pytest.mark.parametrize("args, match", [
    (["--attentions", "lavoo"], "did you mean 'lavo'"),
    (["--lengths", "1024,abc"], "--lengths"),
    (["--lengths", "0"], "--lengths"),
    (["-o", "num_basis=4"], "no selected attention has option 'num_basis'"),
    (["-o", "vanilla.window_size=4", "--attentions", "lavo"], "not in --attentions"),
    (["-o", "lavo.num_bases=999"], "num_bases"),
    (["--mode", "decode", "--pattern", "noncausal"], "needs --pattern causal"),
    (["--embed-dim", "30", "--heads", "4"], "multiple of --heads"),
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
    (["--plot", "x.svg"], ".png"),
])
def test_usage_errors(args, match):
    with pytest.raises(UsageError, match=match):
        bench.main(["attention", "--lengths", "16", *args], standalone_mode=False)
    assert main(["bench", "attention", "--lengths", "16", *args]) == 2


def test_help_ends_with_examples():
    text = CliRunner().invoke(bench, ["attention", "--help"]).output
    assert "Examples:" in text and text.rstrip().splitlines()[-1].strip().startswith("lavo-zoo bench attention")
