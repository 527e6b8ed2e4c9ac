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
from lavo_zoo.bench.attention import measure
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
    data = json.loads(out.read_text())
    records = [r for r in data["results"] if not r.get("bisection")]  # the sweep (then the efficiency search's)
    assert [(r["attention"], r["length"]) for r in records] == [(a, n) for a in ("lavo", "sdpa", "local")
                                                                for n in (40, 100)]
    assert set(data["efficiency_lengths"]) == {"lavo", "local"}  # in every mode, against sdpa
    for r in data["results"]:
        assert "error" not in r, r
        assert r["time_s"] > 0 and r["tokens_per_s"] > 0 and len(r["times_s"]) == 2 and r["peak_memory_bytes"] >= 0
        assert ("state_bytes" in r) == (mode in ("decode", "stream"))
    if mode == "decode":  # the KV cache grows with the context, LAVO's and local's state do not
        by = {(r["attention"], r["length"]): r["state_bytes"] for r in records}
        assert by["sdpa", 100] > by["sdpa", 40] and by["lavo", 100] == by["lavo", 40]
    assert png.read_bytes()[:4] == b"\x89PNG"
    host = json.loads(out.read_text())["settings"]["machine"]  # what the figures depend on besides the code
    assert host["torch"] == torch.__version__ and host["torch_threads"] == torch.get_num_threads()


@pytest.mark.parametrize("mode", ["fwdbwd", "decode"])
def test_half_dtype_runs_under_trainings_autocast_unless_pure(mode):
    """--dtype bfloat16 times what training runs: fp32 weights and inputs with every forward under bf16 autocast;
    --precision pure casts the module and inputs to bf16 and runs without autocast."""
    seen = []
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
                                          next(module.parameters()).dtype, args[0].dtype)))
    spec = {"attention": "lavo", "embed_dim": 32, "heads": 2, "pattern": "causal", "options": {}, "device": "cpu",
            "dtype": "bfloat16", "batch": 1, "length": 40, "mode": mode, "warmup": 0, "repeats": 1, "chunk_size": 16}
    try:
        trained = measure(spec)
        autocast_seen, seen[:] = set(seen), []
        pure = measure({**spec, "precision": "pure"})
    finally:
        hook.remove()
    assert trained["time_s"] > 0 and pure["time_s"] > 0
    assert {(on, dtype, weights, inputs) for on, dtype, weights, inputs in autocast_seen} == {
        (True, torch.bfloat16, torch.float32, torch.float32)}
    assert {(on, weights, inputs) for on, _, weights, inputs in seen} == {(False, torch.bfloat16, torch.bfloat16)}


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
                 "--embed-dim", str(D), "--heads", "2", "--repeats", "1", "--warmup", "0", "--no-efficiency",
                 "--json", str(out)]) == 0
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


def test_efficiency_lengths_are_bisected_printed_and_recorded(tmp_path):
    """sdpa is added to the sweep (and said so); each other attention gets a time and a memory length, bisected
    between the swept lengths with further measurements of both, kept in the JSON marked as bisection records."""
    out = tmp_path / "r.json"
    result = CliRunner().invoke(bench, ["attention", "--attentions", "local,mean", "--lengths", "16,256,1024",
                                        "--no-isolate", "--efficiency-tolerance", "0.25", "--json", str(out), *TINY])
    assert result.exit_code == 0, result.output
    assert "sdpa added to the sweep" in result.output
    data = json.loads(out.read_text())
    assert data["settings"]["efficiency"] == {"baseline": "sdpa", "tolerance": 0.25, "step": 1, "baseline_added": True}
    found = data["efficiency_lengths"]
    assert set(found) == {"local", "mean"}
    table = result.output[result.output.index("# efficiency lengths"):].splitlines()
    assert table[1].split() == ["attention", "faster", "than", "softmax", "from", "smaller", "than", "softmax", "from"]
    records = {(r["attention"], r["length"]): r for r in data["results"]}
    for name, lengths in found.items():
        assert lengths["baseline"] == "sdpa"
        assert f"{name} " in "\n".join(table) and lengths["time"]["text"] in table[2 + list(found).index(name)]
        for criterion in ("time", "memory"):
            r = lengths[criterion]
            assert r["bound"] in ("crossing", "at_start", "never") and isinstance(r["monotone"], bool)
            assert r["text"].split(" (")[0] == {"crossing": f"{r['length']}", "at_start": "<= 16",
                                                 "never": "> 1024"}[r["bound"]]
            for n in r["bisection"]:  # both measured there, in the same mode, marked
                assert 16 < n < 1024 and n != 256
                assert records[name, n]["bisection"] and records["sdpa", n]["bisection"]
                assert records[name, n]["mode"] == "fwdbwd" and len(records[name, n]["times_s"]) == 2
            if r["bound"] == "crossing":
                lo, hi = r["bracket"]
                assert hi - lo <= 0.25 * lo or hi - lo <= 1
                assert records[name, hi]["time_s" if criterion == "time" else "peak_memory_bytes"] < \
                    records["sdpa", hi]["time_s" if criterion == "time" else "peak_memory_bytes"]
    swept = [r for r in data["results"] if not r.get("bisection")]
    assert [(r["attention"], r["length"]) for r in swept] == [(a, n) for a in ("local", "mean", "sdpa")
                                                               for n in (16, 256, 1024)]


