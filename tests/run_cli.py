"""Run ``lavo-zoo`` in a subprocess with the test-only toy recipe registered (also under torchrun).

TOY_KILL_IN_SAVE_AT_STEP=N: while checkpoint step-N is being written, leave a half-written weights file in its
temporary directory and SIGKILL the process (a crash in the middle of a save).
"""
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import toy_recipe  # noqa: F401  (registers the "toy" recipe)

if os.environ.get("TOY_KILL_IN_SAVE_AT_STEP"):
    from lavo_zoo.engine import checkpoint_io

    target = f".tmp-step-{os.environ['TOY_KILL_IN_SAVE_AT_STEP']}-"
    real_save = checkpoint_io.save_safetensors_model

    def save_then_die(model, filename, *args, **kwargs):
        real_save(model, filename, *args, **kwargs)
        if target in str(filename):
            size = os.path.getsize(filename)
            with open(filename, "r+b") as f:
                f.truncate(size // 2)
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint_io.save_safetensors_model = save_then_die

from lavo_zoo.cli import main

sys.exit(main())
