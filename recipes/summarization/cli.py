"""The summarization recipe's commands: ``lavo-zoo score rouge`` and ``lavo-zoo summarize``."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from lavo_zoo.errors import DataError, UsageError


def read_summaries(path: Path) -> list[str]:
    """One summary per line of a UTF-8 text file (Multi-News ``NEWLINE_CHAR`` and a leading "– " are undone)."""
    from lavo_zoo.recipes.summarization.data import clean_summary, read_lines

    return [clean_summary(line) for line in read_lines(path)]


def read_pairs(path: Path) -> tuple[list[str], list[str]]:
    """(hypotheses, references) from the JSON lines ``eval`` writes (``hypothesis`` and ``reference`` fields)."""
    from lavo_zoo.recipes.summarization.data import json_rows, read_lines

    hypotheses, references = [], []
    for number, row in json_rows(read_lines(path), path):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("hypothesis", "reference")):
            raise DataError(f"{path}, line {number}: expected an object with string fields 'hypothesis' and "
                            "'reference' (as `lavo-zoo eval` writes them)")
        hypotheses.append(row["hypothesis"])
        references.append(row["reference"])
    return hypotheses, references


@click.command("rouge", epilog="""\b
Examples:
  lavo-zoo score rouge --hyp generated.txt --ref test.tgt
  lavo-zoo score rouge --hyp generated.txt --ref test.tgt --json rouge.json
  lavo-zoo score rouge --pairs results.summaries.jsonl""")
@click.option("--hyp", "hyp_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Generated summaries, one per line (UTF-8).")
@click.option("--ref", "ref_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Reference summaries, one per line, aligned with --hyp (a Multi-News .tgt file works as is).")
@click.option("--pairs", "pairs_file", type=click.Path(dir_okay=False, path_type=Path),
              help="JSON lines with 'hypothesis' and 'reference' fields (the summaries file `eval` writes).")
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the metrics to this JSON file.")
def score_rouge(hyp_file: Path | None, ref_file: Path | None, pairs_file: Path | None, json_file: Path | None) -> None:
    """ROUGE-1/2/L/Lsum F1 x 100 of summaries against references, averaged over examples.

    rouge-score with Porter stemming; sentences split by pysbd and put on lines, so that rougeLsum is ROUGE-1.5.5's
    summary-level ROUGE-L (the figure papers report as ROUGE-L).
    """
    from lavo_zoo.evaluators.rouge import Rouge

    if pairs_file is not None:
        if hyp_file is not None or ref_file is not None:
            raise UsageError("give either --pairs FILE or --hyp FILE --ref FILE, not both")
        for path in (pairs_file,):
            _must_exist(path, "--pairs")
        hypotheses, references = read_pairs(pairs_file)
        source = {"pairs": str(pairs_file)}
    else:
        if hyp_file is None or ref_file is None:
            raise UsageError("give --hyp FILE and --ref FILE (one summary per line), or --pairs FILE")
        _must_exist(hyp_file, "--hyp")
        _must_exist(ref_file, "--ref")
        hypotheses, references = read_summaries(hyp_file), read_summaries(ref_file)
        if len(hypotheses) != len(references):
            raise DataError(f"{hyp_file} has {len(hypotheses)} lines but {ref_file} has {len(references)}: give one "
                            "summary per line in both, in the same order")
        source = {"hyp": str(hyp_file), "ref": str(ref_file)}
    if not hypotheses:
        raise DataError(f"no summaries to score in {', '.join(source.values())}")
    evaluator = Rouge()
    evaluator.update(hypotheses, references)
    results = {"metrics": evaluator.results(), "num_samples": evaluator.num_samples, **source}
    for name, metric in results["metrics"].items():
        click.echo(f"{name:<10} {metric['value']:8.2f}")
    click.echo(f"({evaluator.num_samples} summaries, F1 x 100)")
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(results, indent=2) + "\n")
        click.echo(f"wrote {json_file}")


def _must_exist(path: Path, option: str) -> None:
    if not path.is_file():
        raise UsageError(f"{option} {path}: no such file")


def read_articles(text: str) -> list[str]:
    """Articles of a ``summarize`` input: separated by ``|||||`` or, without it, by blank lines."""
    from lavo_zoo.recipes.summarization.data import ARTICLE_SEPARATOR, split_articles

    if ARTICLE_SEPARATOR in text:
        return split_articles(text)
    return [a.strip() for a in text.replace("\r\n", "\n").split("\n\n") if a.strip()]


@click.command("summarize", epilog="""\b
Examples:
  lavo-zoo summarize runs/tiny/checkpoints/last --input articles.txt
  cat articles.txt | lavo-zoo summarize runs/tiny/checkpoints/last
  lavo-zoo summarize runs/tiny/checkpoints/last --input articles.txt --beam 4 --max-length 120""")
@click.argument("checkpoint")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Text file with the articles (default: standard input), separated by '|||||' or blank lines.")
@click.option("--beam", type=int, default=None, help="Beam size (default: the checkpoint's eval.beam, greedy = 1).")
@click.option("--max-length", type=int, default=None, help="Longest summary in tokens (default: from the source).")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
def summarize(checkpoint: str, input_file: Path | None, beam: int | None, max_length: int | None,
              device: str | None) -> None:
    """Summarize the articles in INPUT with a summarization CHECKPOINT and print the summary."""
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.recipes.summarization.recipe import load_summarizer

    if input_file is not None:
        if not input_file.is_file():
            raise UsageError(f"--input {input_file}: no such file")
        from lavo_zoo.recipes.summarization.data import read_lines
        text = "\n".join(read_lines(input_file))
    else:
        if sys.stdin.isatty():
            raise UsageError("give the articles with --input FILE or on standard input")
        text = sys.stdin.read()
    articles = read_articles(text)
    if not articles:
        raise UsageError("the input holds no article text")
    if beam is not None and beam < 1 or max_length is not None and max_length < 1:
        raise UsageError("--beam and --max-length must be positive")
    with open_checkpoint(checkpoint) as path:
        summarizer = load_summarizer(path, device=device)
    click.echo(summarizer.summarize([articles], beam=beam, max_length=max_length)[0])
