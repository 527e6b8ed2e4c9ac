"""Steps (b) and (c, compile) of the device check: every recipe trained, evaluated and used on the device.

For each config (most important first), through the command line's own code (``lavo_zoo.cli.main``, in this one
process): ``lavo-zoo train`` for ``--steps`` optimiser steps under bf16 autocast (``train.precision=bf16``) with the
config's attention dropout, validating at the end; ``lavo-zoo eval`` of the checkpoint (a results JSON); then the
recipe's predictor on the checkpoint (generate / classify / complete / summarize / forecast / synthesize / answer).
Recorded per config: the training losses (finite; falling: the mean of the last 5 below the mean of the first 5, from 10
steps on), the results JSON's metrics (finite), the predictor's output, the attention kernels that ran in each phase
(LAVO's ``mode``: 'triton', 'flex+recompute', 'autograd', ...), and the time. The point-cloud config also scores the
same predictions with autocast on and off (the distances must not change) and validates the checkpoint under bf16
autocast and in fp32 (the scores must agree within 10%). ``--compile`` trains ``lm/tiny-lavo`` with
``train.compile=true`` instead (at toy size ``TORCH_COMPILE_DISABLE=1``: inductor's CPU build takes minutes).

Usage: ``python benchmarks/gpu/check_recipes.py --json OUT.json [--compile] [--part I/N] [CONFIG ...]``; exit 1 if a
config failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Self

from gpu_common import TOY, Timer, append_jsonl, environment, write_json

if TOY and "--compile" in sys.argv:
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # before torch is imported

CONFIGS = ["lm/tiny-lavo", "lra/tiny-text-lavo", "point_cloud/tiny-lavo", "summarization/tiny-lavo-noncausal",
           "time_series/tiny-lavo", "tts/tiny-lavo-causal", "summarization/tiny-lavo-causal", "tts/tiny-lavo-noncausal",
           "lra/tiny-retrieval-lavo", "recall/tiny-lavo"]
COMPILE_CONFIG = "lm/tiny-lavo"
STEPS = 2 if TOY else 20
# then the config is recorded as timed out and the next one starts (LAVO_GPU_TIME_SCALE: a slow or busy machine)
SECONDS_PER_CONFIG = int((150 if TOY else 100) * float(os.environ.get("LAVO_GPU_TIME_SCALE", "1")))
EVAL_BATCHES = 1 if TOY else 2
POINT_CLOUD_AGREEMENT = 0.10  # validation scores under bf16 autocast vs fp32, relative
# at toy size, shorter autoregressive decoding in evaluation (the same code, fewer steps)
TOY_OVERRIDES = {"tts": ["eval.max_frames=60"], "summarization": ["eval.max_len_b=20", "eval.min_len_b=2"]}


class TimedOut(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    def expired(signum: int, frame: Any) -> None:
        raise TimedOut(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class KernelLog:
    """Which attention classes ran in each phase, with LAVO's kernels (what it ran in the call): a global forward
    hook on every module that is an attention of the registry."""

    def __init__(self) -> None:
        self.phase = "train"
        self.seen: dict[str, set[str]] = {}
        self._hook = None

    def __enter__(self) -> Self:
        import torch

        from lavo_zoo.attention.base import Attention
        from lavo_zoo.attention.ops.dispatch import kernels_used

        def hook(module: Any, args: Any, output: Any) -> None:
            if isinstance(module, Attention):
                used = kernels_used(module)
                name = type(module).__name__ + (f"[{used}]" if used is not None else "")
                self.seen.setdefault(self.phase, set()).add(f"{module.pattern} {name}")

        self._hook = torch.nn.modules.module.register_module_forward_hook(hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self._hook.remove()

    def record(self) -> dict[str, list[str]]:
        return {phase: sorted(names) for phase, names in self.seen.items()}


def cli(*args: str) -> None:
    """One ``lavo-zoo`` command in this process; a non-zero exit is an error (the message went to stderr)."""
    from lavo_zoo.cli import main

    print(f"$ lavo-zoo {' '.join(args)}", flush=True)
    code = main(["--debug", *args])
    if code:
        raise RuntimeError(f"`lavo-zoo {' '.join(args)}` exited with {code}")


def train_overrides(config: str, compile_: bool) -> list[str]:
    out = [f"train.max_steps={STEPS}", "train.max_epochs=null", "train.log_every=1", f"train.eval_every={STEPS}",
           "train.eval_per_epoch=false", f"train.eval_batches={EVAL_BATCHES}", f"train.save_every={STEPS}",
           "train.keep_last=1", "train.num_workers=0", "train.precision=bf16", "train.early_stopping_patience=0"]
    if TOY:
        out += ["train.batch_size=2", "eval.batch_size=2", *TOY_OVERRIDES.get(config.split("/")[0], [])]
    return out + (["train.compile=true"] if compile_ else [])


def losses(run: Path) -> dict[str, Any]:
    """The training losses of a run and whether they are finite and falling (from 10 steps on)."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r["loss"] for r in records if r.get("split") == "train"]
    finite = bool(train) and all(math.isfinite(x) for x in train)
    out: dict[str, Any] = {"losses": train, "finite": finite,
                           "validation": next((r for r in records if r.get("split") == "validation"), None)}
    if len(train) >= 10:
        first, last = sum(train[:5]) / 5, sum(train[-5:]) / 5
        out.update(first5=first, last5=last, falling=last < first)
    else:
        out["falling"] = None  # too few steps to tell (toy size)
    return out


