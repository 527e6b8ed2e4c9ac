"""The point-cloud recipe's commands: ``lavo-zoo complete`` (complete a partial scan with a checkpoint) and
``lavo-zoo score chamfer`` (CD-L1, CD-L2 and F-Score@1% of .pcd files or folders, without a checkpoint)."""
from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("complete", epilog="""\b
Examples:
  lavo-zoo complete runs/tiny/checkpoints/last ../shared/data/pcn-demo/chair.pcd --out chair-completed.pcd
  lavo-zoo complete runs/pcn/checkpoints/best test/partial/03001627/m1/00.pcd --out m1.pcd \\
      --gt test/complete/03001627/m1.pcd --png m1.png
  lavo-zoo complete runs/tiny/checkpoints/last scan.pcd --out done.pcd --png done.png""")
@click.argument("checkpoint")
@click.argument("input_pcd", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the completed cloud (.pcd).")
@click.option("--png", "png_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw partial / completed (/ ground truth) side by side into this PNG.")
@click.option("--gt", "gt_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A ground-truth .pcd: drawn in the PNG and scored (CD-L1, CD-L2, F-Score@1%).")
@click.option("--encoding", type=click.Choice(["ascii", "binary", "binary_compressed"]), default="binary",
              show_default=True, help="DATA encoding of the written .pcd.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random subset of input points when the scan has more than the model takes.")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
def complete(checkpoint: str, input_pcd: Path, out_file: Path, png_file: Path | None, gt_file: Path | None,
             encoding: str, seed: int, device: str | None) -> None:
    """Complete the partial scan INPUT_PCD (coordinates normalised as PCN's, y up) with the PoinTr model in
    CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL or an hf:// reference) and write the dense
    completion as a .pcd."""
    import numpy as np
    import torch

    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.errors import UsageError
    from lavo_zoo.evaluators.chamfer import score_clouds
    from lavo_zoo.recipes.point_cloud.data import random_sample_points
    from lavo_zoo.recipes.point_cloud.pcd import read_pcd, write_pcd
    from lavo_zoo.recipes.point_cloud.recipe import complete_clouds

    partial = read_pcd(input_pcd)
    if len(partial) == 0:
        raise UsageError(f"{input_pcd}: the scan has no points to complete")
    gt = read_pcd(gt_file) if gt_file is not None else None
    dev = pick_device(device)
    with open_checkpoint(checkpoint) as path:
        recipe, cfg, model, _ = load_model(path, dev)
    if recipe.name != "point_cloud":
        raise UsageError(f"{checkpoint} is a '{recipe.name}' checkpoint; complete needs a point_cloud checkpoint")
    sampled, mask = random_sample_points(partial, cfg.data.input_points, np.random.default_rng(seed))
    with torch.no_grad():
        _, dense = complete_clouds(model, torch.from_numpy(sampled)[None].to(dev), torch.from_numpy(mask)[None].to(dev))
    completed = dense.cloud(0).float().cpu().numpy()
    write_pcd(out_file, completed, encoding)
    click.echo(f"wrote {out_file} ({len(completed)} points from {len(partial)} input points)")
    if gt is not None:
        scores = score_clouds(torch.from_numpy(completed), torch.from_numpy(gt))
        click.echo(" ".join(f"{k}={v:.4f}" for k, v in scores.items()))
    if png_file is not None:
        from lavo_zoo.recipes.point_cloud.plot import draw_clouds

        clouds, titles = [partial, completed], ["partial", "completed"]
        if gt is not None:
            clouds, titles = clouds + [gt], titles + ["ground truth"]
        click.echo(f"wrote {draw_clouds(clouds, titles, png_file)}")


def _pairs(pred: Path, gt: Path) -> list[tuple[str, Path, Path]]:
    """(name, predicted file, ground-truth file): one pair for two files, or every .pcd under ``pred`` with the
    file at the same relative path under ``gt``."""
    from lavo_zoo.errors import UsageError

    if pred.is_file() and gt.is_file():
        return [(pred.name, pred, gt)]
    if not (pred.is_dir() and gt.is_dir()):
        raise UsageError(f"--pred {pred} and --gt {gt} must both be .pcd files or both be folders (and exist)")
    files = sorted(pred.rglob("*.pcd"))
    if not files:
        raise UsageError(f"--pred {pred}: no .pcd files in this folder")
    missing = [f.relative_to(pred) for f in files if not (gt / f.relative_to(pred)).is_file()]
    if missing:
        raise UsageError(f"--gt {gt}: {len(missing)} predicted file(s) have no ground truth at the same relative "
                         f"path, e.g. {gt / missing[0]}")
    return [(str(f.relative_to(pred)), f, gt / f.relative_to(pred)) for f in files]


@click.command("chamfer", epilog="""\b
Examples:
  lavo-zoo score chamfer --pred completed.pcd --gt complete/03001627/m1.pcd
  lavo-zoo score chamfer --pred runs/out/ --gt PCN/test/complete/ --json""")
@click.option("--pred", "pred", type=click.Path(exists=True, path_type=Path), required=True,
              help="Predicted cloud (.pcd) or a folder of them.")
@click.option("--gt", "gt", type=click.Path(exists=True, path_type=Path), required=True,
              help="Ground-truth cloud (.pcd) or a folder with the same relative paths.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (per file, per category and overall).")
def score_chamfer(pred: Path, gt: Path, as_json: bool) -> None:
    """CD-L1 x1000, CD-L2 x1000 and F-Score@1% as PoinTr computes them; over folders, each category's mean and the
    overall mean of the category means. Folders: files are paired by relative path, and a file's category is its
    first folder (03001627/m1.pcd is in 03001627)."""
    import torch

    from lavo_zoo.evaluators.chamfer import METRICS, ChamferEvaluator, PointClouds, score_clouds
    from lavo_zoo.recipes.point_cloud.pcd import read_pcd

    evaluator = ChamferEvaluator()
    files = {}
    for name, p, g in _pairs(pred, gt):
        a, b = torch.from_numpy(read_pcd(p)), torch.from_numpy(read_pcd(g))
        category = Path(name).parts[0] if len(Path(name).parts) > 1 else "all"
        files[name] = score_clouds(a, b)
        evaluator.update(PointClouds(a[None]), PointClouds(b[None], categories=[category]))
    overall = {k: evaluator.compute()[k] for k in METRICS}
    if as_json:
        click.echo(json.dumps({"overall": overall, "categories": evaluator.per_category(), "files": files,
                               "num_files": len(files)}, indent=2))
        return
    width = max(len("overall"), *(len(n) for n in files))
    click.echo(f"{'':<{width}}  {'CD-L1 x1e3':>10}  {'CD-L2 x1e3':>10}  {'F@1%':>7}")
    rows = list(files.items()) if len(files) <= 50 else []
    rows += [(f"[{c}]", v) for c, v in evaluator.per_category().items()] if len(files) > 1 else []
    for name, s in rows + [("overall", overall)]:
        click.echo(f"{name:<{width}}  {s['cd_l1']:>10.4f}  {s['cd_l2']:>10.4f}  {s['fscore']:>7.4f}")
