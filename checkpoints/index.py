"""The versioned YAML index of released checkpoints: loading, validation and look-up.

The packaged ``index.yaml`` is used unless ``LAVO_ZOO_INDEX`` names another file (a private or staging index).
"""
from __future__ import annotations

import fnmatch
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lavo_zoo.errors import CheckpointError, UsageError, did_you_mean

INDEX_VERSION = 1
PACKAGED_INDEX = Path(__file__).with_name("index.yaml")
NAME_RE = re.compile(r"^[a-z0-9_]+/[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SOURCE_SCHEMES = ("https://", "http://", "hf://")


@dataclass(frozen=True)
class IndexEntry:
    """One released checkpoint: where it lives, what it must hash to, and what it scored."""

    name: str
    recipe: str
    config: str
    source: str
    sha256: str
    size: int
    license: str
    metrics: dict[str, Any]
    command: str
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The entry as the index's YAML holds it."""
        return asdict(self)


REQUIRED_KEYS = tuple(f for f in IndexEntry.__dataclass_fields__ if f != "description")
ALLOWED_KEYS = tuple(IndexEntry.__dataclass_fields__)


@dataclass
class Index:
    """All entries of one index file, by name."""

    path: Path
    entries: dict[str, IndexEntry] = field(default_factory=dict)

    def get(self, name: str) -> IndexEntry:
        """The entry called ``name``; a UsageError naming the closest entry when there is none."""
        if name not in self.entries:
            known = f"; known: {', '.join(sorted(self.entries))}" if self.entries else " (the index is empty)"
            raise UsageError(f"no checkpoint '{name}' in the index {self.path}{did_you_mean(name, self.entries)}"
                             f"{known}. See `lavo-zoo list checkpoints`.")
        return self.entries[name]

    def match(self, pattern: str | None) -> list[IndexEntry]:
        """Entries whose name matches the glob ``pattern`` (all when None), sorted by name."""
        return [e for n, e in sorted(self.entries.items()) if pattern is None or fnmatch.fnmatch(n, pattern)]


def default_name(recipe: str, where: str, what: str = "OUT") -> str:
    """The index name a release gets without ``--name``: ``<recipe>/<config>@v1``, the config from ``where`` (OUT's
    folder or file name without .tar.gz / .tgz, a repository's name) with every run of characters an index name does
    not take made one '-'.

    Raises:
        UsageError: nothing of ``where`` is left to name it by (OUT ``.``), saying to give ``--name``.
    """
    stem = Path(where).name.removesuffix(".tar.gz").removesuffix(".tgz")
    config = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.")
    name = f"{recipe}/{config}@v1"
    if not config or not NAME_RE.match(name):
        raise UsageError(f"{what} {where!r} gives no index name to default --name to; give --name "
                         f"{recipe}/<config>@<tag>")
    return name


def index_path() -> Path:
    """``LAVO_ZOO_INDEX`` when set, else the index shipped with the package."""
    return Path(os.environ["LAVO_ZOO_INDEX"]) if os.environ.get("LAVO_ZOO_INDEX") else PACKAGED_INDEX


def load_index(path: Path | None = None) -> Index:
    """Read and validate an index file; every problem is a CheckpointError naming the file and entry."""
    path = path or index_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CheckpointError(f"cannot read the checkpoint index {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise CheckpointError(f"the checkpoint index {path} is not UTF-8 text (byte {e.start}); give a YAML "
                              "index (LAVO_ZOO_INDEX)") from None
    except yaml.YAMLError as e:
        raise CheckpointError(f"the checkpoint index {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict) or data.get("version") != INDEX_VERSION or not isinstance(
            data.get("checkpoints"), list):
        raise CheckpointError(f"the checkpoint index {path} must be a mapping with 'version: {INDEX_VERSION}' and "
                              "a 'checkpoints' list")
    index = Index(path)
    for i, raw in enumerate(data["checkpoints"]):
        entry = validate_entry(raw, where=f"{path}, entry {i + 1}")
        if entry.name in index.entries:
            raise CheckpointError(f"{path}: checkpoint '{entry.name}' is listed twice")
        index.entries[entry.name] = entry
    return index


def validate_entry(raw: Any, where: str) -> IndexEntry:
    """An IndexEntry from one YAML mapping, or a CheckpointError saying which key is wrong and why."""
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where}: an entry must be a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in ALLOWED_KEYS:
            raise CheckpointError(f"{where}: unknown key '{key}'{did_you_mean(str(key), ALLOWED_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise CheckpointError(f"{where}: missing {', '.join(missing)}")
    problems = _entry_problems(raw)
    if problems:
        raise CheckpointError(f"{where} ({raw.get('name')}): " + "; ".join(problems))
    return IndexEntry(**{**raw, "description": str(raw.get("description", ""))})


def _entry_problems(raw: dict[str, Any]) -> list[str]:
    checks = [
        (isinstance(raw["name"], str) and NAME_RE.match(raw["name"]), "name must look like <domain>/<config>@<tag>"),
        (isinstance(raw["source"], str) and raw["source"].startswith(SOURCE_SCHEMES),
         "source must be an https:// URL or hf://org/repo@revision/path"),
        (isinstance(raw["sha256"], str) and SHA256_RE.match(raw["sha256"]),
         "sha256 was read as a number (YAML reads an unquoted run of digits as one): quote it, sha256: \"...\""
         if isinstance(raw["sha256"], (int, float)) and not isinstance(raw["sha256"], bool)
         else "sha256 must be 64 lowercase hex digits"),
        (isinstance(raw["size"], int) and not isinstance(raw["size"], bool) and raw["size"] > 0,
         "size must be a positive number of bytes"),
        (isinstance(raw["metrics"], dict) and _numeric_leaves(raw["metrics"]),
         "metrics must map metric names to finite numbers"),
    ]
    problems = [message for ok, message in checks if not ok]
    problems += [f"{k} must be a non-empty string" for k in ("recipe", "config", "license", "command")
                 if not (isinstance(raw[k], str) and raw[k].strip())]
    return problems


def _numeric_leaves(tree: dict[str, Any]) -> bool:
    return all(_numeric_leaves(v) if isinstance(v, dict) else isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v) for v in tree.values())
