"""The forecasting recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``forecast`` (continue a
new series) and ``forecast-plot`` (windows of a split). Both call :class:`~lavo_zoo.recipes.time_series.infer.
Forecaster`; heavy modules are imported inside the commands so that ``lavo-zoo --help`` stays fast."""
from __future__ import annotations

from pathlib import Path

import click

from lavo_zoo import limits
from lavo_zoo.options import device_option, out_option, overwrite_option
from lavo_zoo.outputs import FIGURE, FORECAST, Outputs


@click.command("forecast", epilog="""\b
Examples:
  lavo-zoo forecast runs/ts/checkpoints/best --csv data/etth1/ETTh1.csv --out forecast.csv
  lavo-zoo forecast runs/ts --csv data/etth1/ETTh1.csv --at "2017-06-01 00:00:00" --out june.csv
  lavo-zoo forecast runs/ts --csv latest.csv          # CSV on standard output""")
@click.argument("checkpoint")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The series to continue: a 'date' column and the columns the model was trained on.")
@click.option("--at", "at", default=None, metavar="DATE",
              help="Forecast the steps after the row of this date (default: after the last row).")
@out_option("CSV file to write (default: standard output).", default=None)
@overwrite_option
@device_option
def forecast(checkpoint: str, csv_file: Path, at: str | None, out: Path | None, overwrite: bool,
             device: str | None) -> None:
    """Forecast the pred_len steps after the end of a CSV (or after --at) with the time_series model in CHECKPOINT
    (a run or checkpoint directory, an archive, an index name, a URL or an hf:// reference). The scaler, columns
    and time step of the training data come from the checkpoint; the forecast is in the CSV's units, its dates
    continue the CSV's at its frequency."""
    from lavo_zoo.atomic import put_file
    from lavo_zoo.checkpoints import load_predictor
    from lavo_zoo.evaluators.base import input_path
    from lavo_zoo.recipes.time_series.infer import forecast_csv

    with Outputs("forecast", overwrite, inputs={"--csv": csv_file}) as outputs:
        staged = outputs.file(out, FORECAST) if out is not None else None
        input_path(csv_file, "--csv")
        text = forecast_csv(load_predictor(checkpoint, device, recipe="time_series").forecast(csv_file, at=at))
        if staged is None:
            click.echo(text, nl=False)
        else:
            put_file(staged, text)
    if out is not None:
        click.echo(f"wrote {out}")


@click.command("forecast-plot", epilog="""\b
Examples:
  lavo-zoo forecast-plot runs/ts/checkpoints/best --out runs/ts/forecast.png
  lavo-zoo forecast-plot runs/ts/checkpoints/best --split validation --windows 6 --out runs/ts/val.png
  lavo-zoo forecast-plot runs/etth1/checkpoints/best data.path=data/ETT-small/ETTh1.csv --out runs/etth1.png""")
@click.argument("checkpoint")
@click.argument("overrides", nargs=-1)
@out_option("PNG file to write.", default=Path("runs/forecast.png"))
@overwrite_option
@click.option("--split", default="test", show_default=True, help="Which split's windows to plot.")
@click.option("--windows", type=limits.WINDOWS.click_type(), default=4, show_default=True,
              help=f"Number of evenly spaced windows (one panel each), {limits.WINDOWS.describe()}.")
@device_option
def forecast_plot(checkpoint: str, overrides: tuple[str, ...], out: Path, overwrite: bool, split: str, windows: int,
                  device: str | None) -> None:
    """Plot forecast against truth (standardised) for a few windows of a split of a time_series CHECKPOINT."""
    from lavo_zoo.checkpoints import load_predictor
    from lavo_zoo.recipes.time_series.plot import plot_forecasts

    with Outputs("forecast-plot", overwrite) as outputs:
        staged = outputs.file(out, FIGURE)
        forecaster = load_predictor(checkpoint, device, overrides, recipe="time_series")
        history, truth, predicted, indices = forecaster.split_windows(split, windows)
        plot_forecasts(history, truth, predicted, staged, [f"{split} window {i}" for i in indices],
                       title=f"{checkpoint}: {forecaster.cfg.data.path or 'built-in data'}")
    click.echo(f"wrote {out}")


COMMANDS = [forecast, forecast_plot]
