"""Run logging: ``metrics.jsonl`` (one JSON object per logged step or evaluation), optional TensorBoard, and
progress shown as a bar on a terminal or as plain periodic lines otherwise (CI, files)."""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from lavo_zoo.atomic import write_file
from lavo_zoo.errors import ZooError


class MetricsLog:
    """Appends records to ``DIR/metrics.jsonl``; writes nothing when ``enabled`` is False (non-zero ranks)."""

    def __init__(self, out_dir: Path, enabled: bool, tensorboard: bool = False) -> None:
        self.path = out_dir / "metrics.jsonl"
        self.enabled = enabled
        self.writer = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ZooError("train.tensorboard=true needs the tensorboard package: "
                               "pip install 'lavo-zoo[tensorboard]'") from None
            self.writer = SummaryWriter(str(out_dir / "tensorboard"))

    def truncate_after(self, step: int) -> None:
        """Drop records beyond ``step`` (a resumed run replays them)."""
        if not (self.enabled and self.path.is_file()):
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # a line cut short by a process killed while appending it
                continue
            if isinstance(record, dict) and record.get("step", 0) <= step:
                kept.append(line)
        write_file(self.path, "".join(line + "\n" for line in kept), overwrite=True)

    def log(self, record: dict[str, Any]) -> None:
        """Append ``record`` (one step or validation) as a JSON line (non-finite values as null) and to TensorBoard when
        on; nothing on ranks other than 0."""
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with open(self.path, "a") as f:
            f.write(json.dumps(clean) + "\n")
        if self.writer is not None:
            split = record.get("split", "train")
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "epoch"):
                    self.writer.add_scalar(f"{split}/{key}", value, record["step"])

    def close(self) -> None:
        """Close the TensorBoard writer, if any."""
        if self.writer is not None:
            self.writer.close()


class Progress:
    """tqdm bar when ``stream`` is a terminal, else one plain line every ``every`` steps (and at the end)."""

    def __init__(self, total: int, initial: int, enabled: bool, every: int, desc: str = "train",
                 stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total, self.every, self.enabled = total, max(1, every), enabled
        self.start, self.start_step = time.time(), initial
        self.bar = None
        if enabled and self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=desc, file=self.stream, dynamic_ncols=True)

    def update(self, step: int, values: dict[str, float]) -> None:
        """Show step ``step`` with ``values`` (loss, lr): on the bar, or as a line every ``every`` steps and at the
        end."""
        if not self.enabled:
            return
        text = " ".join(f"{k}={v:.4g}" for k, v in values.items())
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix_str(text, refresh=False)
        elif step % self.every == 0 or step == self.total:
            rate = (step - self.start_step) / max(1e-9, time.time() - self.start)
            print(f"step {step}/{self.total} {text} ({rate:.2f} steps/s)", file=self.stream, flush=True)

    def message(self, text: str) -> None:
        """Print ``text`` on its own line (above the bar while one is shown)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        """Close the bar, if one is shown."""
        if self.bar is not None:
            self.bar.close()


@contextmanager
def phase(text: str, enabled: bool = True, say: Callable[[str], None] | None = None,
          quiet_below: float = 2.0) -> Iterator[None]:
    """Say ``text ...`` before a piece of preparation that may take long (tokenising and caching a corpus, building
    a split) and how long it took once done, so a long silent wait never looks like a hang. ``say`` prints a line
    (default: to stderr; a :class:`Progress`'s ``message`` while its bar is shown). The closing line is left out
    when it took under ``quiet_below`` seconds.

    Args:
        text: what is being prepared.
        enabled: say it (False: the block runs silently).
        say: prints a line (above), or None.
        quiet_below: seconds under which the closing line is left out.
    """
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    if enabled:
        say(f"{text} ...")
    start = time.time()
    yield
    took = time.time() - start
    if enabled and took >= quiet_below:
        say(f"{text}: done in {took:.1f} s")
