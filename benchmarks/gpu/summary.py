"""The device check's report: ``summary.md`` and ``results.json`` in the output folder, from what the steps left in
the work folder (``steps.jsonl``: each step's exit code and time; each step's JSON). ``run.sh`` runs it after every
step, so a run stopped at its time limit still returns what it finished.

Usage: ``python benchmarks/gpu/summary.py WORK OUT``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from check_recipes import CONFIGS
from gpu_common import write_json

CONFIG_ORDER = {c: i for i, c in enumerate(CONFIGS)}

TIMINGS = {"timing_fwdbwd": "one layer fwd+bwd (D=768, 12 heads, LAVO r=64 w=16, batch 1), training's precision, "
                            "LAVO on its Triton kernels",
           "timing_decode": "decoding, time per token at a context position",
           "timing_stream": "a stream in chunks (whole stream vs one chunk)",
           "timing_local": "local (w=16, the flex_attention window on CUDA) fwd+bwd, same layer",
           "timing_default": "LAVO on its current CUDA default (flex window + recompute read), same layer"}


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def _status(rc: int) -> str:
    return {0: "ok", 124: "TIMEOUT", 137: "TIMEOUT (killed)", -1: "skipped (out of time)"}.get(rc, f"FAIL (exit {rc})")


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def kernels_section(data: dict[str, Any] | None, partial: list[dict[str, Any]]) -> list[str]:
    cases = data["cases"] if data else partial
    if not cases:
        return ["No kernel check finished."]
    counts = {s: sum(c["status"] == s for c in cases) for s in ("ok", "FAIL", "error", "skipped")}
    out = [f"{counts['ok']} ok, {counts['FAIL']} failed, {counts['error']} errors, {counts['skipped']} skipped of "
           f"{len(cases)}" + ("" if data else " (partial: the step did not finish)") + ". Errors are relative to "
           "float64 (rel: norms; peak: largest entry); a case passes at most at its precision's bound or 3x the "
           "error of the torch path in the same precision.", ""]
    worst: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cases:
        if c["status"] in ("ok", "FAIL"):
            key = (c["kind"], c.get("precision", "bf16+autocast"))
            if key not in worst or c["worst_over_limit"] > worst[key]["worst_over_limit"]:
                worst[key] = c
    out += ["| kind | precision | cases | worst error / limit | worst output (rel, peak) |", "|---|---|---:|---:|---|"]
    for (kind, precision), c in sorted(worst.items()):
        n = sum(x["kind"] == kind and x.get("precision", "bf16+autocast") == precision for x in cases)
        name, err = max(c["errors"].items(), key=lambda kv: max(kv[1].values()))
        out.append(f"| {kind} | {precision} | {n} | {c['worst_over_limit']:.2f} | {name} "
                   f"({err['rel']:.1e}, {err['peak']:.1e}) |")
    bad = [c for c in cases if c["status"] in ("FAIL", "error")]
    if bad:
        out += ["", "Failed cases:", ""]
        for c in bad[:30]:
            detail = c.get("error") or ", ".join(f"{k} {max(v.values()):.1e}" for k, v in c["errors"].items()
                                                 if max(v.values()) > c["bound"]) or f"kernels {c.get('mode')}"
            out.append(f"- case {c['id']} {c['kind']} {c.get('pattern', c.get('rows', ''))} T={c.get('T')} "
                       f"{c.get('precision', '')}: {detail}")
    return out


def recipes_section(records: list[dict[str, Any]]) -> list[str]:
    if not records:
        return ["No recipe finished."]
    out = ["| config | status | loss (first 5 -> last 5) | eval | predictor | LAVO kernels (train / eval) | s |",
           "|---|---|---|---|---|---|---:|"]
    for r in records:
        t = r.get("training", {})
        loss = f"{_fmt(t.get('first5'))} -> {_fmt(t.get('last5'))}" if "first5" in t else \
            ", ".join(_fmt(x) for x in t.get("losses", []))
        ev = ", ".join(f"{k} {_fmt(v)}" for k, v in list(r.get("eval", {}).items())[:3])
        pred = r.get("predictor", {})
        kernels = r.get("kernels", {})
        if isinstance(kernels, dict):
            lavo = [" ".join(sorted({k.split("[")[1].rstrip("]") for k in kernels.get(p, []) if "[" in k})) or "-"
                    for p in ("train", "eval")]
            kernels = " / ".join(lavo)
        status = r["status"] + (f": {'; '.join(r['problems'])[:200]}" if r.get("problems") else "")
        out.append(f"| {r['config']}{' (compile)' if r.get('compile') else ''} | {status} | {loss} | {ev} | "
                   f"{pred.get('call', '-')} {'ok' if pred.get('ok') else '-'} | {kernels} | {r['seconds']:.0f} |")
    for r in records:
        pc = r.get("point_cloud_autocast")
        if pc:
            out += ["", f"Point-cloud scores with autocast on and off: the same predictions scored alike: "
                        f"{pc['same_scores']}; validation under bf16 autocast vs fp32, relative differences "
                        + ", ".join(f"{k} {v:.2%}" for k, v in pc["validated_rel"].items()) + "."]
    return out


def local_section(data: dict[str, Any] | None, partial: list[dict[str, Any]]) -> list[str]:
    records = data["records"] if data else partial
    if not records:
        return ["No length finished."]
    out = ["| length | status | flex | first call s | peak MiB | dense scores MiB |", "|---:|---|---|---:|---:|---:|"]
    for r in records:
        out.append(f"| {r['length']} | {r['status']} {r.get('error', '')} | {r['flex']} | {_fmt(r.get('seconds'))} | "
                   f"{r.get('peak_bytes', 0) / 2**20:.0f} | {r['dense_scores_bytes'] / 2**20:.0f} |")
    return out


def attention_table(data: dict[str, Any]) -> list[str]:
    rows = data["results"]
    out = ["| attention | T | time ms | tok/s | peak MiB | kernels |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['attention']} | {r['length']} | {r['error'][:80]} | | | |")
            continue
        out.append(f"| {r['attention']} | {r['length']} | {r['time_s'] * 1e3:.3f} | {r['tokens_per_s']:.0f} | "
                   f"{r['peak_memory_bytes'] / 2**20:.1f} | {r.get('kernels', '')} |")
    by = {(r["attention"], r["length"]): r for r in rows if "error" not in r}
    ratios = [f"{n}: {by['sdpa', n]['time_s'] / by['lavo', n]['time_s']:.2f}x" for (a, n) in by
              if a == "lavo" and ("sdpa", n) in by]
    if ratios and data["settings"]["mode"] == "fwdbwd":
        out += ["", "sdpa time / LAVO time: " + ", ".join(ratios)]
    return out


def lm_table(data: dict[str, Any]) -> list[str]:
    out = ["| config | length | precision | dropout (model / attention) | train tok/s | eval tok/s | kernels |",
           "|---|---:|---|---|---:|---:|---|"]
    for r in data["results"]:
        out.append(f"| {r['config']} | {r['length']} | {r['precision']} | {r['dropout']} / {r['attention_dropout']} "
                   f"| {r['train_tokens_per_s']:.0f} | {r['eval_tokens_per_s']:.0f} | "
                   f"{r.get('train_kernels', '')} / {r.get('eval_kernels', '')} |")
    by = {(r["attention"], r["length"]): r for r in data["results"]}
    ratios = [f"{n}: {by['lavo', n]['train_tokens_per_s'] / by['sdpa', n]['train_tokens_per_s']:.2f}x"
              for (a, n) in by if a == "lavo" and ("sdpa", n) in by]
    if ratios:
        out += ["", "LAVO / sdpa training tokens/s: " + ", ".join(ratios)]
    return out


def main() -> int:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    steps = _jsonl(work / "steps.jsonl")
    setup = _load(work / "setup.json") or {}
    kernels = _load(work / "kernels.json")
    recipes = []  # the parts run side by side, each config once
    for i in range(1, 10):
        data = _load(work / f"recipes_{i}.json")
        recipes += data["records"] if data else _jsonl(work / f"recipes_{i}.jsonl")
    recipes.sort(key=lambda r: CONFIG_ORDER.get(r["config"], 99))
    compiled = _load(work / "compile.json")
    local = _load(work / "local.json")
    timings = {name: _load(work / f"{name}.json") for name in (*TIMINGS, "timing_lm")}
    lines = [f"# Device check{' (toy size, CPU)' if setup.get('toy') else ''}", ""]
    env = setup.get("environment", {})
    lines += [(f"- device: {env.get('device', '?')} ({env.get('sm_count', '-')} SMs, "
               f"{env.get('memory_gib', '-')} GiB, compute capability {env.get('capability', '-')}); driver "
               f"{setup.get('driver', '-')}"),
              (f"- python {env.get('python')}, torch {env.get('torch')} (CUDA {env.get('cuda')}), triton "
               f"{env.get('triton')}; lavo-zoo from {setup.get('lavo_zoo', '?')}"),
              f"- started {setup.get('started', '?')}; command: `{setup.get('command', '?')}`"]
    if setup.get("missing"):
        lines.append(f"- MISSING Python packages: {', '.join(setup['missing'])} (fetch the wheels: "
                     "`bash benchmarks/gpu/fetch_wheels.sh`, carry `.whl`)")
    lines += ["", "## Steps", "", "| step | status | seconds | limit |", "|---|---|---:|---:|"]
    for s in steps:
        lines.append(f"| {s['step']} | {_status(s['rc'])} | {s['seconds']} | {s['timeout_s']} |")
    parts = [r for p in sorted(work.glob("kernels.part*.jsonl")) for r in _jsonl(p)] if kernels is None else []
    sections = [("(a) Kernels against float64", kernels_section(kernels, parts)),
                ("(b) Recipes on the device (bf16 autocast)", recipes_section(recipes)),
                ("(c) torch.compile", recipes_section(compiled["records"] if compiled else
                                                      _jsonl(work / "compile.jsonl"))),
                ("(c) local at 10 lengths", local_section(local, _jsonl(work / "local.jsonl")))]
    for name, title in TIMINGS.items():
        if timings[name]:
            sections.append((f"(d) {title}", attention_table(timings[name])))
    if timings["timing_lm"]:
        sections.append(("(d) GPT-2 small training (paper config's dropout, training's precision)",
                         lm_table(timings["timing_lm"])))
    for title, body in sections:
        lines += ["", f"## {title}", "", *body]
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    write_json(out / "results.json", {"setup": setup, "steps": steps, "kernels": kernels, "recipes": recipes,
                                      "compile": compiled, "local": local, "timings": timings})
    return 0


if __name__ == "__main__":
    sys.exit(main())
