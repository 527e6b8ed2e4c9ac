"""The checkpoint index: the packaged file is valid, entries are validated, names resolve."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lavo_zoo.checkpoints import list_checkpoints, parse_reference
from lavo_zoo.checkpoints.index import PACKAGED_INDEX, load_index
from lavo_zoo.errors import CheckpointError, UsageError

ENTRY: dict[str, Any] = {
    "name": "lm/tiny-lavo@v1", "recipe": "lm", "config": "lm/tiny-lavo",
    "source": "https://example.org/lm-tiny-lavo-v1.tar.gz", "sha256": "ab" * 32, "size": 1234,
    "license": "Apache-2.0", "metrics": {"perplexity": 35.2}, "command": "lavo-zoo eval lm/tiny-lavo@v1",
    "description": "tiny LM"}


def write_index(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "checkpoints": list(entries)}))
    return path


def test_packaged_index_is_valid_and_lists_nothing_invented() -> None:
    assert load_index(PACKAGED_INDEX).entries == {}
    assert list_checkpoints() == []


def test_entries_list_and_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAVO_ZOO_INDEX", str(write_index(tmp_path / "i.yaml", ENTRY,
                                                         {**ENTRY, "name": "tts/x@v2", "recipe": "tts"})))
    assert [r["name"] for r in list_checkpoints("lm/*")] == ["lm/tiny-lavo@v1"]
    assert list_checkpoints("lm/*")[0] == {"name": "lm/tiny-lavo@v1", "recipe": "lm", "size": 1234,
                                           "license": "Apache-2.0", "description": "tiny LM"}
    ref = parse_reference("lm/tiny-lavo@v1")
    assert (ref.source, ref.sha256, ref.name) == (ENTRY["source"], ENTRY["sha256"], "lm/tiny-lavo@v1")
    with pytest.raises(UsageError, match=r"no checkpoint 'lm/tiny-lavo@v2' .*did you mean 'lm/tiny-lavo@v1'"):
        parse_reference("lm/tiny-lavo@v2")
    with pytest.raises(UsageError, match="contradicts"):
        parse_reference("lm/tiny-lavo@v1", sha256="cd" * 32)


@pytest.mark.parametrize("change, message", [
    ({"sha256": "xyz"}, "sha256 must be 64 lowercase hex digits"),
    ({"name": "tiny-lavo"}, "name must look like"),
    ({"source": "ftp://x/y"}, "source must be"),
    ({"size": 0}, "size must be a positive"),
    ({"metrics": {"ppl": "good"}}, "metrics must map"),
    ({"licence": "MIT"}, "unknown key 'licence' (did you mean 'license'?)"),
])
def test_invalid_entries_name_the_problem(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = write_index(tmp_path / "i.yaml", {**ENTRY, **change})
    with pytest.raises(CheckpointError, match=r"i\.yaml, entry 1") as err:
        load_index(path)
    assert message in str(err.value)


def test_an_unquoted_all_digit_sha256_is_named_as_such(tmp_path: Path) -> None:
    """YAML reads 64 unquoted digits as an integer: the message says to quote it, not that they are no hex."""
    digits = "1234567890" * 6 + "1234"
    text = yaml.safe_dump({"version": 1, "checkpoints": [{**ENTRY, "sha256": "DIGITS"}]}).replace("DIGITS", digits)
    (tmp_path / "i.yaml").write_text(text)
    with pytest.raises(CheckpointError, match=r"sha256 was read as a number .* quote it") as err:
        load_index(tmp_path / "i.yaml")
    assert "64 lowercase hex digits" not in str(err.value)
    (tmp_path / "i.yaml").write_text(text.replace(digits, f'"{digits}"'))
    assert load_index(tmp_path / "i.yaml").get(ENTRY["name"]).sha256 == digits


def test_index_structure_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="listed twice"):
        load_index(write_index(tmp_path / "i.yaml", ENTRY, ENTRY))
    (tmp_path / "v.yaml").write_text("version: 2\ncheckpoints: []\n")
    with pytest.raises(CheckpointError, match="version: 1"):
        load_index(tmp_path / "v.yaml")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_index(tmp_path / "missing.yaml")


def test_url_references() -> None:
    digest = "Ab" * 32
    assert parse_reference(f"https://h/x.tar.gz#sha256={digest}").sha256 == digest.lower()
    assert parse_reference("https://h/x.tar.gz", sha256=digest).sha256 == digest.lower()
    assert parse_reference("hf://org/repo@v1/x.tar.gz").sha256 is None
    with pytest.raises(UsageError, match="64 hex digits"):
        parse_reference("https://h/x.tar.gz#sha256=123")
    with pytest.raises(UsageError, match="neither an index name"):
        parse_reference("some/dir")
