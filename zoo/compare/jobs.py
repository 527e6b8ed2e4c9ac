"""One cell of a study as a job that every launcher runs the same way (:mod:`~lavo_zoo.compare.launchers`): in the
study's own process, in a process of its own on this machine (``python -m lavo_zoo.compare.jobs CELL_DIR/job.json``)
or in a Slurm job (submitit pickles it).

:class:`CellJob` holds what the cell needs as plain values (the study's config as the study read it and the cell's
overrides, its folder, where to run) and, when called, takes the cell's lock (:mod:`~lavo_zoo.compare.locks`),
keeps a cell another process finished meanwhile, else trains it (``--resume auto``: a killed or requeued cell
continues from its last checkpoint, with the trainer's exact resume), evaluates it and writes its ``cell.json``
(:class:`CellRecord`) atomically: a cell is either finished or not.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from lavo_zoo.atomic import put_file, write_file
from lavo_zoo.compare.locks import CELL_LOCK, FolderLock
from lavo_zoo.engine.records import CELL_FILE, CellRecord
from lavo_zoo.errors import UsageError, ZooError

JOB_FILE = "job.json"  # a cell's CellJob, as the local launcher hands it to the cell's process
LOG_FILE = "cell.log"  # that process's output
TIMING_FILE = "compare-timing.json"  # the wall time a cell's training took, over its sessions
RESULTS_FILE = "results.json"  # the cell's evaluation (the results JSON of `lavo-zoo eval`)


def run_cell(recipe: Any, cfg: Any, cell_dir: Path, device: str | None, split: str,
             max_batches: int | None = None) -> dict[str, Any]:
    """Train (or resume) and evaluate one cell (``cfg`` resolved); writes its results.json and returns what its
    record holds of the run: metrics, the weights scored, parameters, the wall time of its training (data
    preparation and validation included) and its steady-state step time and step memory
    (:class:`~lavo_zoo.compare.steps.StepMeter`: the same whichever cells ran before it).

    Args:
        recipe: the cell's recipe.
        cfg: the cell's resolved config.
        cell_dir: the cell's run folder.
        device: where it trains (None: the default device).
        split: the split it is evaluated on.
        max_batches: evaluate on this many batches at most (None: the whole split).
    """
    from lavo_zoo.compare.steps import StepMeter
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.engine.evaluate import evaluate_checkpoint
    from lavo_zoo.engine.trainer import Trainer

    parameters = sum(p.numel() for p in recipe.build_model(cfg).parameters())
    timing_file = cell_dir / TIMING_FILE
    spent = json.loads(timing_file.read_text())["train_time_s"] if timing_file.exists() else 0.0
    meter = StepMeter(pick_device(device))
    start = time.perf_counter()
    Trainer(recipe, cfg, cell_dir, device=device, resume="auto", step_observer=meter).fit()
    spent += time.perf_counter() - start
    put_file(timing_file, json.dumps({"train_time_s": spent}))
    checkpoints = cell_dir / "checkpoints"
    chosen = checkpoints / "best" if (checkpoints / "best").is_dir() else checkpoints / "last"
    results = evaluate_checkpoint(chosen, split=split, device=device, max_batches=max_batches)
    put_file(cell_dir / RESULTS_FILE, json.dumps(results, indent=2) + "\n")
    return {"metrics": results["metrics"], "num_samples": results["num_samples"], "checkpoint": str(chosen),
            "checkpoint_sha256": results.get("checkpoint_sha256"), "parameters": parameters,
            "train_time_s": round(spent, 3), **meter.result(), "device": results["device"], "split": split}


def recipe_target(recipe: Any) -> list[str]:
    """``[name, "module:Class"]`` of a recipe, so that a cell's process can register a recipe the study's process
    registered in code (not through an entry point, which every process finds by itself)."""
    cls = type(recipe)
    return [recipe.name, f"{cls.__module__}:{cls.__qualname__}"]


@dataclass
class CellJob:
    """One (attention, seed) cell of a study, runnable in any process: ``CellJob(...)()`` returns its record as
    ``cell.json`` holds it. It carries the study's config as the study read it, once (``config_data``: the file and
    its ``extends:`` chain merged, :class:`~lavo_zoo.engine.configs.LoadedConfig`), which the cell's process
    validates with the cell's overrides without reading the file again."""

    config: str  # the study's CONFIG as it was given (a named config or a path): what the cell's record says
    config_data: dict[str, Any]  # that config as the study read it (LoadedConfig.data)
    config_file: str  # the file it was read from, as messages name it
    overrides: list[str]  # the study's overrides, then the cell's (attention, its options, seed)
    cell_dir: str  # absolute
    attention: str
    seed: int
    split: str
    site: str | None = None
    device: str | None = None
    max_batches: int | None = None
    recipe: list[str] | None = None  # recipe_target(): registered in the cell's process where it is unknown there
    threads: int | None = None  # torch threads (and OMP_NUM_THREADS) in the cell's process
    cores: list[int] | None = None  # the CPU cores the cell's process may run on
    launch: dict[str, Any] = field(default_factory=dict)  # how the cell runs, recorded in its cell.json

    @property
    def name(self) -> str:
        return Path(self.cell_dir).name

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_file(cls, path: Path) -> CellJob:
        data = json.loads(Path(path).read_text())
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def _set_up_process(self) -> None:
        """This process's cores and threads, and the study's recipe where this process does not know it."""
        if self.cores:
            os.sched_setaffinity(0, self.cores)
        if self.threads:
            import torch

            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # for the processes it starts (data workers)
                os.environ[name] = str(self.threads)
            torch.set_num_threads(self.threads)
        if self.recipe:
            from lavo_zoo.engine.recipe import RECIPES
            name, target = self.recipe
            if name not in RECIPES:
                RECIPES.register(name, target, source=f"the study's process ({target})")

    def cell_config(self) -> tuple[Any, Any]:
        """(recipe, config) of this cell: the study's config as it read it, validated with the cell's overrides and
        resolved (its data-derived sizes filled). The one way a cell's config is made: the study checks every cell
        with it before the first trains, and the cell's process trains what it gives.

        Raises:
            ConfigError: a key unknown or a value out of range (naming the key, the file and the overrides).
        """
        from lavo_zoo.engine.configs import config_from_dict

        recipe, cfg = config_from_dict(self.config_data, self.overrides, self.config_file)
        return recipe, recipe.resolve(cfg)

    def finished(self) -> CellRecord | None:
        """This cell's record once it has finished (its cell.json, read by :meth:`CellRecord.read`: one that cannot
        be read stops the study, naming the file and what to do), else None.

        Raises:
            UsageError: a record that cannot be read, or the record of another cell (another attention or seed:
                copied or moved here), naming the file and how to train the cell again.
        """
        done = Path(self.cell_dir) / CELL_FILE
        if not done.is_file():
            return None
        record = CellRecord.read(done)
        if (record.attention, record.seed) != (self.attention, self.seed):
            raise UsageError(f"{done} is the record of {record.attention} seed {record.seed}, not of this cell "
                             f"({self.attention} seed {self.seed}): it was copied or moved here, and would count "
                             "another run as this one. Remove it (or the cell's folder) to train the cell")
        return record

    def where(self) -> dict[str, Any]:
        """How and where the cell ran: the launcher's description, the host, the Slurm job and its restarts."""
        found = {**self.launch, "host": socket.gethostname()}
        if os.environ.get("SLURM_JOB_ID"):
            found["slurm_job"] = os.environ["SLURM_JOB_ID"]
            found["slurm_restarts"] = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        return found

    def __call__(self) -> dict[str, Any]:
        self._set_up_process()
        cell_dir = Path(self.cell_dir)
        done = cell_dir / CELL_FILE

        def waiting(who: str) -> None:
            click.echo(f"{self.name}: {who} works on this cell; waiting for it to finish", err=True)

        with FolderLock(cell_dir / CELL_LOCK, waiting):
            record = self.finished()  # by another process while this one waited, or before
            if record is not None:
                return record.to_json()
            recipe, cfg = self.cell_config()
            fields = run_cell(recipe, cfg, cell_dir, self.device, self.split, self.max_batches)
            record = CellRecord(attention=self.attention, seed=self.seed, site=self.site, config=self.config,
                                overrides=list(self.overrides), launch=self.where(), **fields)
            write_file(done, json.dumps(record.to_json(), indent=2) + "\n", option="the cell record")
            return record.to_json()


def main(argv: list[str] | None = None) -> int:
    """``python -m lavo_zoo.compare.jobs CELL_DIR/job.json``: run one cell (the local launcher's cell processes).
    Exit 0 when the cell is finished; a refused or failed cell prints its message (a traceback for an unexpected
    error) and exits as ``lavo-zoo`` would."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        click.echo("usage: python -m lavo_zoo.compare.jobs CELL_DIR/job.json", err=True)
        return 2
    try:
        CellJob.from_file(Path(args[0]))()
    except ZooError as e:
        click.echo(f"error: {e}", err=True)
        return getattr(e, "exit_code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

