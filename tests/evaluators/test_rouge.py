"""The ROUGE evaluator against the official ROUGE-1.5.5 script, hand-computed cases and the `score rouge` command."""
import json
from pathlib import Path

import pytest

from lavo_zoo.evaluators import EVALUATORS, build_evaluator
from lavo_zoo.evaluators.rouge import Rouge, rouge_f1, split_sentences
from tests.helpers import score_summaries

FIXTURES = Path(__file__).resolve().parent / "fixtures"

PAIRS = [json.loads(line) for line in (FIXTURES / "rouge_pairs.jsonl").read_text().splitlines()]
GOLDEN = json.loads((FIXTURES / "rouge155_golden.json").read_text())


@pytest.mark.parametrize("row", PAIRS, ids=[r["id"] for r in PAIRS])
def test_each_example_matches_rouge155(row):
    """rouge1 / rouge2 / rougeLsum F1 of every fixture pair = ROUGE-1.5.5's (printed to 5 decimals in [0, 1])."""
    ours = rouge_f1(row["hypothesis"], row["reference"])
    for name, value in GOLDEN["f1"][row["id"]].items():
        assert ours[name] == pytest.approx(100 * value, abs=6e-4), name


def test_average_is_the_mean_over_examples_of_rouge155():
    scores = score_summaries([r["hypothesis"] for r in PAIRS], [r["reference"] for r in PAIRS])
    for name in ("rouge1", "rouge2", "rougeLsum"):
        expected = 100 * sum(GOLDEN["f1"][r["id"]][name] for r in PAIRS) / len(PAIRS)
        assert scores[name] == pytest.approx(expected, abs=6e-4)
        # the script's own Average_F is a bootstrap mean: close to, not equal to, the plain mean
        assert scores[name] == pytest.approx(100 * GOLDEN["average_f_printed"][name], abs=0.2)


def test_hand_computed_ngrams_and_lcs():
    # hyp: the cat sat on the mat / ref: the cat was on the mat
    # unigrams: the x2, cat, on, mat = 5 of 6 each side; bigrams: the-cat, on-the, the-mat = 3 of 5; LCS = 5
    s = rouge_f1("The cat sat on the mat.", "The cat was on the mat.")
    assert s["rouge1"] == pytest.approx(100 * 5 / 6)
    assert s["rouge2"] == pytest.approx(100 * 3 / 5)
    assert s["rougeL"] == pytest.approx(100 * 5 / 6)


def test_summary_level_lcs_is_per_reference_sentence_union():
    # two sentences in swapped order: one LCS over the whole text finds 2 of 4 tokens, the union LCS of each
    # reference sentence against the candidate sentences finds all 4
    s = rouge_f1("Dogs bark. Cats sleep.", "Cats sleep. Dogs bark.")
    assert s["rougeL"] == pytest.approx(50.0)
    assert s["rougeLsum"] == pytest.approx(100.0)
    # Lin (2004), section 3.2: r = w1..w5, c = [w1 w2 w6 w7 w8], [w1 w3 w8 w9 w5]: union LCS 4, R 4/5, P 4/10
    s = rouge_f1("Wa wb wf wg wh. Wa wc wh wi we.", "Wa wb wc wd we.")
    r, p = 4 / 5, 4 / 10
    assert s["rougeLsum"] == pytest.approx(100 * 2 * r * p / (r + p))


def test_rouge_score_published_example_with_stemming():
    # rouge-score's README example: "jumps" is stemmed on both sides; 6 shared unigrams (P 6/8, R 6/9), LCS 5
    s = rouge_f1("The quick brown dog jumps on the log.", "The quick brown fox jumps over the lazy dog")
    assert s["rouge1"] == pytest.approx(100 * 0.7058823529411765)
    assert s["rougeL"] == pytest.approx(100 * 0.5882352941176471)


def test_sentence_splitter_keeps_abbreviations_and_line_breaks():
    assert split_sentences("Dr. Smith flew to the U.S. on Monday. He stayed.") == [
        "Dr. Smith flew to the U.S. on Monday.", "He stayed."]
    assert split_sentences("first line without stop\nsecond line") == ["first line without stop", "second line"]


def test_evaluator_accumulates_and_is_registered():
    assert "rouge" in EVALUATORS.names()
    one, two = build_evaluator("rouge"), Rouge()
    one.update([r["hypothesis"] for r in PAIRS], [r["reference"] for r in PAIRS])
    for r in PAIRS:
        two.update([r["hypothesis"]], [r["reference"]])
    assert one.compute() == pytest.approx(two.compute())
    assert one.num_samples == len(PAIRS)
    assert all(v["higher_is_better"] for v in one.results().values())
    with pytest.raises(ValueError, match="2 predictions for 1"):
        one.update(["a", "b"], ["c"])
