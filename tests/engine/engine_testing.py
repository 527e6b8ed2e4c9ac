"""Run the CLI (with the toy recipe) in a subprocess, and compare checkpoint weights."""
import os
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

TESTS = Path(__file__).resolve().parent.parent
TOY = str(TESTS / "engine" / "data" / "toy.yaml")
RUNNER = str(TESTS / "run_cli.py")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, RUNNER, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, check=False)


def weights(checkpoint: Path) -> dict:
    return load_file(str(checkpoint / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
