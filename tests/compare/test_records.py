"""Cell records and their row labels."""
from __future__ import annotations

import pytest

from lavo_zoo.compare import CellRecord, summarise


def test_collected_studies_that_share_an_attention_get_rows_told_apart_by_their_settings(tmp_path):
    def cell(seed: int, extra: list[str], config: str = "tts/tiny-sdpa", value: float = 1.0) -> CellRecord:
        return CellRecord(attention="lavo", seed=seed, config=config, metrics={"mcd": {"value": value + seed,
                          "higher_is_better": False}},
                          overrides=["eval.max_frames=1000", *extra, f"train.seed={seed}"])

    records = [cell(s, ["model.attention.decoder_self.window_size=8"]) for s in (1, 2)] + \
        [cell(s, ["model.attention.decoder_self.window_size=32"], value=5.0) for s in (1, 2)]
    rows, _ = summarise(records)
    assert [(r.label, r.seeds) for r in rows] == [("lavo (window_size=8)", 2), ("lavo (window_size=32)", 2)]
    assert rows[1].metrics["mcd"].mean == pytest.approx(6.5)
    records = [cell(1, [], config="summarization/tiny-lavo-noncausal"), cell(1, [], config="summarization/tiny-sdpa")]
    assert [r.label for r in summarise(records)[0]] == ["lavo (summarization/tiny-lavo-noncausal)",
                                                        "lavo (summarization/tiny-sdpa)"]
    same = [cell(s, ["x.window_size=8"]) for s in (1, 2, 3)]  # one study over seeds: one row, plain label
    assert [r.label for r in summarise(same)[0]] == ["lavo"]
