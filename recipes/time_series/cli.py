"""The forecasting recipe's own commands, mounted by ``lavo-zoo`` through ``TimeSeriesRecipe.commands`` and
``score_commands``: ``forecast-plot``, ``repeats`` and ``score forecast``. Heavy modules are imported inside the
commands so that ``lavo-zoo --help`` stays fast."""
from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("forecast-plot", epilog="""\b
Examples:
  lavo-zoo forecast-plot runs/ts/checkpoints/best --out forecast.png
  lavo-zoo forecast-plot runs/ts/checkpoints/best --split validation --windows 6 --out val.png
  lavo-zoo forecast-plot runs/etth1/checkpoints/best data.path=data/ETT-small/ETTh1.csv --out etth1.png""")
@click.argument("checkpoint")
@click.argument("overrides", nargs=-1)
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=Path("forecast.png"),
              show_default=True, help="PNG file to write.")
@click.option("--split", default="test", show_default=True, help="Which split's windows to plot.")
@click.option("--windows", type=click.IntRange(min=1), default=4, show_default=True,
              help="Number of evenly spaced windows (one panel each).")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
def forecast_plot(checkpoint: str, overrides: tuple[str, ...], out_file: Path, split: str, windows: int,
                  device: str) -> None:
    """Plot forecast against truth (standardised) for a few windows of a split of a time_series CHECKPOINT."""
    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.errors import UsageError
    from lavo_zoo.recipes.time_series.plot import forecast_windows, plot_forecasts

    with open_checkpoint(checkpoint) as path:
        recipe, cfg, model, _ = load_model(path, device, list(overrides))
    if recipe.name != "time_series":
        raise UsageError(f"{checkpoint} is a '{recipe.name}' checkpoint; forecast-plot needs a time_series one")
    history, truth, forecast, indices = forecast_windows(recipe, model, cfg, split, windows, device)
    written = plot_forecasts(history, truth, forecast, out_file, [f"{split} window {i}" for i in indices],
                             title=f"{checkpoint}: {cfg.data.path or 'built-in data'}")
    click.echo(f"wrote {written}")


@click.command("repeats", epilog="""\b
Examples:
  lavo-zoo repeats time_series/tiny-lavo --repeats 3 --out runs/ts-repeats
  lavo-zoo repeats time_series/tiny-lavo --repeats 5 --out runs/ts-repeats   # later: adds seeds 4 and 5
  lavo-zoo repeats time_series/etth1-lavo data.path=data/ETT-small/ETTh1.csv --repeats 5 --out runs/etth1""")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--repeats", "count", type=click.IntRange(min=1), default=3, show_default=True,
              help="Number of seeds (Informer's --itr).")
@click.option("--seed", type=int, default=1, show_default=True, help="First seed; run i uses seed + i.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the runs, their results JSON and summary.json.")
@click.option("--max-test-batches", type=click.IntRange(min=1), default=None,
              help="Score only the first N test batches (quick checks).")
def repeats(config: str, overrides: tuple[str, ...], count: int, seed: int, out_dir: Path,
            max_test_batches: int | None) -> None:
    """Train and test CONFIG with several seeds (OVERRIDES: key.sub=value); print each metric's mean and spread.

    Writes OUT/seed-S/ (each run), OUT/seed-S.test.json (its results) and OUT/summary.json. Running the same
    command again continues an interrupted call: finished seeds are kept, a killed one resumes.
    """
    from lavo_zoo.recipes.time_series.repeats import run_repeats

    summary = run_repeats(config, count, out_dir, list(overrides), seed, max_test_batches,
                          echo=lambda line: click.echo(line, err=True))
    for name, s in summary["test"].items():
        click.echo(f"{name:<12} {s['mean']:.4f} +- {s['std']:.4f}  ({len(s['values'])} runs)")


def read_array(path: Path):
    """A float64 array from a .npy file or a CSV of numbers (a 'date' column, if any, is dropped)."""
    import numpy as np
    import pandas as pd

    from lavo_zoo.errors import DataError

    if not path.is_file():
        raise DataError(f"{path} does not exist")
    if path.suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False).astype(np.float64)
        except (ValueError, OSError) as e:
            raise DataError(f"{path} is not a numeric .npy array: {e}") from None
    try:
        table = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not a readable CSV file: {e}") from None
    table = table.drop(columns=[c for c in table.columns if str(c).lower() == "date"])
    values = table.apply(pd.to_numeric, errors="coerce")
    bad = values.isna().to_numpy()
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DataError(f"{path}: column '{table.columns[col]}' has a missing or non-numeric value "
                        f"{table.iloc[row, col]!r} on line {row + 2}")
    return values.to_numpy(np.float64)


@click.command("forecast", epilog="""\b
Examples:
  lavo-zoo score forecast --pred forecast.npy --true truth.npy
  lavo-zoo score forecast --pred forecast.csv --true truth.csv --out scores.json""")
@click.option("--pred", "pred_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Forecasts: .npy (any shape, e.g. [N, horizon, C]) or CSV (rows x series; a date column is "
                   "ignored).")
@click.option("--true", "true_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Ground truth, the same shape as --pred.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the metrics as JSON.")
def score_forecast(pred_file: Path, true_file: Path, out_file: Path | None) -> None:
    """MSE, MAE, RMSE, MAPE and MSPE of forecasts against the truth (Informer's metrics; the first dimension counts
    the samples)."""
    import torch

    from lavo_zoo.errors import DataError
    from lavo_zoo.evaluators import build_evaluator

    pred, true = read_array(pred_file), read_array(true_file)
    if pred.shape != true.shape:
        raise DataError(f"--pred {pred_file} has shape {list(pred.shape)} but --true {true_file} has "
                        f"{list(true.shape)}; they must match")
    evaluator = build_evaluator("forecast")
    evaluator.update(torch.tensor(pred), torch.tensor(true))
    results = evaluator.results()
    for name, metric in results.items():
        click.echo(f"{name:<6} {metric['value']:.6g}")
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps({"metrics": results, "num_samples": evaluator.num_samples}, indent=2) + "\n")
        click.echo(f"wrote {out_file}")
