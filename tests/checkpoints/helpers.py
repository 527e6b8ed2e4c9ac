"""Helpers for the checkpoint tests: a loopback HTTP file server's behaviour (with the few Hub endpoints an upload
uses) and a fake checkpoint directory."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tarfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import torch
import yaml
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
    # the few Hub endpoints huggingface_hub's uploads use (see Handler.do_POST)
    repos: dict[str, dict] = field(default_factory=dict)     # repo id -> {"private", "branches"}
    commits: list[dict] = field(default_factory=list)        # {"repo", "revision", "oid", "summary", "files"}
    posts: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization header)
    commit_of: dict[str, str] = field(default_factory=dict)  # served path -> the commit that stored it
    token: str | None = None       # when set: every POST must carry "Authorization: Bearer <token>", else 401
    refuse: dict[str, int] = field(default_factory=dict)     # endpoint (create, branch, preupload, commit) -> status
    corrupt_uploads: bool = False  # store every committed file with its last byte changed
    redirects: dict[str, str] = field(default_factory=dict)  # path -> where a GET is sent instead (302 Location)

    def url(self, path: str) -> str:
        return self.base + path


class Handler(BaseHTTPRequestHandler):
    timeout = 10  # seconds a connection may idle before the server drops it

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        """What huggingface_hub asks first: size, commit and ETag (the sha256, as the Hub gives for LFS files)."""
        state: FileServer = self.server.state  # type: ignore[attr-defined]
        data = state.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Repo-Commit", state.commit_of.get(self.path, "0" * 40))
        self.send_header("ETag", f'"{sha256(data)}"')
        self.end_headers()

    def do_GET(self) -> None:
        state: FileServer = self.server.state  # type: ignore[attr-defined]
        wanted = self.headers.get("Range")
        state.requests.append((self.path, wanted))
        time.sleep(state.stall_s)
        if self.path in state.redirects:
            self.send_response(302)
            self.send_header("Location", state.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
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


    # ------------------------------------------------------------------------------------------------ Hub API
    def do_POST(self) -> None:
        """The Hub endpoints of an upload as huggingface_hub calls them (create_repo, create_branch, create_commit
        with the README.md check): a repository is created once; preupload answers "regular" for every file, so no
        LFS transfer is needed; the commit takes NDJSON with base64 file contents, stores every file where GET serves
        it (``/<repo>/resolve/<branch or commit>/<path>``) and answers a commit id."""
        state: FileServer = self.server.state  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlsplit(self.path).path
        state.posts.append((path, self.headers.get("Authorization")))
        if state.token is not None and self.headers.get("Authorization") != f"Bearer {state.token}":
            self._json(401, {"error": "Invalid credentials in Authorization header"})
            return
        if path == "/api/validate-yaml":
            self._validate_yaml(json.loads(body))
            return
        if path == "/api/repos/create":
            payload = json.loads(body)
            repo = f"{payload['organization']}/{payload['name']}"
            if "create" in state.refuse:
                self._json(state.refuse["create"], {"error": f"You cannot create {repo}"})
            elif repo in state.repos:
                self._json(409, {"error": "You already created this model repo", "url": f"{state.base}/{repo}"})
            else:
                state.repos[repo] = {"private": payload.get("visibility") == "private", "branches": {"main"}}
                self._json(200, {"url": f"{state.base}/{repo}"})
            return
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(branch|preupload|commit)/([^/]+)", path)
        if match is None:
            self._json(404, {"error": f"no such endpoint {path}"})
            return
        repo, endpoint, revision = match.group(1), match.group(2), unquote(match.group(3))
        if endpoint in state.refuse:
            self._json(state.refuse[endpoint], {"error": f"refused by the test server ({endpoint})"})
        elif repo not in state.repos:
            self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        elif endpoint == "branch":
            branches = state.repos[repo]["branches"]
            self._json(409 if revision in branches else 200, {})
            branches.add(revision)
        elif revision not in state.repos[repo]["branches"]:
            self._json(404, {"error": f"Revision not found: {revision}"}, {"X-Error-Code": "RevisionNotFound"})
        elif endpoint == "preupload":
            files = json.loads(body)["files"]
            self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                        "oid": None} for f in files]})
        else:
            self._commit(state, repo, revision, body)

    def _commit(self, state: FileServer, repo: str, revision: str, body: bytes) -> None:
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        if any(line["key"] != "header" and line["key"] != "file" for line in lines):
            self._json(400, {"error": "only regular files are expected (preupload said so)"})
            return
        files = {line["value"]["path"]: base64.b64decode(line["value"]["content"]) for line in lines
                 if line["key"] == "file"}
        oid = hashlib.sha1(json.dumps([repo, revision, len(state.commits), sorted(files)]).encode()).hexdigest()
        for name, data in files.items():
            stored = data[:-1] + bytes([data[-1] ^ 1]) if state.corrupt_uploads and data else data
            for ref in (revision, oid):
                state.files[f"/{repo}/resolve/{ref}/{name}"] = stored
                state.commit_of[f"/{repo}/resolve/{ref}/{name}"] = oid
        state.commits.append({"repo": repo, "revision": revision, "oid": oid, "summary": header["summary"],
                              "files": files})
        self._json(200, {"commitUrl": f"{state.base}/{repo}/commit/{oid}", "commitOid": oid,
                         "pullRequestUrl": None})

    def _validate_yaml(self, payload: dict) -> None:
        """The Hub's model-card check: the front matter must be a YAML mapping."""
        match = re.match(r"^---\n(.*?\n)---\n", payload["content"], re.DOTALL)
        try:
            metadata = yaml.safe_load(match.group(1)) if match else {}
        except yaml.YAMLError as e:
            self._json(400, {"errors": [{"message": f"invalid YAML: {e}"}]})
            return
        if not isinstance(metadata, dict):
            self._json(400, {"errors": [{"message": "the metadata must be a mapping"}]})
            return
        self._json(200, {"errors": [], "warnings": []})

    def _json(self, status: int, data: dict, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


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


def split_card(text: str) -> tuple[dict, str]:
    """(front matter, body) of a model card."""
    match = re.match(r"^---\n(.*?\n)---\n(.*)$", text, re.DOTALL)
    if match is None:
        return {}, text
    return yaml.safe_load(match.group(1)) or {}, match.group(2)


def tar_with(path: Path, members: list[tuple[str, bytes | None, bytes]]) -> Path:
    """A .tar.gz of (name, link target or None, content) members."""
    with tarfile.open(path, "w:gz") as tar:
        for name, link, data in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path
