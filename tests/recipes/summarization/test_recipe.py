"""The recipe end to end on a small slice of the built-in corpus: 2 training steps, eval writing the results JSON and
the summaries, `summarize` on the saved checkpoint."""
import json

import pytest

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.cli import main
from lavo_zoo.engine.configs import available_configs, resolve_config
from lavo_zoo.errors import ConfigError
from lavo_zoo.recipes.summarization.builtin import builtin_split, module_examples, stdlib_sources, write_stdlib_corpus
from lavo_zoo.recipes.summarization.cli import summarize
from lavo_zoo.recipes.summarization.data import load_split
from lavo_zoo.recipes.summarization.infer import split_document
from tests.helpers import run_command, score_summaries
from tests.recipes.summarization.helpers import SMALL

CONFIGS = ["tiny-sdpa", "tiny-lavo-noncausal", "tiny-lavo-causal", "tiny-local-noncausal", "tiny-lavo-noncausal-noepe",
           "tiny-lavo-noncausal-noepe-nocd", "multinews-sdpa", "multinews-lavo-noncausal", "multinews-lavo-causal",
           "multinews-local-noncausal", "multinews-lavo-noncausal-noepe", "multinews-lavo-noncausal-noepe-nocd"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The built-in corpus of a few small standard-library modules, at least one in every split."""
    chosen, wanted = [], {"train": 8, "validation": 2, "test": 3}  # examples per split, at least
    for name, path in stdlib_sources():
        split = builtin_split(name)
        if wanted[split] > 0 and path.stat().st_size < 30_000 and "." not in name:
            chosen.append((name, path))
            wanted[split] -= len(module_examples(name, path.read_text()))
    root = tmp_path_factory.mktemp("corpus")
    counts = write_stdlib_corpus(root, chosen)
    assert all(counts.values()), counts
    return root


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "summarization/tiny-lavo-noncausal", f"data.path={corpus}", *SMALL, "--out", str(out),
                 "--max-steps", "2", "--device", "cpu"]) == 0
    return out


def test_every_config_resolves():
    names = [n.split("/", 1)[1] for n in available_configs() if n.startswith("summarization/")]
    assert sorted(names) == sorted(CONFIGS)
    for name in CONFIGS:
        recipe, cfg = resolve_config(f"summarization/{name}")
        recipe.resolve(cfg)
        assert cfg.model.vocab_size == 50261 and cfg.model.pad_id == 50259
    _, cfg = resolve_config("summarization/multinews-lavo-noncausal-noepe-nocd")
    assert cfg.model.attention.encoder_self == AttentionSpec("lavo", {"num_bases": 64, "window_size": 16,
                                                                      "position_encoding": False,
                                                                      "context_dissection": False})
    assert cfg.model.attention.decoder_self == AttentionSpec("sdpa") and cfg.data.max_source_tokens == 4096


def test_lengths_that_outgrow_the_positions_are_refused():
    recipe, cfg = resolve_config("summarization/tiny-sdpa", ["eval.max_len_a=1.0"])
    with pytest.raises(ConfigError, match="max_target_positions"):
        recipe.resolve(cfg)


def test_two_training_steps_and_eval_writes_results_and_summaries(trained, corpus, tmp_path):
    metrics = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    train_steps = [m for m in metrics if m.get("split") == "train"]
    assert [m["step"] for m in train_steps] == [1, 2] and all(m["loss"] > 0 for m in train_steps)
    results_file = tmp_path / "out" / "results.json"
    assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results_file),
                 "--device", "cpu"]) == 0
    results = json.loads(results_file.read_text())
    assert set(results["metrics"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.summaries.jsonl").read_text().splitlines()]
    test_examples = load_split(corpus, "test").examples
    assert results["num_samples"] == len(rows) == len(test_examples)
    assert [r["id"] for r in rows] == [e.id for e in test_examples]
    assert [r["reference"] for r in rows] == [e.summary for e in test_examples]
    # the metrics are the ROUGE of the written summaries
    scores = score_summaries([r["hypothesis"] for r in rows], [r["reference"] for r in rows])
    assert {k: v["value"] for k, v in results["metrics"].items()} == pytest.approx(scores)
    assert results["outputs"] == [str(tmp_path / "out" / "results.summaries.jsonl")]


def test_eval_never_replaces_a_summaries_file_without_overwrite(trained, tmp_path, capsys):
    mine = tmp_path / "results.summaries.jsonl"
    mine.write_text("my own summaries\n")
    args = ["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(tmp_path / "results.json"),
            "--device", "cpu", "--max-batches", "1"]
    assert main(args) == 2
    assert f"--out {mine} already exists" in capsys.readouterr().err
    assert mine.read_text() == "my own summaries\n" and not (tmp_path / "results.json").exists()
    assert main([*args, "--overwrite"]) == 0
    assert json.loads(mine.read_text().splitlines()[0])["hypothesis"] is not None


def test_summarize_a_saved_checkpoint(trained, tmp_path):
    import lavo_zoo

    text = "def area(r):\n    return 3.14 * r * r\n\ndef perimeter(r):\n    return 2 * 3.14 * r\n"
    (tmp_path / "in.txt").write_text(text)
    summarizer = lavo_zoo.load(trained, device="cpu")  # the run directory: its newest checkpoint
    expected = summarizer.summarize(text)
    assert summarizer.summarize([text, split_document(text)]) == [expected, expected]  # batched, text or articles
    code, out = run_command(summarize, [str(trained / "checkpoints" / "last"), "--input", str(tmp_path / "in.txt"),
                                        "--device", "cpu"])
    assert code == 0 and out == expected + "\n"
    code, out = run_command(summarize, [str(trained / "checkpoints" / "last"), "--device", "cpu"],
                            input=text.replace("\n\n", "\n|||||\n"))  # standard input, ||||| separators
    assert code == 0 and out == expected + "\n"
    code, out = run_command(summarize, [str(trained / "checkpoints" / "last"), "--input", str(tmp_path / "none")])
    assert code == 2 and "no such file" in out
    # one document per line (Multi-News .src), one summary per line: what `score rouge --pred` reads
    (tmp_path / "test.src").write_text("def area(r): ||||| return 3.14 * r * r\ndef f(x): NEWLINE_CHAR return x\n")
    code, out = run_command(summarize, [str(trained), "--input", str(tmp_path / "test.src"), "--per-line",
                                        "--out", str(tmp_path / "test.hyp")])
    assert code == 0 and "2 summaries" in out
    expected = summarizer.summarize([split_document(line) for line in (tmp_path / "test.src").read_text().splitlines()])
    assert split_document("def area(r): ||||| return 3.14 * r * r") == ["def area(r):", "return 3.14 * r * r"]
    assert (tmp_path / "test.hyp").read_text().splitlines() == [" ".join(e.split()) for e in expected]


def test_split_document_splits_on_separators_or_blank_lines():
    assert split_document("a\nb\n\nc\n") == ["a\nb", "c"]
    assert split_document("a\n\nb ||||| c NEWLINE_CHAR d") == ["a\n\nb", "c\nd"]
