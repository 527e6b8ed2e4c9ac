"""Each cell's step time and step memory do not depend on the order the cells run in: the first cell of a process pays
for what happens once (here a first step that sleeps and touches 256 MiB), and no column may show it."""
from __future__ import annotations

import csv
import time

from lavo_zoo.compare import run_study, write_table
from lavo_zoo.compare.steps import StepMeter
from tests.compare.helpers import FIRST_STEP_BYTES, SeqRecipe, a_study

COST_S = 0.5


def test_the_first_cells_warm_up_is_in_no_column(study, tmp_path):
    for order in (["sdpa", "local"], ["local", "sdpa"]):
        SeqRecipe.calls, SeqRecipe.first_step_cost_s = 0, COST_S
        out = tmp_path / "-".join(order)
        records = run_study(a_study(study, out, order, [1, 2], options={"local": {"window_size": 3}}))
        assert records[0].attention == order[0] and records[0].train_time_s >= COST_S  # the first cell paid
        for r in records:
            assert r.step_time_s < COST_S / 2, (order, r.attention, r.seed)
            assert r.step_memory_bytes < FIRST_STEP_BYTES / 2, (order, r.attention, r.seed)
            assert r.measured_steps == 1 and r.memory_method  # 3 steps: warm-up, memory, time
        write_table(records, out, "order")
        rows = list(csv.DictReader((out / "table.csv").open()))
        assert [row["attention"] for row in rows] == order
        assert all(float(row["step_time_s"]) < COST_S / 2 for row in rows)
        assert all(float(row["step_memory_bytes"]) < FIRST_STEP_BYTES / 2 for row in rows)
        assert "| step time (ms) | step memory (MiB) |" in (out / "table.md").read_text()


def test_the_step_meter_leaves_the_warm_up_out_and_measures_nothing_without_a_step_after_it():
    def session(costs: list[float]) -> dict:
        meter = StepMeter("cpu")
        for step, cost in enumerate(costs, 1):
            meter.step_started(step)
            time.sleep(cost)
            meter.step_ended(step)
        return meter.result()

    assert session([0.0])["step_time_s"] is None and session([0.0])["step_memory_bytes"] is None
    two = session([0.3, 0.0])  # the second step is the only one after the warm-up: its time is the step time
    assert two["step_time_s"] < 0.15 and two["measured_steps"] == 1 and two["step_memory_bytes"] is not None
    many = session([0.3, 0.0, 0.0, 0.2, 0.0])  # the median of steps 3..5
    assert many["step_time_s"] < 0.1 and many["measured_steps"] == 3
