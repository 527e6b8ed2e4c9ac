"""Step (c, local) of the device check: ``local`` attention (the flex_attention window on CUDA) at 10 distinct
lengths, as variable-length batches give it (summarization, TTS, evaluation), forward and backward under bf16
autocast, each with a padded batch.

Recorded per length: the time of the first call (a compile shows there), the peak memory above the start, and the
bytes that dense [B, H, T, T] bf16 scores would take. Passes when every length ran and the peak stayed under a
quarter of the dense scores at each (a window kernel holds O(T) memory; flex_attention that fell back to eager
after its recompile limit materialises the scores). At toy size the lengths are too short to tell (recorded, not
judged). Usage: ``python benchmarks/gpu/check_local.py --json OUT.json``; exit 1 on a failure.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_common import TOY, Timer, append_jsonl, device, environment, write_json

LENGTHS = [40 + 7 * i for i in range(10)] if TOY else [16000 + 517 * i for i in range(10)]
D, H, W, B = (32, 2, 4, 2) if TOY else (768, 12, 16, 2)
DENSE_SHARE = 0.25  # the peak must stay under this share of the dense scores' bytes
JUDGED_FROM = 64 * 2**20  # dense scores smaller than this cannot be told from a window kernel's working memory


def main() -> int:
    import torch

    from lavo_zoo.attention import build_attention
    from lavo_zoo.attention.ops.window import WINDOW_KERNELS
    from lavo_zoo.engine.memory import PeakMemory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    dev = device()
    part = args.json.with_suffix(".jsonl")
    part.unlink(missing_ok=True)
    torch.manual_seed(0)
    attn = build_attention("local", D, H, "causal", window_size=W).to(dev)
    records = []
    for T in LENGTHS:
        x = torch.randn(B, T, D, device=dev, requires_grad=True)
        mask = torch.ones(B, T, dtype=torch.bool, device=dev)
        mask[1, T - T // 7:] = False  # the shorter sequence of the batch, padded
        chosen = WINDOW_KERNELS.choose(torch.empty(1, H, T, D // H, device=dev), training=True).window.name
        record = {"length": T, "flex": chosen == "flex",
                  "dense_scores_bytes": B * H * T * T * 2}
        try:
            with Timer() as timer, PeakMemory(dev) as peak:
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    y = attn(x, mask)
                y.float().square().mean().backward()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
            record.update(seconds=timer.seconds, peak_bytes=peak.bytes, memory_method=peak.method,
                          finite=bool(torch.isfinite(y).all() and torch.isfinite(x.grad).all()))
            judged = record["dense_scores_bytes"] >= JUDGED_FROM
            record["status"] = ("ok" if record["finite"] and (not judged or peak.bytes < DENSE_SHARE *
                                                               record["dense_scores_bytes"]) else "FAIL")
            if not judged:
                record["note"] = "too short to tell a window kernel from dense scores (toy size)"
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: recorded, the next length goes on
            record.update(status="FAIL", error=f"{type(e).__name__}: {str(e)[:300]}")
        del x
        append_jsonl(part, record)
        records.append(record)
        print(f"{record['status']:<4} local T={T:<6} flex={record['flex']} first call {record.get('seconds', 0):.2f} s"
              f"  peak {record.get('peak_bytes', 0) / 2**20:.0f} MiB  (dense scores "
              f"{record['dense_scores_bytes'] / 2**20:.0f} MiB) {record.get('error', '')}", flush=True)
    failed = sum(r["status"] != "ok" for r in records)
    write_json(args.json, {"environment": environment(), "shape": {"embed_dim": D, "heads": H, "window": W,
                                                                   "batch": B},
                           "dense_share": DENSE_SHARE, "records": records})
    print(f"# local at {len(LENGTHS)} lengths: {len(records) - failed} ok, {failed} failed; wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
