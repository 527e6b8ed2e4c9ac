"""``lavo-zoo bench lra``'s sweep order and table: with several rounds, each mechanism's ratio is the
median of its per-round ratios against the softmax run next to it (a drifting machine is compared with itself)."""
from __future__ import annotations

from lavo_zoo.bench import lra


def _record(name: str, n: int, rnd: int, steps: float | None, mib: float = 10.0) -> dict:
    if steps is None:
        return {"attention": name, "length": n, "round": rnd, "error": "RuntimeError: boom"}
    return {"attention": name, "length": n, "round": rnd, "steps_per_s": steps, "peak_mib": mib}


def test_rounds_put_every_mechanism_next_to_softmax() -> None:
    sweep = lra.sweep
    assert sweep(["sdpa", "lavo"], [1024, 2048], 1) == [(0, "sdpa", 1024), (0, "sdpa", 2048), (0, "lavo", 1024),
                                                         (0, "lavo", 2048)]
    assert sweep(["sdpa", "lavo"], [1024, 2048], 2) == [
        (0, "sdpa", 1024), (0, "lavo", 1024), (0, "sdpa", 2048), (0, "lavo", 2048),
        (1, "sdpa", 1024), (1, "lavo", 1024), (1, "sdpa", 2048), (1, "lavo", 2048)]


def test_table_takes_the_median_of_per_round_ratios() -> None:
    table = lra.table
    # the machine drifts: round 1 is twice as fast for both; ratios 3, 2, 2 -> median 2, although the median
    # speeds (3 / 1) would say 3x
    results = [_record("sdpa", 4096, 0, 1.0, 35), _record("lavo", 4096, 0, 3.0, 36),
               _record("sdpa", 4096, 1, 2.0, 35), _record("lavo", 4096, 1, 4.0, 36),
               _record("sdpa", 4096, 2, 1.0, 35), _record("lavo", 4096, 2, 2.0, 36),
               _record("abc", 4096, 0, None)]
    lines = table(results, [4096]).splitlines()
    assert lines[0] == "| attention | 4K steps/s | 4K peak MiB |"
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[2:]}
    assert rows["lavo"] == "| lavo | 3 (2.00x, 2.00-3.00) | 36 (1.03x, 1.03-1.03) |"
    assert rows["sdpa"] == "| sdpa | 1 (1.00x, 1.00-1.00) | 35 (1.00x, 1.00-1.00) |"
    assert rows["abc"] == "| abc | failed | failed |"
    single = table([_record("sdpa", 1024, 0, 2.0, 9), _record("lavo", 1024, 0, 1.0, 15)], [1024])
    assert single.splitlines()[3] == "| lavo | 1 (0.50x) | 15 (1.67x) |"
