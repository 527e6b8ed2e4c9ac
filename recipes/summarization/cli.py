"""The summarization recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``summarize``. ROUGE of
saved summaries is ``lavo-zoo score rouge``."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from lavo_zoo import limits
from lavo_zoo.errors import UsageError
from lavo_zoo.options import device_option, out_option, overwrite_option
from lavo_zoo.outputs import TEXT, Outputs


@click.command("summarize", epilog="""\b
Examples:
  lavo-zoo summarize runs/tiny/checkpoints/last --input articles.txt
  cat articles.txt | lavo-zoo summarize runs/tiny/checkpoints/last
  lavo-zoo summarize runs/tiny/checkpoints/last --input articles.txt --beam 4 --max-length 120
  lavo-zoo summarize runs/tiny/checkpoints/last --input data/multi-news/test.src --per-line --out test.hyp""")
@click.argument("checkpoint")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Text file with the articles (default: standard input), separated by '|||||' or blank lines.")
@click.option("--per-line", is_flag=True,
              help="Each line of the input is one document (Multi-News .src: articles separated by '|||||', "
                   "newlines as NEWLINE_CHAR); one summary per line.")
@out_option("Write the summaries here, one per line (default: print them).")
@overwrite_option
@click.option("--beam", type=limits.BEAM.click_type(), default=None,
              help=f"Beam size, {limits.BEAM.describe()} (default: the checkpoint's eval.beam, greedy = 1).")
@click.option("--max-length", type=limits.MAX_LENGTH.click_type(), default=None,
              help="Longest summary in tokens, at most the model's max_target_positions (default: from the source).")
@click.option("--batch-size", type=limits.BATCH_SIZE.click_type(), default=8, show_default=True,
              help=f"Documents decoded at once (with --per-line), {limits.BATCH_SIZE.describe()}.")
@device_option
def summarize(checkpoint: str, input_file: Path | None, per_line: bool, out: Path | None, overwrite: bool,
              beam: int | None, max_length: int | None, batch_size: int, device: str | None) -> None:
    """Summarize the articles in INPUT with a summarization CHECKPOINT and print the summary (with --per-line:
    one summary per input line, the layout `lavo-zoo score rouge --pred` reads)."""
    from lavo_zoo.checkpoints import load_predictor
    from lavo_zoo.recipes.summarization.infer import split_document

    with Outputs("summarize", overwrite, inputs={"--input": input_file}) as outputs:
        staged = outputs.file(out, TEXT) if out is not None else None
        if input_file is not None:
            from lavo_zoo.evaluators.base import input_path
            from lavo_zoo.formats.text import read_lines

            lines = read_lines(input_path(input_file, "--input"))
        else:
            if sys.stdin.isatty():
                raise UsageError("give the articles with --input FILE or on standard input")
            lines = sys.stdin.read().splitlines()
        documents = [split_document(line) for line in lines] if per_line else [split_document("\n".join(lines))]
        empty = [i + 1 for i, articles in enumerate(documents) if not articles]
        if empty:
            raise UsageError(f"line {empty[0]} of the input holds no article text" if per_line else
                             "the input holds no article text")
        summarizer = load_predictor(checkpoint, device, recipe="summarization")
        summaries = summarizer.summarize(documents, beam=beam, max_length=max_length, batch_size=batch_size)
        text = "".join(" ".join(s.split()) + "\n" for s in summaries) if per_line else summaries[0] + "\n"
        if staged is None:
            click.echo(text, nl=False)
        else:
            from lavo_zoo.atomic import put_file

            put_file(staged, text)
    if out is not None:
        click.echo(f"wrote {out} ({len(summaries)} summaries)")


COMMANDS = [summarize]
