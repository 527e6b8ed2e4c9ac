"""Helpers for the checkpoint tests: a loopback HTTP file server's behaviour and a fake checkpoint directory."""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import torch
from safetensors.torch import save_file

DATA = bytes(range(256)) * 40  # 10240 bytes


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class FileServer:
    """What the loopback server serves and how it misbehaves; ``requests`` logs (path, Range header)."""

    base: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    range_support: bool = True
    cut_after: int = 3000          # bytes of body sent before closing, for the next `cuts` responses
    cuts: int = 0
    stall_s: float = 0.0           # delay before answering
    gate: threading.Event | None = None  # when set: hold each body until the event fires (at most 20 s)
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


class Handler(BaseHTTPRequestHandler):
    timeout = 10  # seconds a connection may idle before the server drops it

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        """What huggingface_hub asks first: size, commit and ETag (the sha256, as the Hub gives for LFS files)."""
        data = self.server.state.files.get(self.path)  # type: ignore[attr-defined]
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Repo-Commit", "0" * 40)
        self.send_header("ETag", f'"{sha256(data)}"')
        self.end_headers()

    def do_GET(self) -> None:
        state: FileServer = self.server.state  # type: ignore[attr-defined]
        wanted = self.headers.get("Range")
        state.requests.append((self.path, wanted))
        time.sleep(state.stall_s)
        data = state.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        match = re.fullmatch(r"bytes=(\d+)-", wanted or "") if state.range_support else None
        start = int(match.group(1)) if match else 0
        if match and start >= len(data):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if match else 200)
        if match:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if state.gate is not None:
            state.gate.wait(20)
        body = data[start:]
        if state.cuts > 0:
            state.cuts -= 1
            body = body[:state.cut_after]
        self.wfile.write(body)  # HTTP/1.0: the connection closes after this, short or not


def make_checkpoint(path: Path, with_train_state: bool = True) -> Path:
    """A small but real checkpoint directory as the training engine writes it."""
    path.mkdir(parents=True)
    save_file({"embed.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4)}, str(path / "model.safetensors"))
    (path / "config.yaml").write_text("recipe: lm\nmodel:\n  num_layers: 1\n")
    meta = {"recipe": "lm", "step": 200, "metrics": {"val": {"perplexity": 41.5}}, "versions": {"torch": "2.11"},
            "git_revision": "abc123", "weights_sha256": sha256((path / "model.safetensors").read_bytes())}
    (path / "meta.json").write_text(json.dumps(meta))
    if with_train_state:
        (path / "train_state.pt").write_bytes(b"optimizer state")
    return path
