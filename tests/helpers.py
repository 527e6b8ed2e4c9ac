"""Helpers shared by the tests: run the CLI (with the toy recipe) in a subprocess or a click command in process,
and compare checkpoint weights."""
import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner
from safetensors.torch import load_file

from lavo_zoo.errors import ZooError

TESTS = Path(__file__).resolve().parent
TOY = str(TESTS / "engine" / "data" / "toy.yaml")
RUNNER = str(TESTS / "run_cli.py")


_NO_SLURM: list[str] = []  # why no Slurm cluster answered, once this process found none


def slurm_missing() -> str | None:
    """Why a test cannot submit jobs to a Slurm cluster here (None: one answers, with a node up); CI starts a one-node
    cluster on its machine with .ci/slurm-cluster. Where none answers, the answer is kept for the rest of the
    session: ``sinfo`` retries its controller for about 9 s before it gives up, which every Slurm test paid again."""
    if not _NO_SLURM:
        reason = _ask_slurm()
        if reason is None:
            return None  # asked again next time: a test may take a node down
        _NO_SLURM.append(reason)
    return _NO_SLURM[0]


def _ask_slurm() -> str | None:
    import shutil

    if shutil.which("sbatch") is None:
        return "Slurm's sbatch is not installed (.ci/slurm-cluster install, then .ci/slurm-cluster start)"
    try:
        found = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"sinfo does not answer: {e}"
    states = [s.rstrip("*~#!%$@^-") for s in found.stdout.split()]
    if found.returncode or not any(s in ("idle", "mixed", "allocated", "completing") for s in states):
        return (f"no Slurm node is up (sinfo: {(found.stderr or found.stdout).strip() or 'nothing'}); start the "
                "one-node cluster with .ci/slurm-cluster start")
    return None


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, RUNNER, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, check=False)


def weights(checkpoint: Path) -> dict:
    return load_file(str(checkpoint / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def run_command(command: click.Command, args: list[str], input: str | None = None) -> tuple[int, str]:
    """(exit code, stdout + stderr) of ``command`` with the CLI's error mapping (ZooError -> its exit code)."""
    runner = CliRunner()
    result = runner.invoke(command, args, input=input, catch_exceptions=True)
    if isinstance(result.exception, ZooError):
        return result.exception.exit_code, result.output + f"error: {result.exception}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def score_summaries(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Averaged ROUGE F1 x 100 of paired summaries, through the rouge evaluator."""
    from lavo_zoo.evaluators.rouge import Rouge

    evaluator = Rouge()
    evaluator.update(list(hypotheses), list(references))
    return evaluator.compute()


def broken_plugins(folder: Path) -> Path:
    """A package, found through ``folder`` on the path, that declares three plugins: an attention whose module raises
    and a recipe whose module exits when imported, and a recipe whose commands module (its ``cli.py``) raises (what
    a half-installed or mistaken plugin does)."""
    dist = folder / "badplug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: badplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[lavo_zoo.plugins.attentions]\nbad_attn = badplug_attn:BadAttention\n"
                                           "[lavo_zoo.plugins.recipes]\nbad_recipe = badplug_exit:Recipe\n"
                                           "bad_commands = badplug_pkg.recipe:Recipe\n")
    (folder / "badplug_attn.py").write_text('raise RuntimeError("boom at import")\n')
    (folder / "badplug_exit.py").write_text("import sys\nsys.exit(3)\n")
    (folder / "badplug_pkg").mkdir()
    (folder / "badplug_pkg" / "__init__.py").write_text("")
    (folder / "badplug_pkg" / "cli.py").write_text('raise ImportError("the commands module is broken")\n')
    return folder
