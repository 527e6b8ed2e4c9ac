"""What the output policy's tests share: an evaluation's files claimed as ``eval`` claims them, a checkpoint and a
training run as the trainer leaves them, and the files under a folder."""
from __future__ import annotations

from pathlib import Path

from lavo_zoo.outputs import EVAL_FILES, Outputs

MANIFEST = str(EVAL_FILES.manifest)
EVALUATION = {"synthesized/a.wav": b"RIFF a", "synthesized/b.wav": b"RIFF b", "plots/a.png": b"\x89PNG a"}


def written(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def an_evaluation(folder: Path, files: dict[str, bytes] = EVALUATION, overwrite: bool = False) -> None:
    """What an evaluation leaves: its files in subfolders, claimed as ``eval`` claims them, with their manifest."""
    with Outputs("eval", overwrite, command_line="lavo-zoo eval ckpt --out x.json") as outputs:
        staged = outputs.folder(folder, EVAL_FILES)
        for name, data in files.items():
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            (staged / name).write_bytes(data)


def a_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("model.safetensors", "config.yaml", "meta.json"):
        (folder / name).write_text(name)
    return folder


def a_training_run(folder: Path) -> Path:
    """A run as the trainer leaves it: config, metrics, a checkpoint and the ``last`` link to it."""
    a_checkpoint(folder / "checkpoints" / "step-4")
    (folder / "checkpoints" / "last").symlink_to("step-4")
    (folder / "config.yaml").write_text("model: {}\n")
    (folder / "metrics.jsonl").write_text('{"step": 4}\n')
    return folder

