"""The recall recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``answer`` (a model's answers
to a split's queries, the predictions ``lavo-zoo score accuracy`` reads) and ``recall-plot`` (accuracy against
recurrent-state size over compare studies). Heavy modules are imported inside the commands."""
from __future__ import annotations

import json
from pathlib import Path

import click

from lavo_zoo import limits
from lavo_zoo.atomic import put_file
from lavo_zoo.options import device_option, out_option, overwrite_option
from lavo_zoo.outputs import ANSWERS, FIGURE, RECALL_TABLE, Outputs


@click.command("answer", epilog="""\b
Examples:
  lavo-zoo answer runs/mqar/checkpoints/best --data data/mqar/test.jsonl --out runs/mqar/answers.jsonl
  lavo-zoo score accuracy --pred runs/mqar/answers.jsonl --ref data/mqar/test.jsonl""")
@click.argument("checkpoint")
@click.option("--data", "data_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A recall split (.jsonl, as `lavo-zoo data recall` writes it) whose queries to answer.")
@out_option("Where to write the answers: one JSON object per example, {\"queries\": [...], \"answers\": [...]}.",
            required=True)
@overwrite_option
@click.option("--batch-size", type=limits.BATCH_SIZE.click_type(), default=64, show_default=True,
              help=f"Sequences answered at once, {limits.BATCH_SIZE.describe()}.")
@device_option
def answer(checkpoint: str, data_file: Path, out: Path, overwrite: bool, batch_size: int,
           device: str | None) -> None:
    """Answer every query of the recall split DATA with the model in CHECKPOINT (a directory, a .tar.gz/.zip, an
    index name, a URL or an hf:// reference); the split's settings (vocabulary, length) must be the model's."""
    from lavo_zoo.checkpoints import load_predictor
    from lavo_zoo.evaluators.base import input_path

    with Outputs("answer", overwrite, inputs={"--data": data_file}) as outputs:
        staged = outputs.file(out, ANSWERS)
        input_path(data_file, "--data")
        model = load_predictor(checkpoint, device, recipe="recall")
        rows = model.answer_file(data_file, batch_size)
        put_file(staged, "".join(json.dumps(row) + "\n" for row in rows))
    click.echo(f"answered {sum(len(r['answers']) for r in rows)} queries of {len(rows)} examples into {out}",
               err=True)


@click.command("recall-plot", epilog="""\b
Examples:
  lavo-zoo recall-plot runs/recall --out runs/recall/state.png --table runs/recall/state.md
  lavo-zoo recall-plot runs/recall/sweep/lavo-r8 runs/recall/study --out lavo.png --title "LAVO against softmax" """)
@click.argument("studies", nargs=-1, required=True, type=click.Path(path_type=Path))
@out_option("The figure to write (.png, .pdf, .svg, ...): accuracy against state bytes per sequence.", required=True)
@click.option("--table", "table_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the table (Markdown) here; it is printed either way.")
@click.option("--title", default="MQAR accuracy against recurrent state", show_default=True)
@overwrite_option
def recall_plot(studies: tuple[Path, ...], out: Path, table_file: Path | None, title: str, overwrite: bool) -> None:
    """Accuracy against recurrent-state size (Zoology's main figure) over the cells of the `lavo-zoo compare`
    STUDIES (their --out folders, recall configs): one point per task, attention and setting (mean ± std over its
    seeds), the state of the site under test measured from each rebuilt model's attention state objects, for one
    sequence of the training length (a state that grows with the sequence, the KV cache, is marked; a cross site:
    its cache of the source)."""
    from lavo_zoo.recipes.recall.plot import markdown_table, plot_state, state_rows

    with Outputs("recall-plot", overwrite, inputs={f"study {study}": study for study in studies}) as outputs:
        staged = outputs.file(out, FIGURE)
        staged_table = outputs.file(table_file, RECALL_TABLE, "--table") if table_file is not None else None
        rows = state_rows(list(studies))
        table = markdown_table(rows)
        put_file(staged, plot_state(rows, title, out.suffix.lower().lstrip(".")))
        if staged_table is not None:
            put_file(staged_table, table)
    click.echo(table, nl=False)
    click.echo(f"wrote {out}" + (f" and {table_file}" if table_file else ""), err=True)


COMMANDS = [answer, recall_plot]