def predict(config: str, run: Path, dev: str) -> dict[str, Any]:
    """The recipe's predictor on the trained checkpoint, on an input of its domain: a summary of what came out."""
    import numpy as np

    import lavo_zoo

    p = lavo_zoo.load(run, device=dev)
    recipe = config.split("/")[0]
    if recipe == "lm":
        text = p.generate("The", max_new_tokens=16, temperature=0)
        return {"call": "generate", "output": text[:80], "ok": isinstance(text, str) and len(text) > 3}
    if recipe == "lra":
        item = "a short review of a film" if p.cfg.data.task == "text" else ("first document", "second document")
        label = p.classify(item)
        return {"call": "classify", "output": label, "ok": 0 <= label < p.cfg.model.num_classes}
    if recipe == "point_cloud":
        ds = p.recipe.build_dataset(p.cfg, "test")
        item = ds[0]
        dense = p.complete(item["partial"][item["partial_mask"]].numpy())
        return {"call": "complete", "output": list(dense.shape), "ok": bool(np.isfinite(dense).all() and len(dense))}
    if recipe == "summarization":
        summary = p.summarize("The council met on Monday. It agreed a new budget for the schools of the town. "
                              "Parents welcomed the decision.\n\nA second article says the budget grows by a tenth.")
        return {"call": "summarize", "output": summary[:80], "ok": isinstance(summary, str)}
    if recipe == "time_series":
        frame = p.forecast(p.recipe.data_path(p.cfg.data))
        values = frame.drop(columns="date").to_numpy(dtype=float)
        return {"call": "forecast", "output": list(values.shape),
                "ok": len(frame) == p.horizon and bool(np.isfinite(values).all())}
    if recipe == "tts":
        wave, rate = p.synthesize("hello there", max_frames=40)
        return {"call": "synthesize", "output": [len(wave), rate], "ok": bool(np.isfinite(wave).all() and len(wave))}
    if recipe == "recall":
        example = p.recipe.build_dataset(p.cfg, "test")[0]
        tokens, asked = example["tokens"].tolist(), (example["targets"] != -100).nonzero()[:, 0].tolist()
        answers = p.answer(tokens, asked)
        return {"call": "answer", "output": answers[:8],
                "ok": len(answers) == len(asked) and all(0 <= a < p.cfg.model.vocab_size for a in answers)}
    raise ValueError(f"no predictor call for {config}")


def point_cloud_agreement(run: Path, dev: str) -> dict[str, Any]:
    """The same predictions scored with autocast on and off (equal), and the checkpoint validated under bf16
    autocast and in fp32 (within :data:`POINT_CLOUD_AGREEMENT`)."""
    import torch

    from lavo_zoo.engine.checkpoint_io import load_model
    from lavo_zoo.engine.precision import autocast
    from lavo_zoo.engine.recipe import to_device

    recipe, cfg, model, _ = load_model(run / "checkpoints" / "last", dev)
    model.eval()
    ds = recipe.build_dataset(cfg, "validation")
    batch = to_device(recipe.collate([ds[i] for i in range(min(4, len(ds)))]), torch.device(dev))
    amp = torch.bfloat16
    with torch.no_grad():
        pred, gt = recipe.predict(model, batch)
        scores = {}
        for name, dtype in (("fp32", None), ("autocast", amp)):
            evaluator = recipe.build_evaluator(cfg)
            with autocast(dtype, dev):
                evaluator.update(pred, gt)
            scores[name] = evaluator.compute()
        validated = {}
        for name, dtype in (("fp32", None), ("autocast", amp)):
            with autocast(dtype, dev):
                _, p2, g2 = recipe.validation_step(model, batch)
            evaluator = recipe.build_evaluator(cfg)
            evaluator.update(p2, g2)
            validated[name] = evaluator.compute()
    same = all(math.isclose(scores["fp32"][k], scores["autocast"][k], rel_tol=1e-6, abs_tol=1e-9)
               for k in scores["fp32"])
    rel = {k: abs(validated["autocast"][k] - validated["fp32"][k]) / max(abs(validated["fp32"][k]), 1e-12)
           for k in validated["fp32"]}
    return {"scored_same_predictions": scores, "same_scores": same, "validated": validated, "validated_rel": rel,
            "ok": same and max(rel.values()) <= POINT_CLOUD_AGREEMENT}


