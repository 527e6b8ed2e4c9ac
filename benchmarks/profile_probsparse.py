"""Per-part timing of ProbSparse at D=256, H=4 (d=64), B=1, fp32, one thread: the sparsity measurement and the
causal selection of an earlier implementation (OLD_FILE) against the current one, and a whole noncausal fwd+bwd of
each. Min of several runs (robust to a loaded machine)::

    git show cc6d153~1:zoo/attention/probsparse.py > /tmp/probsparse_old.py
    OMP_NUM_THREADS=1 python benchmarks/profile_probsparse.py /tmp/probsparse_old.py
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import lavo_zoo.attention.probsparse as new


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def profile(old: dict, length: int) -> str:
    q, k = torch.randn(1, 4, length, 64), torch.randn(1, 4, length, 64)  # [B, H, L, d]
    u = new._budget(5, length)
    idx = torch.randint(length, (length, u))
    score = torch.randn(1, 4, length)
    x = torch.randn(1, length, 256)
    attn_old = old["ProbSparseAttention"](256, 4, "noncausal")
    attn_new = new.ProbSparseAttention(256, 4, "noncausal")
    attn_new.load_state_dict(attn_old.state_dict())
    times = [best_of(lambda: old["ProbSparseAttention"]._sparsity(q, k, idx), 5),
             best_of(lambda: new.ProbSparseAttention._sparsity(q, k, idx), 5),
             best_of(lambda: old["_causal_active"](score, u), 3), best_of(lambda: new._causal_active(score, u), 5),
             best_of(lambda: attn_old(x).sum().backward(), 3), best_of(lambda: attn_new(x).sum().backward(), 3)]
    ms = [f"{t * 1e3:8.1f}" for t in times]
    return (f"L={length:6d} U={u:3d} | sparsity old {ms[0]} new {ms[1]} ms | causal selection old {ms[2]} "
            f"new {ms[3]} ms | noncausal fwd+bwd old {ms[4]} new {ms[5]} ms")


def main() -> None:
    torch.set_num_threads(1)
    source = Path(sys.argv[1]).read_text().replace('@register_attention("probsparse")', "")
    old: dict = {}
    exec(compile(source, sys.argv[1], "exec"), old)  # noqa: S102 - the project's own earlier source file
    for length in (1024, 2048, 4096, 8192, 16384):
        print(profile(old, length), flush=True)


if __name__ == "__main__":
    main()
