"""The evaluator protocol (evaluators/base.py): each metric's direction is declared once, in ``higher_is_better``,
and a metric of a group (``<metric>@<group>``) has its metric's."""
from typing import ClassVar

import pytest

from lavo_zoo.evaluators.base import Evaluator


class Grouped(Evaluator):
    higher_is_better: ClassVar[dict[str, bool]] = {"accuracy": True, "loss": False, "loss@raw": True}

    def reset(self) -> None:
        self.values: dict[str, float] = {}

    def update(self, predictions, targets) -> None:
        self.values.update(predictions)

    def compute(self) -> dict[str, float]:
        return dict(self.values)


def test_a_grouped_metric_has_its_metrics_direction_and_an_undeclared_one_is_refused():
    ev = Grouped()
    ev.update({"accuracy": 1, "accuracy@dist:9-16": 0.5, "loss@2048": 2.0, "loss@raw": 3.0}, None)
    assert {k: v["higher_is_better"] for k, v in ev.results().items()} == {
        "accuracy": True, "accuracy@dist:9-16": True, "loss@2048": False, "loss@raw": True}
    ev.update({"mystery@x": 1.0}, None)
    with pytest.raises(KeyError, match="Grouped does not declare a direction for metric 'mystery@x'"):
        ev.results()