def run_config(config: str, work: Path, dev: str, compile_: bool) -> dict[str, Any]:
    run = work / "runs" / (config.replace("/", "-") + ("-compile" if compile_ else ""))
    record: dict[str, Any] = {"config": config, "steps": STEPS, "compile": compile_, "run": str(run)}
    kernels = KernelLog()
    with Timer() as timer:
        try:
            with time_limit(SECONDS_PER_CONFIG), (kernels if not compile_ else nullcontext()):
                shutil.rmtree(run, ignore_errors=True)
                cli("train", config, "--out", str(run), "--device", dev, *train_overrides(config, compile_))
                record["training"] = losses(run)
                kernels.phase = "eval"
                results = run.parent / f"{run.name}.results.json"
                cli("eval", str(run / "checkpoints" / "last"), "--device", dev, "--out", str(results),
                    "--max-batches", str(EVAL_BATCHES), "--overwrite")
                metrics = json.loads(results.read_text())["metrics"]
                record["eval"] = {k: v["value"] for k, v in metrics.items()}
                kernels.phase = "predict"
                record["predictor"] = predict(config, run, dev)
                if config.startswith("point_cloud/"):
                    kernels.phase = "autocast agreement"
                    record["point_cloud_autocast"] = point_cloud_agreement(run, dev)
        except Exception as e:  # noqa: BLE001 - recorded; the next config goes on
            import traceback

            traceback.print_exc()
            record["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    record["seconds"] = timer.seconds
    record["kernels"] = kernels.record() if not compile_ else "not recorded under torch.compile"
    return judge(record)


def judge(record: dict[str, Any]) -> dict[str, Any]:
    """ok when it trained to finite (and, from 10 steps on, falling) losses, every metric is finite, the predictor
    gave a sound output and the point-cloud scores agree."""
    problems = []
    if "error" in record:
        problems.append(record["error"])
    training = record.get("training", {})
    if training and not training["finite"]:
        problems.append("a training loss is not finite")
    if training.get("falling") is False:
        problems.append(f"the loss did not fall ({training['first5']:.4g} -> {training['last5']:.4g})")
    if any(not math.isfinite(v) for v in record.get("eval", {}).values()):
        problems.append(f"a metric is not finite: {record['eval']}")
    if "predictor" in record and not record["predictor"]["ok"]:
        problems.append(f"the predictor's {record['predictor']['call']} gave {record['predictor']['output']}")
    agreement = record.get("point_cloud_autocast")
    if agreement is not None and not agreement["ok"]:
        problems.append(f"point-cloud scores under autocast differ: same predictions {agreement['same_scores']}, "
                        f"validation {agreement['validated_rel']}")
    return {**record, "status": "FAIL" if problems else "ok", "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="Where to write the records.")
    parser.add_argument("--compile", action="store_true", help=f"Train {COMPILE_CONFIG} with train.compile=true.")
    parser.add_argument("--part", default="1/1", metavar="I/N",
                        help="Run every N-th config from the I-th (run.sh runs the configs in 3 processes).")
    parser.add_argument("configs", nargs="*", help="Configs (default: every recipe's tiny LAVO configs).")
    args = parser.parse_args()
    from gpu_common import device

    dev = str(device())
    work = args.json.parent
    index, parts = (int(x) for x in args.part.split("/"))
    configs = (args.configs or ([COMPILE_CONFIG] if args.compile else CONFIGS))[index - 1::parts]
    part = args.json.with_suffix(".jsonl")
    part.unlink(missing_ok=True)
    records = []
    for config in configs:
        record = run_config(config, work, dev, args.compile)
        append_jsonl(part, record)
        records.append(record)
        kernels = record["kernels"] if isinstance(record["kernels"], str) else \
            "; ".join(f"{k}: {', '.join(v)}" for k, v in record["kernels"].items())
        print(f"{'ok  ' if record['status'] == 'ok' else 'FAIL'} {config} {record['seconds']:.0f} s  "
              f"{'; '.join(record['problems'])}  [{kernels}]", flush=True)
    failed = sum(r["status"] != "ok" for r in records)
    write_json(args.json, {"environment": environment(), "steps": STEPS, "records": records,
                           "counts": {"ok": len(records) - failed, "FAIL": failed}})
    print(f"# recipes{' (compile)' if args.compile else ''}: {len(records) - failed} ok, {failed} failed; "
          f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
