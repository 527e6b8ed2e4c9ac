"""``compare --launcher slurm``: each cell of a study is a Slurm job, submitted through submitit, the engine the
field's research code submits Python callables with (``pip install 'lavo-zoo[slurm]'``).

- One job per cell, with the study's sbatch options (:class:`~lavo_zoo.compare.launchers.LauncherSettings`, their
  rules checked before submitit is imported: :mod:`~lavo_zoo.compare.slurm.options`), its submitit files and its
  Slurm log (``<job>_0_log.out``, ``<job>_0_log.err``) in ``CELL_DIR/slurm/``, and the job it was given in
  ``CELL_DIR/slurm/job.json`` (:mod:`~lavo_zoo.compare.slurm.submissions`).
- The jobs are requeueable (``--requeue``): one preempted, requeued by ``scontrol requeue`` or stopped at its time
  limit (submitit's signal before the limit) runs again and continues from the cell's last checkpoint with the
  trainer's exact resume; a SIGTERM (preemption, requeue) saves the step in flight first, as it does for ``train``
  (what a cell's job runs: :mod:`~lavo_zoo.compare.slurm.cell_jobs`).
- The command waits and rewrites the table each time a cell finishes; with ``--no-wait`` it submits and returns, and
  the same command later collects: finished cells are read, queued and running ones are waited for (not submitted
  again), and a cell whose job ended without finishing it is reported (job id, state, its log's last lines) and
  submitted again, to continue from its last checkpoint (:mod:`~lavo_zoo.compare.slurm.launcher`).
- Two submissions of one study never train one cell twice: submitting holds the study's lock, a cell with a queued or
  running job is not submitted again, and a job works on its cell only under the cell's lock
  (:mod:`~lavo_zoo.compare.locks`). The study folder must be on a filesystem every node mounts at the same path,
  with locks that hold across nodes; the jobs run this Python (``sys.executable``) in this folder with this
  environment, so the virtual environment must be on a shared filesystem too.
- The efficiency lengths are measured in a job of their own that starts once the study's cells have ended
  (``--dependency=afterany``), so that no cell of the study trains beside it; its result is kept in
  ``OUT/efficiency/`` as with the other launchers (:mod:`~lavo_zoo.compare.slurm.efficiency_job`).
- Slurm itself (sbatch, squeue, scancel, sacct), or submitit's local executor in its place where no cluster runs:
  :mod:`~lavo_zoo.compare.slurm.queue`.
"""
