"""The point-cloud recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``complete`` (complete a
partial scan with a checkpoint). Chamfer distances of saved clouds are ``lavo-zoo score chamfer``."""
from __future__ import annotations

from pathlib import Path

import click

from lavo_zoo import limits
from lavo_zoo.options import device_option, out_option, overwrite_option
from lavo_zoo.outputs import FIGURE, PCD, Outputs


@click.command("complete", epilog="""\b
Examples:
  lavo-zoo complete runs/tiny/checkpoints/last data/pcn/test/partial/03001627/chair-test-0000/00.pcd \\
      --out runs/tiny/chair.pcd
  lavo-zoo complete runs/pcn/checkpoints/best test/partial/03001627/m1/00.pcd --out m1.pcd \\
      --gt test/complete/03001627/m1.pcd --png m1.png
  lavo-zoo complete runs/tiny/checkpoints/last scan.pcd --out done.pcd --png done.png""")
@click.argument("checkpoint")
@click.argument("input_pcd", type=click.Path(dir_okay=False, path_type=Path))
@out_option("Where to write the completed cloud (.pcd).", required=True)
@overwrite_option
@click.option("--png", "png_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw partial / completed (/ ground truth) side by side into this PNG.")
@click.option("--gt", "gt_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A ground-truth .pcd: drawn in the PNG and scored (CD-L1, CD-L2, F-Score@1%).")
@click.option("--encoding", type=click.Choice(["ascii", "binary", "binary_compressed"]), default="binary",
              show_default=True, help="DATA encoding of the written .pcd.")
@click.option("--seed", type=limits.SEED.click_type(), default=0, show_default=True,
              help="Seed of the random subset of input points when the scan has more than the model takes.")
@device_option
def complete(checkpoint: str, input_pcd: Path, out: Path, overwrite: bool, png_file: Path | None,
             gt_file: Path | None, encoding: str, seed: int, device: str | None) -> None:
    """Complete the partial scan INPUT_PCD (coordinates normalised as PCN's, y up) with the PoinTr model in
    CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL or an hf:// reference) and write the dense
    completion as a .pcd."""
    import torch

    from lavo_zoo.checkpoints import load_predictor
    from lavo_zoo.errors import InputError, UsageError
    from lavo_zoo.evaluators.base import input_path
    from lavo_zoo.evaluators.chamfer import score_clouds
    from lavo_zoo.formats.pcd import read_pcd, write_pcd

    with Outputs("complete", overwrite, inputs={"INPUT_PCD": input_pcd, "--gt": gt_file}) as outputs:
        staged = outputs.file(out, PCD)
        staged_png = outputs.file(png_file, FIGURE, "--png") if png_file is not None else None
        partial = read_pcd(input_path(input_pcd, "INPUT_PCD"))
        if len(partial) == 0:
            raise UsageError(f"{input_pcd}: the scan has no points to complete")
        gt = read_pcd(input_path(gt_file, "--gt")) if gt_file is not None else None
        completer = load_predictor(checkpoint, device, recipe="point_cloud")
        try:
            completed = completer.complete(partial, seed=seed)
        except InputError as e:  # name the file, not "cloud 0"
            raise InputError(f"{input_pcd}: {str(e).replace('cloud 0', 'the scan')}") from None
        write_pcd(staged, completed, encoding, overwrite=True)
        scores = score_clouds(torch.from_numpy(completed), torch.from_numpy(gt)) if gt is not None else None
        if staged_png is not None:
            from lavo_zoo.recipes.point_cloud.plot import draw_clouds

            clouds, titles = [partial, completed], ["partial", "completed"]
            if gt is not None:
                clouds, titles = clouds + [gt], titles + ["ground truth"]
            draw_clouds(clouds, titles, staged_png)
    click.echo(f"wrote {out} ({len(completed)} points from {len(partial)} input points)")
    if scores is not None:
        click.echo(" ".join(f"{k}={v:.4f}" for k, v in scores.items()))
    if png_file is not None:
        click.echo(f"wrote {png_file}")


COMMANDS = [complete]
