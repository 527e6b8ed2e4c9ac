"""``lavo-zoo bench lm``: training and evaluation throughput (tokens/s) of language-model configs at several context
lengths, one sequence per step.

Evaluation: forward with per-token NLL under no_grad. Training: forward, backward and an AdamW step. Both run in the
config's training precision (``train.precision``, :mod:`lavo_zoo.engine.precision`: bf16 autocast with fp32 weights
on CUDA by default, as ``lavo-zoo train`` runs, so ``sdpa`` is FlashAttention there; fp32 on CPU) and with the
config's dropout (``--set`` changes either). Each figure is the median over ``--repeats`` timed steps after one
warm-up step (:func:`lavo_zoo.bench.timing.time_runs`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lavo_zoo.bench.timing import median_time, parse_ints, time_runs, write_json, writes_records
from lavo_zoo.options import device_option, json_records_option


def measure(config: str, length: int, repeats: int, device: Any, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Train and eval tokens/s of ``config`` with the config ``overrides`` (KEY=VALUE) at context ``length`` (median
    of ``repeats`` steps), in the config's training precision.

    Args:
        config: the config's name or file.
        length: the context length T.
        repeats: timed steps (the median is reported).
        device: where the model runs.
        overrides: config overrides, KEY=VALUE.
    """
    import torch

    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.engine.precision import autocast, autocast_dtype, precision_name

    recipe, cfg = resolve_config(config, list(overrides))
    cfg = recipe.resolve(cfg)
    dtype = autocast_dtype(cfg.train.precision, device)
    torch.manual_seed(0)
    model = recipe.build_model(cfg).to(device)
    batch = torch.randint(0, cfg.model.vocab_size, (1, length + 1), device=device)
    x, y = batch[:, :-1], batch[:, 1:]  # [1, T]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step() -> None:  # as the trainer: forward under autocast, backward outside it
        optimizer.zero_grad(set_to_none=True)
        with autocast(dtype, device):
            loss = model(x, y).mean()
        loss.backward()
        optimizer.step()

    def eval_step() -> None:
        with torch.no_grad(), autocast(dtype, device):
            model(x, y)

    model.train()
    train_s = median_time(time_runs(train_step, 1, repeats, device))
    train_kernels = _kernels(model)
    model.eval()
    eval_s = median_time(time_runs(eval_step, 1, repeats, device))
    from lavo_zoo.attention.schedule import site_labels

    record = {"config": config, "attention": site_labels(cfg.model)[""], "length": length,  # hybrid:lavo*3+sdpa
              "precision": precision_name(dtype), "dropout": cfg.model.dropout,
              "attention_dropout": cfg.model.attention.options.get("dropout", 0.0),
              "train_tokens_per_s": length / train_s, "eval_tokens_per_s": length / eval_s}
    if train_kernels is not None:
        record.update(train_kernels=train_kernels, eval_kernels=_kernels(model))
    return record


def _kernels(model: Any) -> str | None:
    """The kernels the model's first attention with kernels (LAVO) ran last, else None."""
    from lavo_zoo.attention.ops.dispatch import kernels_used

    return next((used for used in map(kernels_used, model.modules()) if used is not None), None)


@click.command("lm", epilog="""\b
Examples:
  lavo-zoo bench lm lm/tiny-lavo lm/tiny-sdpa --lengths 512,2048
  lavo-zoo bench lm lm/pg19-lavo --lengths 2048,8192,16384 --device cuda --json runs/throughput.json
  lavo-zoo bench lm lm/pg19-lavo lm/pg19-sdpa --lengths 16384 --device cuda --set model.attention.dropout=0.0
  lavo-zoo bench lm lm/tiny-lavo --lengths 2048 --set train.precision=bf16   # bf16 autocast on the CPU too""")
@click.argument("configs", nargs=-1, required=True)
@click.option("--lengths", default="2048,8192,16384", show_default=True, help="Comma-separated context lengths.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed steps per figure (the median is reported) after one warm-up step.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Config override for every config (repeatable), e.g. model.attention.dropout=0.0, "
                   "train.precision=fp32 (the timing's precision)")
@device_option
@json_records_option
@writes_records
def lm_cmd(configs: tuple[str, ...], lengths: str, repeats: int, overrides: tuple[str, ...], device: str | None,
           json_file: Path | None) -> None:
    """Training and evaluation tokens/s of LM CONFIGS at several context lengths, one sequence per step, in each
    config's training precision (train.precision: bf16 autocast on CUDA, fp32 on CPU by default) and dropout."""
    from lavo_zoo.engine.env import describe_machine, machine, pick_device

    dev = pick_device(device)
    host = machine(dev)
    click.echo(f"# {describe_machine(host)}")
    rows = [measure(c, n, repeats, dev, overrides) for c in configs for n in parse_ints(lengths, "--lengths")]
    click.echo(f"{'config':<22} {'length':>7} {'precision':>13} {'train tok/s':>12} {'eval tok/s':>12}  "
               "kernels (train / eval)")
    for r in rows:
        kernels = f"  {r['train_kernels']} / {r['eval_kernels']}" if "train_kernels" in r else ""
        click.echo(f"{r['config']:<22} {r['length']:>7} {r['precision']:>13} {r['train_tokens_per_s']:>12.0f} "
                   f"{r['eval_tokens_per_s']:>12.0f}{kernels}")
    if json_file is not None:
        write_json(json_file, {"machine": host, "results": rows})
