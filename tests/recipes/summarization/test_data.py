"""Loaders in both layouts (with every refusal), tokenized examples and batches."""
import logging

import pytest
import torch

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.summarization.data import (
    SummarizationDataset,
    Vocabulary,
    collate,
    load_split,
)
from tests.recipes.summarization.helpers import write_jsonl, write_multinews

SRC = ("Storm hits the coast. NEWLINE_CHAR NEWLINE_CHAR Thousands lose power. ||||| Officials urge people to stay "
       "home. |||||")
TGT = "– A storm hit the coast and thousands lost power."
ARTICLES = ["Storm hits the coast.\n\nThousands lose power.", "Officials urge people to stay home."]
SUMMARY = "A storm hit the coast and thousands lost power."


def multinews(tmp_path, train=None, **extra):
    rows = {"train": train or [(SRC, TGT), (" ||||| ", "– empty source"), ("Second story.", "– Second.")],
            "val": [(SRC, TGT)], "test": [(SRC, TGT)], **extra}
    return write_multinews(tmp_path / "mn", rows)


def test_multinews_layout(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        data = load_split(multinews(tmp_path), "train")
    assert [e.articles for e in data.examples] == [ARTICLES, ["Second story."]]
    assert [e.summary for e in data.examples] == [SUMMARY, "Second."]
    assert [e.id for e in data.examples] == ["train:1", "train:3"]
    assert data.skipped == 1 and "skipped 1 example" in caplog.text
    assert load_split(tmp_path / "mn", "validation").examples[0].articles == ARTICLES  # val.src


def test_jsonl_layout_reads_the_same_examples(tmp_path):
    rows = [{"document": SRC.replace(" NEWLINE_CHAR ", "\n"), "summary": TGT, "extra": 1},
            {"document": "", "summary": "x"}]
    root = write_jsonl(tmp_path / "js", {"train": rows, "validation": rows[:1], "test": rows[:1]})
    data = load_split(root, "train")
    assert [(e.articles, e.summary) for e in data.examples] == [(ARTICLES, SUMMARY)] and data.skipped == 1
    assert load_split(root, "validation", "jsonl").examples[0].id == "validation:1"


def test_format_is_detected_and_can_be_forced(tmp_path):
    root = multinews(tmp_path)
    write_jsonl(root, {"train": [{"document": "json doc", "summary": "json summary"}]})
    assert load_split(root, "train").examples[0].summary == SUMMARY  # .src wins in auto
    assert load_split(root, "train", "jsonl").examples[0].summary == "json summary"
    with pytest.raises(DataError, match=r"split 'test' is missing: expected .*test\.jsonl"):
        load_split(root, "test", "jsonl")
    with pytest.raises(DataError, match="neither Multi-News files"):
        load_split(tmp_path, "train")
    with pytest.raises(DataError, match="does not exist"):
        load_split(tmp_path / "nowhere", "train")


def test_refuses_differing_line_counts(tmp_path):
    root = multinews(tmp_path)
    (root / "train.tgt").write_text("– one\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.src has 3 lines but .*train\.tgt has 1.*line 2 of .*train\.src"):
        load_split(root, "train")


def test_refuses_an_empty_split(tmp_path):
    root = multinews(tmp_path, test=[])
    with pytest.raises(DataError, match=r"test\.src is empty"):
        load_split(root, "test")
    root = multinews(tmp_path, test=[("|||||", "– x"), ("text", "– ")])
    with pytest.raises(DataError, match=r"split 'test' is empty.*2 empty skipped"):
        load_split(root, "test")
    js = write_jsonl(tmp_path / "js", {"train": []})
    with pytest.raises(DataError, match=r"train\.jsonl is empty"):
        load_split(js, "train")


def test_refuses_a_line_that_is_not_utf8(tmp_path):
    root = multinews(tmp_path)
    (root / "train.tgt").write_bytes("– ok\n".encode() + b"caf\xe9\n" + "– ok\n".encode())
    with pytest.raises(DataError, match=r"train\.tgt, line 2: not UTF-8 \(byte 0xe9 at column 4\)"):
        load_split(root, "train")


def test_refuses_json_lines_without_the_fields(tmp_path):
    root = tmp_path / "js"
    write_jsonl(root, {"train": [{"document": "d", "summary": "s"}, {"text": "d", "summary": "s"}]})
    with pytest.raises(DataError, match=r"train\.jsonl, line 2: .*no string field 'document'.*keys: text, summary"):
        load_split(root, "train")
    (root / "train.jsonl").write_text('{"document": "d", "summary": "s"}\n{"document": "d", "summary": 3}\n')
    with pytest.raises(DataError, match=r"line 2: .*'summary'"):
        load_split(root, "train")
    (root / "train.jsonl").write_text('{"document": "d", "summary": "s"}\n[1, 2]\n{oops\n')
    with pytest.raises(DataError, match=r"line 2: expected a JSON object"):
        load_split(root, "train")
    (root / "train.jsonl").write_text('{oops\n')
    with pytest.raises(DataError, match=r"line 1: not valid JSON"):
        load_split(root, "train")


def test_dataset_tokenizes_with_separators_bos_eos_and_truncation(tmp_path):
    vocab = Vocabulary()
    examples = load_split(multinews(tmp_path), "train").examples
    item = SummarizationDataset(examples, vocab, 1000, 1000)[0]
    expected_source = [*vocab.encode(ARTICLES[0]), vocab.sep, *vocab.encode(ARTICLES[1])]
    assert item["source"].tolist() == expected_source
    assert item["target"].tolist() == [vocab.bos, *vocab.encode(SUMMARY), vocab.eos]
    assert vocab.decode(item["target"][1:].tolist()) == SUMMARY and item["reference"] == SUMMARY
    short = SummarizationDataset(examples, vocab, 5, 3)
    assert short[0]["source"].tolist() == expected_source[:5] and len(short[0]["target"]) == 5
    batch = collate([short[0], SummarizationDataset(examples, vocab, 1000, 1000)[1]], pad=vocab.pad)
    assert batch["source"].shape == (2, 5) and batch["ids"] == ["train:1", "train:3"]
    lengths = batch["source_mask"].sum(1).tolist()
    assert lengths == [5, len(vocab.encode("Second story."))]
    assert torch.all(batch["source"][1, lengths[1]:] == vocab.pad)
    with pytest.raises(DataError, match="must be positive"):
        SummarizationDataset(examples, vocab, 0, 3)
