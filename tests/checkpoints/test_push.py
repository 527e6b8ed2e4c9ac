"""``lavo-zoo push``: export, upload through the installed huggingface_hub to the loopback server's Hub endpoints,
download back through the verified hf:// path, print the pinned index entry (skipped without the hf extra)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from lavo_zoo.checkpoints.index import validate_entry
from lavo_zoo.checkpoints.push import parse_repo
from lavo_zoo.cli import main
from lavo_zoo.errors import UsageError
from tests.checkpoints.helpers import FileServer, sha256, split_card

TOKEN = "hf_test_token_0123456789"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def printed_entry(out: str) -> dict:
    return yaml.safe_load(out.split("checkpoints/index.yaml):")[1])[0]


def archive_card(data: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        name = next(n for n in tar.getnames() if n.endswith("/README.md"))
        return tar.extractfile(name).read().decode()


@pytest.fixture
def hub(server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FileServer:
    """The loopback server as the Hub (HF_ENDPOINT, read when pushing and downloading), expecting HF_TOKEN."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", server.base)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    server.token = TOKEN
    return server


def test_push_uploads_one_commit_verifies_it_and_prints_a_pinned_entry(
        hub: FileServer, checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(capsys, "push", str(checkpoint_dir), "hf://org/tiny-repo", "--name", "lm/tiny@v1",
                         "--description", "a test release")
    assert code == 0, err
    assert hub.repos == {"org/tiny-repo": {"private": False, "branches": {"main"}}}
    [commit] = hub.commits
    assert commit["revision"] == "main" and commit["summary"] == "lavo-zoo push lm/tiny@v1"
    assert sorted(commit["files"]) == ["README.md", "lm-tiny-v1.tar.gz"]
    archive = commit["files"]["lm-tiny-v1.tar.gz"]
    assert commit["files"]["README.md"].decode() == archive_card(archive), "the repository's card is the archive's"
    front, _ = split_card(commit["files"]["README.md"].decode())
    assert front["library_name"] == "lavo-zoo" and "lavo" in front["tags"]
    assert all(auth == f"Bearer {TOKEN}" for _, auth in hub.posts), "every Hub call carries the token"
    assert "/api/validate-yaml" in [path for path, _ in hub.posts], "the card went through the Hub's metadata check"

    entry = printed_entry(out)
    validate_entry(entry, where="printed")
    assert entry["source"] == f"hf://org/tiny-repo@{commit['oid']}/lm-tiny-v1.tar.gz"
    assert entry["sha256"] == sha256(archive) and entry["size"] == len(archive)
    assert entry["description"] == "a test release" and f"as commit {commit['oid']}" in out
    assert hub.requests[-1][0] == f"/org/tiny-repo/resolve/{commit['oid']}/lm-tiny-v1.tar.gz", "downloaded back"

    # the entry works as printed: in an index, `info` shows the card from the archive the verification cached
    index = tmp_path / "index.yaml"
    index.write_text(yaml.safe_dump({"version": 1, "checkpoints": [entry]}))
    monkeypatch.setenv("LAVO_ZOO_INDEX", str(index))
    downloads = len(hub.requests)
    code, out, _ = run(capsys, "info", "lm/tiny@v1")
    assert code == 0 and "model card (README.md in lm-tiny-v1.tar.gz)" in out and "## Intended use" in out
    assert run(capsys, "download", "lm/tiny@v1", "--unpack")[0] == 0
    assert len(hub.requests) == downloads, "served from the cache"


def test_push_to_a_branch_of_a_new_private_repository_and_again(hub: FileServer, checkpoint_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "push", str(checkpoint_dir), "hf://org/private-repo@v2", "--private",
                         "--filename", "weights.tgz", "--message", "release v2")
    assert code == 0, err
    assert hub.repos["org/private-repo"] == {"private": True, "branches": {"main", "v2"}}
    assert [(c["revision"], c["summary"], sorted(c["files"])) for c in hub.commits] == [
        ("v2", "release v2", ["README.md", "weights.tgz"])]
    entry = printed_entry(out)
    assert entry["name"] == "lm/private-repo@v1", "the default name: <recipe>/<repository>@v1"
    assert entry["source"] == f"hf://org/private-repo@{hub.commits[0]['oid']}/weights.tgz"

    code, out, err = run(capsys, "push", str(checkpoint_dir), "hf://org/private-repo@v2")  # the repository exists
    assert code == 0, err
    assert len(hub.commits) == 2 and hub.commits[1]["oid"] != hub.commits[0]["oid"]
    assert hub.repos["org/private-repo"]["private"] is True
    assert printed_entry(out)["source"].endswith(f"@{hub.commits[1]['oid']}/lm-private-repo-v1.tar.gz")


@pytest.mark.parametrize("ref", ["org/repo", "hf://org", "hf://org/repo/file.tar.gz", "hf://org/re po",
                                 "https://huggingface.co/org/repo", "hf://org/repo@"])
def test_bad_repository_references_are_usage_errors(ref: str, checkpoint_dir: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "push", str(checkpoint_dir), ref)
    assert code == 2 and "hf://ORG/REPO" in err
    with pytest.raises(UsageError):
        parse_repo(ref)


def test_parse_repo() -> None:
    assert parse_repo("hf://org/repo") == ("org/repo", "main")
    assert parse_repo("hf://my-org/my.repo_1@v1.0") == ("my-org/my.repo_1", "v1.0")


def test_push_without_huggingface_hub_says_how_to_install(checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    code, _, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo")
    assert code == 2 and "pip install 'lavo-zoo[hf]'" in err


def test_push_publishes_only_an_eval_of_these_weights_under_their_domain(
        hub: FileServer, checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scored = tmp_path / "score.json"  # what `lavo-zoo score --out` writes: predictions scored from files
    scored.write_text(json.dumps({"metric": "perplexity", "pred": "p.txt", "ref": None, "num_samples": 3,
                                  "metrics": {"perplexity": {"value": 1.5, "higher_is_better": False}}}))
    code, _, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo", "--results", str(scored))
    assert code == 2 and "output of `lavo-zoo score perplexity`" in err and not hub.posts
    code, _, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo", "--name", "tts/tiny@v1")
    assert code == 2 and "this is a 'lm' checkpoint" in err and not hub.posts


def test_push_offline_is_refused_before_any_work(hub: FileServer, checkpoint_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LAVO_ZOO_OFFLINE", "1")
    code, _, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo")
    assert code == 2 and "offline mode (LAVO_ZOO_OFFLINE=1)" in err and not hub.posts


def test_refused_credentials_and_writes_are_clear_failures(hub: FileServer, checkpoint_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    code, out, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo")
    assert code == 1 and "HTTP 401" in err and "hf auth login" in err and "hf_wrong" not in err
    assert out == "" and not hub.commits

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.refuse["commit"] = 403
    code, out, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo")
    assert code == 1 and "uploading to hf://org/repo@main failed" in err and "no write access" in err
    assert out == "" and not hub.commits


def test_an_upload_that_does_not_download_back_intact_is_not_offered_for_the_index(
        hub: FileServer, checkpoint_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hub.corrupt_uploads = True
    code, out, err = run(capsys, "push", str(checkpoint_dir), "hf://org/repo")
    assert code == 1 and "sha256 mismatch" in err and "failed verification" in err and "Do not add it" in err
    assert f"as commit {hub.commits[0]['oid']}" in err and "index entry" not in out


def test_push_in_a_subprocess_reads_hf_endpoint_at_import(hub: FileServer, checkpoint_dir: Path,
                                                          isolated_cache: Path, tmp_path: Path) -> None:
    """The installed huggingface_hub as a user runs it: a fresh process, HF_ENDPOINT and HF_TOKEN from the
    environment."""
    env = {**os.environ, "HF_ENDPOINT": hub.base, "HF_TOKEN": TOKEN, "LAVO_ZOO_CACHE": str(isolated_cache),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf-home")}
    script = "import sys; from lavo_zoo.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", script, "push", str(checkpoint_dir), "hf://org/sub-repo",
                           "--name", "lm/sub@v1"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    [commit] = hub.commits
    entry = printed_entry(done.stdout)
    assert entry["source"] == f"hf://org/sub-repo@{commit['oid']}/lm-sub-v1.tar.gz"
    assert entry["sha256"] == hashlib.sha256(commit["files"]["lm-sub-v1.tar.gz"]).hexdigest()


def test_push_format_hf_uploads_the_transformers_folder_and_verifies_every_file(
        hub: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from tests.checkpoints.test_hf_format import FOLDER_FILES, lm_checkpoint

    ckpt = lm_checkpoint(tmp_path / "run")
    code, out, err = run(capsys, "push", str(ckpt), "hf://org/tiny-hf", "--format", "hf", "--name", "lm/tiny@v1")
    assert code == 0, err
    [commit] = hub.commits
    assert commit["revision"] == "main" and commit["summary"] == "lavo-zoo push lm/tiny@v1 (hf)"
    assert sorted(commit["files"]) == FOLDER_FILES
    front, _ = split_card(commit["files"]["README.md"].decode())
    assert front["library_name"] == "transformers" and "model-index" not in front  # no --results given
    # the same folder as `export --format hf` writes (the card aside: it names no output path)
    assert run(capsys, "export", str(ckpt), str(tmp_path / "hf"), "--format", "hf", "--name", "lm/tiny@v1")[0] == 0
    for name in FOLDER_FILES:
        assert commit["files"][name] == (tmp_path / "hf" / name).read_bytes(), name
    downloaded = {path for path, _ in hub.requests}
    assert {f"/org/tiny-hf/resolve/{commit['oid']}/{name}" for name in FOLDER_FILES} <= downloaded
    assert f'from_pretrained("org/tiny-hf", revision="{commit["oid"]}")' in out and "index entry" not in out

    code, _, err = run(capsys, "push", str(ckpt), "hf://org/tiny-hf", "--format", "hf", "--filename", "x.tar.gz")
    assert code == 2 and "--filename" in err and len(hub.commits) == 1