def test_no_efficiency_adds_no_baseline(tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(bench, ["attention", "--attentions", "local", "--lengths", "16,64", "--no-isolate",
                                        "--no-efficiency", "--json", str(out), *TINY])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert "efficiency_lengths" not in data and "efficiency" not in data["settings"]
    assert {r["attention"] for r in data["results"]} == {"local"} and "sdpa" not in result.output
    assert "# efficiency lengths" not in result.output


def test_cross_pattern_measures_attention_over_a_source(tmp_path):
    out = tmp_path / "r.json"
    assert main(["bench", "attention", "--attentions", "lavo", "--pattern", "cross", "--lengths", "32",
                 "--no-isolate", "--json", str(out), *TINY]) == 0
    data = json.loads(out.read_text())
    assert {r["attention"] for r in data["results"]} == {"lavo", "sdpa"} and all("error" not in r
                                                                                for r in data["results"])


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
    (["-o", "lavo.num_bases=["], r"-o lavo.num_bases=\[: .*not valid YAML"),
    (["--mode", "decode", "--pattern", "noncausal"], "needs --pattern causal"),
    (["--embed-dim", "30", "--heads", "4"], "multiple of --heads"),
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
    (["--plot", "x.svg"], ".png"),
    (["--mode", "decode", "--pattern", "cross", "--attentions", "lavo"], "needs --pattern causal"),
])
def test_usage_errors(args, match):
    with pytest.raises(UsageError, match=match):
        bench.main(["attention", "--lengths", "16", *args], standalone_mode=False)
    assert main(["bench", "attention", "--lengths", "16", *args]) == 2


def test_help_ends_with_examples():
    text = CliRunner().invoke(bench, ["attention", "--help"]).output
    assert "Examples:" in text and text.rstrip().splitlines()[-1].strip().startswith("lavo-zoo bench attention")


def test_option_values_are_read_as_the_config_overrides():
    """-o 1e-3 is a number, as in a config override (YAML 1.1 alone reads it as a string, which the option's
    type check refuses)."""
    from lavo_zoo.bench.attention import _parse_options

    assert _parse_options(("gla.norm_eps=1e-3",), ["gla"]) == {"gla": {"norm_eps": 1e-3}}


def test_a_second_run_replaces_its_own_record(tmp_path):
    """bench attention refused its own earlier --json (its record keeps the machine in its settings, where the check
    of a benchmark's record did not look), though a benchmark's JSON is its record, replaced without --overwrite; a
    JSON of another kind is still refused."""
    out = tmp_path / "r.json"
    args = ["bench", "attention", "--attentions", "sdpa", "--lengths", "8", "--no-isolate", "--no-efficiency",
            "--json", str(out), *TINY]
    assert main(args) == 0
    first = json.loads(out.read_text())
    assert main([*args[:5], "16", *args[6:]]) == 0
    assert [r["length"] for r in json.loads(out.read_text())["results"]] == [16] != [r["length"] for r in
                                                                                     first["results"]]
    out.write_text('{"metrics": {}}')  # a results JSON: not this command's record
    assert main(args) == 2 and out.read_text() == '{"metrics": {}}'
