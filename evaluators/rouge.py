"""ROUGE as the paper reports it (official ROUGE-1.5.5 with Porter stemming), through the ``rouge-score`` package.

Every summary is split into sentences by pysbd (an offline rule-based splitter; existing line breaks are kept as
sentence breaks) and the sentences are joined by newlines, so that ``rougeLsum`` is ROUGE-1.5.5's summary-level
LCS (the union LCS of each reference sentence against all candidate sentences). ``rouge1``, ``rouge2`` and
``rougeL`` (LCS over the whole summary as one sequence) do not depend on the split. Each metric is the F1 of one
example, x 100, averaged over the examples (the "Average_F" that ROUGE-1.5.5 prints).

Known difference from the Perl script: ROUGE-1.5.5 keeps "-" as a token of its own ("well-known" -> "well - known")
while rouge-score drops it, so hyphenated text scores slightly differently; everything else (lowercasing, the
non-alphanumeric split, Porter stemming of tokens longer than 3 characters) is the same.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from lavo_zoo.atomic import write_file
from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, input_path
from lavo_zoo.formats.multinews import clean_summary
from lavo_zoo.formats.text import holds_json_objects, json_rows, read_lines

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (pysbd, English), each stripped; line breaks in ``text`` always end a sentence."""
    segmenter = _segmenter()
    sentences = []
    for line in text.splitlines():
        if line.strip():
            sentences.extend(s.strip() for s in segmenter.segment(line) if s.strip())
    return sentences


def sentences_on_lines(text: str) -> str:
    """``text`` with one sentence per line, as ``rougeLsum`` (and ROUGE-1.5.5's SPL input) wants it."""
    return "\n".join(split_sentences(text))


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def rouge_f1(hypothesis: str, reference: str) -> dict[str, float]:
    """F1 x 100 of one hypothesis against one reference, for each of :data:`ROUGE_TYPES`."""
    scores = _scorer().score(sentences_on_lines(reference), sentences_on_lines(hypothesis))  # (target, prediction)
    return {name: 100.0 * scores[name].fmeasure for name in ROUGE_TYPES}


@register_evaluator("rouge")
class Rouge(Evaluator):
    """ROUGE-1/2/L/Lsum F1 x 100 (rouge-score, Porter stemming, pysbd sentences), averaged over examples.

    ``update(predictions, targets, ids=None)``: generated summaries and reference summaries, two equally long
    sequences of strings (``ids`` name the examples, default: their running number). ``num_samples`` counts
    examples. With ``keep_summaries=True`` every (id, hypothesis, reference) is kept in ``summaries`` and
    :meth:`save_outputs` writes them as JSON lines beside a results file.
    """

    higher_is_better: ClassVar[dict[str, bool]] = dict.fromkeys(ROUGE_TYPES, True)
    files = ("--pred: generated summaries, one per line (UTF-8), or the JSON lines `eval` writes (fields "
             "'hypothesis' and 'reference'; then no --ref); --ref: the reference summaries, one per line, aligned "
             "(a Multi-News .tgt file works as is)")

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> Rouge:
        pred = input_path(pred, "--pred")
        if ref is None:
            lines = read_lines(pred)  # once: a path may be a pipe
            if not holds_json_objects(lines):  # by content: JSON lines in a .txt or from a pipe are read as such
                raise UsageError(f"--pred {pred}: without --ref, give the JSON lines `lavo-zoo eval` writes "
                                 "(<results>.summaries.jsonl); else add --ref with the references")
            hypotheses, references = read_pairs(pred, lines)
        else:
            ref = input_path(ref, "--ref")
            sides = []
            for option, path in (("--pred", pred), ("--ref", ref)):
                lines = read_lines(path)  # once: a path may be a pipe
                if holds_json_objects(lines):
                    raise UsageError(f"{option} {path} holds JSON, not one summary per line; the JSON lines `lavo-zoo "
                                     "eval` writes hold both sides: score them alone (lavo-zoo score rouge --pred "
                                     "FILE.jsonl, without --ref)")
                sides.append([clean_summary(line) for line in lines])
            hypotheses, references = sides
            if len(hypotheses) != len(references):
                raise DataError(f"--pred {pred} has {len(hypotheses)} lines but --ref {ref} has {len(references)}: "
                                "give one summary per line in both, in the same order")
        if not hypotheses:
            raise DataError(f"no summaries to score in {pred}")
        evaluator = cls()
        evaluator.update(hypotheses, references)
        return evaluator

    def __init__(self, keep_summaries: bool = False) -> None:
        self.keep_summaries = keep_summaries
        super().__init__()

    def reset(self) -> None:
        self.totals = dict.fromkeys(ROUGE_TYPES, 0.0)
        self.num_samples = 0
        self.summaries: list[dict[str, str]] = []

    def update(self, predictions: Sequence[str], targets: Sequence[str], ids: Sequence[str] | None = None) -> None:
        if isinstance(predictions, str) or isinstance(targets, str):
            raise TypeError("Rouge.update takes sequences of summaries, not one string")
        if len(predictions) != len(targets) or (ids is not None and len(ids) != len(targets)):
            raise ValueError(f"Rouge.update got {len(predictions)} predictions for {len(targets)} references"
                             + (f" and {len(ids)} ids" if ids is not None else ""))
        for i, (hypothesis, reference) in enumerate(zip(predictions, targets)):
            for name, value in rouge_f1(hypothesis, reference).items():
                self.totals[name] += value
            if self.keep_summaries:
                example_id = str(ids[i]) if ids is not None else str(self.num_samples)
                self.summaries.append({"id": example_id, "hypothesis": hypothesis, "reference": reference})
            self.num_samples += 1

    output_suffixes = (".summaries.jsonl",)

    def save_outputs(self, results_file: Path) -> list[Path]:
        """Write the kept summaries to ``<results stem>.summaries.jsonl`` beside ``results_file`` (atomically)."""
        if not self.keep_summaries:
            return []
        path = Path(results_file).with_name(Path(results_file).stem + self.output_suffixes[0])
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in self.summaries)
        return [write_file(path, text, overwrite=True)]

    def compute(self) -> dict[str, float]:
        if self.num_samples == 0:
            raise ValueError("Rouge.compute() called before any summary was scored")
        return {name: total / self.num_samples for name, total in self.totals.items()}


def read_pairs(path: Path, lines: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(hypotheses, references) from the JSON lines ``eval`` writes (``hypothesis`` and ``reference`` fields);
    ``lines``: the file's lines, already read."""
    hypotheses, references = [], []
    for number, row in json_rows(read_lines(path) if lines is None else lines, path):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("hypothesis", "reference")):
            raise DataError(f"{path}, line {number}: expected an object with string fields 'hypothesis' and "
                            "'reference' (as `lavo-zoo eval` writes them)")
        hypotheses.append(row["hypothesis"])
        references.append(row["reference"])
    return hypotheses, references
