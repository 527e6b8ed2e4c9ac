"""The forecasting recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``forecast-plot``. Heavy
modules are imported inside the commands so that ``lavo-zoo --help`` stays fast."""
from __future__ import annotations

from pathlib import Path

import click

from lavo_zoo.options import check_writable, device_option, out_option, overwrite_option


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
@click.option("--windows", type=click.IntRange(min=1), default=4, show_default=True,
              help="Number of evenly spaced windows (one panel each).")
@device_option
def forecast_plot(checkpoint: str, overrides: tuple[str, ...], out: Path, overwrite: bool, split: str, windows: int,
                  device: str | None) -> None:
    """Plot forecast against truth (standardised) for a few windows of a split of a time_series CHECKPOINT."""
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.errors import UsageError
    from lavo_zoo.recipes.time_series.infer import forecast_windows
    from lavo_zoo.recipes.time_series.plot import plot_forecasts

    check_writable(out, overwrite)
    dev = pick_device(device)
    with open_checkpoint(checkpoint) as path:
        recipe, cfg, model, _ = load_model(path, dev, list(overrides))
    if recipe.name != "time_series":
        raise UsageError(f"{checkpoint} is a '{recipe.name}' checkpoint; forecast-plot needs a time_series one")
    history, truth, forecast, indices = forecast_windows(recipe, model, cfg, split, windows, dev)
    written = plot_forecasts(history, truth, forecast, out, [f"{split} window {i}" for i in indices],
                             title=f"{checkpoint}: {cfg.data.path or 'built-in data'}")
    click.echo(f"wrote {written}")


COMMANDS = [forecast_plot]
