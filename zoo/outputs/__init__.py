"""The output policy: one rule for every file and folder a command writes, and one way to put them in place.

A command claims each of its outputs, before its work, in one :class:`Outputs` block; it writes each where the claim
says (a staging name beside it), and when the block ends without an error the claim puts them all in place:

- **never** one of the command's inputs, a checkpoint's own file, a training run's own file or anything in its
  ``checkpoints/``, anything in a study's ``cells/`` (``compare`` writes its cells, ``train`` its own run:
  :func:`check_run_output`, never in another's), and for a folder: a checkpoint, a training run, a folder holding an
  input, the current folder (or one holding it), a link; not even with ``--overwrite``;
- the **suffix** names what is written (:class:`FileKind`): ``synthesize --out x.mp3`` is refused (it writes WAV
  data), and a folder output (:class:`FolderKind`) is not named like a file (``export --format hf`` to ``x.tar.gz``);
- an existing output is replaced only with ``--overwrite`` (a command that keeps a record of its own, a benchmark's
  JSON, ``compare``'s table, replaces it without) and only when it is **what such a command wrote**: a file of the
  same kind by its content, a folder whose manifest (``<command>-manifest.json``) lists every file in it, unchanged;
  anything else is refused before the work, with or without ``--overwrite``;
- a **lock** beside each output (``.NAME.lock``) refuses a second command writing it while the first is at work;
- every output is written under a **staging** name beside it (a file as ``.tmp-outputs-N-PID/NAME``, a folder as
  ``.tmp-NAME-PID/``, :mod:`lavo_zoo.atomic`) and renamed into place only once the command has succeeded: a failure,
  a full disk or Ctrl-C leaves none of the command's outputs, no staging folder, lock file or empty folder, and the
  message names the output and why (:func:`lavo_zoo.errors.os_error_message`, the message every command gives);
  what is put in place has the permissions the umask gives (:func:`lavo_zoo.atomic.follow_umask`).

The kinds are in :mod:`~lavo_zoo.outputs.kinds`, the checks before the work (alone: :func:`check_writable` for a
file, :func:`check_folder_output` for a folder) in :mod:`~lavo_zoo.outputs.checks`, a folder's manifest in
:mod:`~lavo_zoo.outputs.manifests` and the claim in :mod:`~lavo_zoo.outputs.claim`. Torch-free.
"""
from lavo_zoo.outputs.checks import (
    CHECKPOINT_FILES,
    RUN_FILES,
    belongs_to,
    check_folder_output,
    check_folder_writable,
    check_run_output,
    check_writable,
    is_run_folder,
    is_study_folder,
)
from lavo_zoo.outputs.claim import Outputs, check_figure_path, save_figure, scratch_folder
from lavo_zoo.outputs.kinds import (
    ANSWERS,
    ARCHIVE,
    BENCH_RECORD,
    DATA_FOLDER,
    EVAL_FILES,
    FIGURE,
    FORECAST,
    HF_FOLDER,
    MODEL_CARD,
    PCD,
    PLUGIN_FOLDER,
    PNG,
    RECALL_TABLE,
    RESULTS,
    STUDY_CSV,
    STUDY_FOLDER,
    STUDY_TABLE,
    SUMMARY_RECORDS,
    TEXT,
    WAV,
    FileKind,
    FolderKind,
    check_suffix,
    figure_formats,
)
from lavo_zoo.outputs.manifests import (
    NOT_REGULAR,
    check_recorded,
    present_files,
    recorded_files,
    sha256_file,
    tree_hashes,
    write_manifest,
)

__all__ = [
    "ANSWERS", "ARCHIVE", "BENCH_RECORD", "CHECKPOINT_FILES", "DATA_FOLDER", "EVAL_FILES", "FIGURE", "FORECAST",
    "HF_FOLDER", "MODEL_CARD", "NOT_REGULAR", "PCD", "PLUGIN_FOLDER", "PNG", "RECALL_TABLE", "RESULTS", "RUN_FILES",
    "STUDY_CSV", "STUDY_FOLDER", "STUDY_TABLE", "SUMMARY_RECORDS", "TEXT", "WAV", "FileKind", "FolderKind", "Outputs",
    "belongs_to", "check_figure_path", "check_folder_output", "check_folder_writable", "check_recorded",
    "check_run_output", "check_suffix", "check_writable", "figure_formats", "is_run_folder", "is_study_folder",
    "present_files", "recorded_files", "save_figure", "scratch_folder", "sha256_file", "tree_hashes", "write_manifest",
]
