"""Loaders in both layouts (with every refusal), the built-in corpus generator, tokenized examples and batches."""
import logging

import pytest
import torch

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.summarization.data import (
    SummarizationDataset,
    Vocabulary,
    builtin_split,
    collate,
    load_split,
    module_examples,
    stdlib_sources,
    write_stdlib_corpus,
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


MODULE = '''"""Tools for greeting people politely.

More text that is not part of the summary.
"""
import sys


def greet(name):
    """Return a greeting for the given name."""
    text = "hello " + name
    text = polish(text)
    return text


def polish(text):
    """Capitalise the text."""
    return text.capitalize()


class Greeter:
    """Greets a list of people one by one."""

    prefix = "dear"

    def __init__(self, names):
        """Store the names."""
        self.names = names

    def run(self):
        """Greet every stored name and count them."""
        count = 0
        for name in self.names:
            print(greet(name))
            count += 1
        return self.check(count)

    def check(self, count):
        return count
'''


def test_module_examples_summarise_code_by_its_docstrings():
    examples = {e.id: e for e in module_examples("greetings", MODULE)}
    assert set(examples) == {"greetings", "greetings.greet", "greetings.Greeter", "greetings.Greeter.run"}
    module = examples["greetings"]
    assert module.summary == "Tools for greeting people politely."
    assert module.articles[0] == ("def greet(name):\n    text = 'hello ' + name\n    text = polish(text)\n"
                                  "    return text")
    assert len(module.articles) == 3 and all('"""' not in a and "Capitalise" not in a for a in module.articles)
    cls = examples["greetings.Greeter"]
    assert cls.summary == "Greets a list of people one by one."
    assert cls.articles[0] == "class Greeter:\n    prefix = 'dear'" and len(cls.articles) == 4
    assert examples["greetings.Greeter.run"].articles[1].startswith(
        "def check(self, count)")  # the method it calls, from the same class
    assert examples["greetings.greet"].articles[1] == "def polish(text):\n    return text.capitalize()"


def test_builtin_corpus_round_trips_through_the_multinews_layout(tmp_path):
    sources = [s for s in stdlib_sources() if s[0] in ("textwrap", "shlex", "bisect")]
    assert len(sources) == 3
    counts = write_stdlib_corpus(tmp_path / "builtin", sources)
    assert sorted(p.name for p in (tmp_path / "builtin").iterdir()) == [
        "test.src", "test.tgt", "train.src", "train.tgt", "val.src", "val.tgt"]
    expected = {}
    for module, path in sources:
        for e in module_examples(module, path.read_text()):
            expected.setdefault(builtin_split(module), []).append(e)
    for split, examples in expected.items():
        loaded = load_split(tmp_path / "builtin", split).examples
        assert counts[split] == len(examples) == len(loaded)
        for original, back in zip(examples, loaded):
            assert back.summary == original.summary
            # one example per line: newlines become NEWLINE_CHAR, indentation is not kept
            assert back.articles == ["\n".join(line.strip() for line in a.splitlines()) for a in original.articles]


def test_builtin_split_is_by_module_and_roughly_90_5_5():
    names = [name for name, _ in stdlib_sources()]
    splits = [builtin_split(n) for n in names]
    assert splits == [builtin_split(n) for n in names]
    for split, lo, hi in (("train", 0.8, 0.97), ("validation", 0.02, 0.1), ("test", 0.02, 0.1)):
        assert lo < splits.count(split) / len(splits) < hi, split


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
