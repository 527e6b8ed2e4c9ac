"""``lavo-zoo compare``: the project's one study runner. One recipe config, several attentions (or the config's own,
for repeated runs) and seeds, the same budget for each, one table with every metric's mean and spread, and whether
the budget separates softmax from the ``mean`` control.

- :mod:`~lavo_zoo.compare.study`: the study (:class:`Study`, built once: its config read once) and its cells (one
  training run and evaluation per attention and seed, kept, resumed, reused only with the same config);
- :mod:`~lavo_zoo.compare.jobs`: one cell as a job (:class:`CellJob`) that every launcher runs the same way, under its
  folder's lock (:mod:`~lavo_zoo.compare.locks`);
- :mod:`~lavo_zoo.compare.launchers`: where the cells run (the settings: :class:`LauncherSettings`, the config's
  ``launcher:`` section): one after another in this process, several at once on this machine
  (:mod:`~lavo_zoo.compare.local`), or as Slurm jobs through submitit (:mod:`~lavo_zoo.compare.slurm`); what they
  share, a study's outcome and its failed cells, in :mod:`~lavo_zoo.compare.outcomes`;
- :mod:`~lavo_zoo.compare.records`: each run's row label (a run is a typed
  :class:`~lavo_zoo.engine.records.CellRecord`, a cell's ``cell.json``, read by its one reader);
- :mod:`~lavo_zoo.compare.efficiency`: each row's efficiency lengths against softmax, measured by
  :mod:`lavo_zoo.bench` once per study and kept in ``OUT/efficiency/``;
- :mod:`~lavo_zoo.compare.collect`: the records of results that already exist (``--collect``);
- :mod:`~lavo_zoo.compare.table`: the rows (:class:`Row`), the verdict (:func:`separation`), ``table.md``,
  ``table.csv`` and ``chart.png``;
- :mod:`~lavo_zoo.compare.command`: the click command.
"""
from __future__ import annotations

from lavo_zoo.compare.collect import collect
from lavo_zoo.compare.command import compare
from lavo_zoo.compare.efficiency import Efficiency, attention_setup
from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.compare.launchers import LauncherSettings
from lavo_zoo.compare.outcomes import CellsFailed
from lavo_zoo.compare.study import Cell, Study, run_study
from lavo_zoo.compare.table import Row, separation, summarise, write_table
from lavo_zoo.engine.records import CellRecord, MetricSummary

__all__ = ["Cell", "CellJob", "CellRecord", "CellsFailed", "Efficiency", "LauncherSettings", "MetricSummary", "Row",
           "Study", "attention_setup", "collect", "compare", "run_study", "separation", "summarise", "write_table"]
