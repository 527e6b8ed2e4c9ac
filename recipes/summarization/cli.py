"""The summarization recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``summarize``. ROUGE of
saved summaries is ``lavo-zoo score rouge``."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from lavo_zoo.errors import UsageError
from lavo_zoo.options import device_option


def read_articles(text: str) -> list[str]:
    """Articles of a ``summarize`` input: separated by ``|||||`` or, without it, by blank lines."""
    from lavo_zoo.formats.multinews import ARTICLE_SEPARATOR, split_articles

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
@device_option
def summarize(checkpoint: str, input_file: Path | None, beam: int | None, max_length: int | None,
              device: str | None) -> None:
    """Summarize the articles in INPUT with a summarization CHECKPOINT and print the summary."""
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.recipes.summarization.infer import load_summarizer

    if input_file is not None:
        from lavo_zoo.evaluators.base import input_path
        from lavo_zoo.formats.text import read_lines

        text = "\n".join(read_lines(input_path(input_file, "--input")))
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


COMMANDS = [summarize]
