"""The commands through ``lavo_zoo.cli.main``: download, cache ls|verify|rm, info, export, and eval's resolution."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml

from lavo_zoo.checkpoints import resolve_checkpoint
from lavo_zoo.checkpoints.archive import pack_checkpoint
from lavo_zoo.checkpoints.cache import list_entries
from lavo_zoo.checkpoints.index import validate_entry
from lavo_zoo.cli import main
from lavo_zoo.engine.evaluate import pin_results
from lavo_zoo.errors import CheckpointError
from tests.checkpoints.helpers import DATA, FileServer, sha256

DIGEST = sha256(DATA)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def export_and_publish(capsys: pytest.CaptureFixture[str], server: FileServer, checkpoint: Path, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> dict:
    """Export ``checkpoint``, serve the archive, and put the printed entry into an index used by the test."""
    out = tmp_path / "dist" / "lm-tiny-v1.tar.gz"
    code, text, err = run(capsys, "export", str(checkpoint), str(out), "--name", "lm/tiny@v1",
                          "--source", server.url("/lm-tiny-v1.tar.gz"))
    assert code == 0, err
    entry = yaml.safe_load(text.split("checkpoints/index.yaml once published):")[1])[0]
    server.files["/lm-tiny-v1.tar.gz"] = out.read_bytes()
    index = tmp_path / "index.yaml"
    index.write_text(yaml.safe_dump({"version": 1, "checkpoints": [entry]}))
    monkeypatch.setenv("LAVO_ZOO_INDEX", str(index))
    return entry


def test_download_command_prints_the_verified_path(server: FileServer, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    server.files["/a.bin"] = DATA
    code, out, _ = run(capsys, "download", server.url("/a.bin"), "--sha256", DIGEST, "--cache-dir", str(tmp_path / "c"))
    assert code == 0 and Path(out.strip()).read_bytes() == DATA and out.startswith(str(tmp_path / "c"))


def test_download_command_failures_exit_1_with_clear_messages(server: FileServer, closed_port: int,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    server.files["/a.bin"] = DATA
    code, _, err = run(capsys, "download", server.url("/a.bin"), "--sha256", "0" * 64)
    assert code == 1 and "0" * 64 in err and DIGEST in err and "Traceback" not in err
    code, _, err = run(capsys, "download", server.url("/nope.bin"))
    assert code == 1 and "not found (HTTP 404" in err
    code, _, err = run(capsys, "download", f"http://127.0.0.1:{closed_port}/a.bin")
    assert code == 1 and "Connection refused" in err
    code, _, err = run(capsys, "download", "lm/unknown@v1")
    assert code == 2 and "no checkpoint 'lm/unknown@v1'" in err


def test_a_redirect_to_a_local_file_or_in_a_loop_is_a_usage_error_naming_the_url(
        server: FileServer, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the cache")
    server.redirects = {"/local.bin": f"file://{secret}", "/loop-a": "/loop-b", "/loop-b": "/loop-a"}
    code, out, err = run(capsys, "download", server.url("/local.bin"))
    assert code == 2 and f"{server.url('/local.bin')} redirects to an address lavo-zoo does not download" in err
    assert "Traceback" not in err and "InvalidSchema" not in err and not out
    code, _, err = run(capsys, "download", server.url("/loop-a"))
    assert code == 2 and f"{server.url('/loop-a')} redirects in a loop" in err and "TooManyRedirects" not in err
    assert list_entries() == []


def test_offline_download_names_what_is_missing(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAVO_ZOO_OFFLINE", "1")
    code, _, err = run(capsys, "download", "https://example.org/x.tar.gz")
    assert code == 1 and "offline mode (LAVO_ZOO_OFFLINE=1): https://example.org/x.tar.gz is not in the cache" in err


def test_cache_ls_verify_rm(server: FileServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.files["/a.bin"] = DATA
    server.files["/b.bin"] = DATA[:100]
    assert run(capsys, "download", server.url("/a.bin"), "--sha256", DIGEST)[0] == 0
    assert run(capsys, "download", server.url("/b.bin"), "--sha256", sha256(DATA[:100]))[0] == 0
    code, out, _ = run(capsys, "cache", "ls")
    assert code == 0 and "2 entries" in out and server.url("/a.bin") in out and "complete" in out
    rows = json.loads(run(capsys, "cache", "ls", "*a.bin*", "--json")[1])
    assert [(r["state"], r["sha256"]) for r in rows] == [("complete", DIGEST)]
    header = out.splitlines()[1].split()
    assert header == ["key", "(folder)", "state", "on", "disk", "sha256", "index", "name", "(or", "source)"]

    code, out, _ = run(capsys, "cache", "verify")
    assert code == 0 and "2 cached file(s) verified" in out
    Path(rows[0]["path"]).write_bytes(b"tampered")
    code, out, err = run(capsys, "cache", "verify")
    assert code == 1 and "BAD" in out and "sha256 mismatch" in out and "1 of 2 cached files failed" in err

    code, out, _ = run(capsys, "cache", "rm", "*a.bin")
    assert code == 0 and "removed" in out
    assert "1 entry" in run(capsys, "cache", "ls")[1]
    assert run(capsys, "cache", "rm", "nothing-like-this")[0] == 2
    assert run(capsys, "cache", "rm")[0] == 2
    assert run(capsys, "cache", "rm", "--all")[0] == 0
    assert "0 entries" in run(capsys, "cache", "ls")[1]


def test_cache_rm_never_removes_a_folder_that_no_download_made(server: FileServer, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache root given as a folder of the user's (--cache-dir ., or ~) may hold a downloads/ of their own."""
    root = tmp_path / "home"
    photos = root / "downloads" / "my-photos"
    photos.mkdir(parents=True)
    (photos / "a.jpg").write_text("precious")
    (root / "downloads" / "fake-0123456789ab").mkdir()  # a name like a download's, without its record
    server.files["/a.bin"] = DATA
    assert run(capsys, "download", server.url("/a.bin"), "--sha256", DIGEST, "--cache-dir", str(root))[0] == 0
    code, out, _ = run(capsys, "cache", "ls", "--cache-dir", str(root))
    assert code == 0 and "1 entry" in out and "my-photos" not in out
    code, out, _ = run(capsys, "cache", "rm", "--all", "--cache-dir", str(root))
    assert code == 0 and out.count("removed") == 1
    assert (photos / "a.jpg").read_text() == "precious" and (root / "downloads" / "fake-0123456789ab").is_dir()
    monkeypatch.chdir(root)
    code, _, err = run(capsys, "cache", "rm", "--all", "--cache-dir", "")
    assert code == 2 and "is empty" in err and (photos / "a.jpg").exists()


def test_urls_that_cannot_be_requested_are_usage_errors_before_anything_is_written(
        capsys: pytest.CaptureFixture[str], isolated_cache: Path) -> None:
    for url, message in (("http://", "No host supplied"), ("https://[::1/x.tar.gz", "Invalid IPv6 URL"),
                         ("https://exa mple.org/x.tar.gz", "invalid character")):
        code, _, err = run(capsys, "download", url)
        assert code == 2 and f"'{url}' is not a valid URL" in err and message in err and "Traceback" not in err
    assert not isolated_cache.exists()


def test_an_unusable_cache_or_index_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path / "file"))
    code, _, err = run(capsys, "download", "https://example.org/x.tar.gz")
    assert code == 1 and f"cannot use the download cache {tmp_path / 'file'}" in err and "LAVO_ZOO_CACHE" in err
    (tmp_path / "index.yaml").write_bytes(b"\xff\xfe version: 1")
    monkeypatch.setenv("LAVO_ZOO_INDEX", str(tmp_path / "index.yaml"))
    code, _, err = run(capsys, "list", "checkpoints")
    assert code == 1 and "is not UTF-8 text" in err and "UnicodeDecodeError" not in err


def test_export_into_a_folder_that_cannot_exist_is_refused_before_packing(checkpoint_dir: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = run(capsys, "export", str(checkpoint_dir), str(tmp_path / "file" / "x.tar.gz"))
    assert code == 2 and f"OUT {tmp_path / 'file' / 'x.tar.gz'}: {tmp_path / 'file'} is a file, not a folder" in err
    assert ".tmp" not in err


def test_export_packs_verifies_and_prints_a_valid_entry(checkpoint_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dist" / "lm-tiny-v1.tar.gz"
    code, text, err = run(capsys, "export", str(checkpoint_dir), str(out), "--name", "lm/tiny@v1",
                          "--source", "https://example.org/lm-tiny-v1.tar.gz")
    assert code == 0, err
    digest, size = sha256(out.read_bytes()), out.stat().st_size
    assert f"sha256 {digest}" in text and f"size   {size}" in text
    entry = validate_entry(yaml.safe_load(text.split("published):")[1])[0], where="printed")
    assert (entry.sha256, entry.size, entry.recipe, entry.config) == (digest, size, "lm", "lm/tiny")
    assert entry.metrics == {"val": {"perplexity": 41.5}} and "step 200" in entry.command
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["lm-tiny-v1/README.md", "lm-tiny-v1/config.yaml", "lm-tiny-v1/meta.json",
                                          "lm-tiny-v1/model.safetensors"]

    with_state = tmp_path / "dist" / "resumable.tar.gz"
    assert run(capsys, "export", str(checkpoint_dir), str(with_state), "--with-train-state")[0] == 0
    with tarfile.open(with_state) as tar:
        assert "resumable/train_state.pt" in tar.getnames()

    # an existing archive (its sha256 may already be in an index) is never replaced without --overwrite
    published = out.read_bytes()
    code, _, err = run(capsys, "export", str(checkpoint_dir), str(out), "--with-train-state")
    assert code == 2 and f"{out} already exists" in err and "--overwrite" in err
    assert out.read_bytes() == published
    assert run(capsys, "export", str(checkpoint_dir), str(out), "--with-train-state", "--overwrite")[0] == 0
    with tarfile.open(out) as tar:
        assert "lm-tiny-v1/train_state.pt" in tar.getnames()


def test_export_uses_eval_results_for_metrics(checkpoint_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    meta = json.loads((checkpoint_dir / "meta.json").read_text())
    results = tmp_path / "test.json"
    scored = {"recipe": "lm", "checkpoint_sha256": meta["weights_sha256"], "split": "test",
              "metrics": {"perplexity": {"value": 38.0, "higher_is_better": False}}}
    results.write_text(json.dumps(pin_results(scored)))
    code, text, _ = run(capsys, "export", str(checkpoint_dir), str(tmp_path / "x.tar.gz"), "--results", str(results))
    entry = yaml.safe_load(text.split("published):")[1])[0]
    assert code == 0 and entry["name"] == "lm/x@v1" and entry["metrics"] == {"perplexity": 38.0}
    assert entry["command"] == "lavo-zoo eval lm/x@v1 --split test" and entry["source"].startswith("<publish")


def test_export_refuses_weights_that_do_not_match_meta(checkpoint_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (checkpoint_dir / "model.safetensors").write_bytes(b"truncated")
    code, _, err = run(capsys, "export", str(checkpoint_dir), str(tmp_path / "x.tar.gz"))
    assert code == 1 and "model.safetensors is corrupt or truncated" in err
    assert not (tmp_path / "x.tar.gz").exists()
    assert run(capsys, "export", str(checkpoint_dir), str(tmp_path / "x.zip"))[0] == 2


def test_exported_checkpoint_round_trips_through_index_download_and_eval_resolution(
        server: FileServer, checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    entry = export_and_publish(capsys, server, checkpoint_dir, tmp_path, monkeypatch)
    code, out, _ = run(capsys, "list", "checkpoints")
    assert code == 0 and "lm/tiny@v1" in out
    code, out, _ = run(capsys, "info", "lm/tiny@v1")
    assert code == 0 and f"sha256:      {entry['sha256']}" in out and "cached:      no" in out

    code, out, _ = run(capsys, "download", "lm/tiny@v1", "--unpack")
    assert code == 0
    unpacked = Path(out.strip())
    assert (unpacked / "model.safetensors").read_bytes() == (checkpoint_dir / "model.safetensors").read_bytes()
    assert not (unpacked / "train_state.pt").exists()
    info = json.loads(run(capsys, "info", "lm/tiny@v1", "--json")[1])
    assert info["cached"] and info["metrics"] == {"val": {"perplexity": 41.5}}
    assert info["card"] == (tmp_path / "dist" / "lm-tiny-v1.README.md").read_text()  # the card beside = inside

    monkeypatch.setenv("LAVO_ZOO_OFFLINE", "1")  # eval later, without network: served from the cache
    assert resolve_checkpoint("lm/tiny@v1") == unpacked
    assert resolve_checkpoint(f"{server.url('/lm-tiny-v1.tar.gz')}#sha256={entry['sha256']}") == unpacked
    assert len(server.requests) == 1


@pytest.mark.parametrize("tamper", ["weights-and-meta", "config-and-meta", "added-file", "removed-card"])
def test_a_changed_unpacked_copy_is_found_and_unpacked_again(
        tamper: str, server: FileServer, checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The unpacked copy in the cache is checked against what was unpacked from the verified archive on every use:
    an edit that keeps the checkpoint self-consistent (weights or config changed together with meta.json's hashes)
    is found by `cache verify` and never loaded."""
    export_and_publish(capsys, server, checkpoint_dir, tmp_path, monkeypatch)
    unpacked = resolve_checkpoint("lm/tiny@v1")
    original = {p.name: p.read_bytes() for p in unpacked.iterdir()}
    meta = json.loads((unpacked / "meta.json").read_text())
    if tamper == "weights-and-meta":
        (unpacked / "model.safetensors").write_bytes(original["model.safetensors"][:-4] + b"\0\0\0\0")
        meta["weights_sha256"] = sha256((unpacked / "model.safetensors").read_bytes())
    elif tamper == "config-and-meta":
        (unpacked / "config.yaml").write_text("recipe: lm\nmodel:\n  num_layers: 24\n")
        meta.setdefault("files_sha256", {})["config.yaml"] = sha256((unpacked / "config.yaml").read_bytes())
    elif tamper == "added-file":
        (unpacked / "train_state.pt").write_bytes(b"not from the archive")
    else:
        (unpacked / "README.md").unlink()
    (unpacked / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()

    code, out, _ = run(capsys, "cache", "verify")
    assert code == 1 and "BAD" in out and "was changed after it was unpacked" in out
    monkeypatch.setenv("LAVO_ZOO_OFFLINE", "1")  # no download: the verified archive in the cache is unpacked again
    assert resolve_checkpoint("lm/tiny@v1") == unpacked
    assert "unpacking it again from the verified download" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in unpacked.iterdir()} == original
    code, out, _ = run(capsys, "cache", "verify")
    assert code == 0 and "1 cached file(s) verified" in out


def test_an_index_entry_of_another_recipe_is_refused(server: FileServer, checkpoint_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    entry = export_and_publish(capsys, server, checkpoint_dir, tmp_path, monkeypatch)  # an lm checkpoint
    index = tmp_path / "index.yaml"
    index.write_text(yaml.safe_dump({"version": 1, "checkpoints": [{**entry, "name": "tts/tiny@v1",
                                                                    "recipe": "tts", "config": "tts/tiny"}]}))
    with pytest.raises(CheckpointError, match="the index entry says it is a 'tts' checkpoint, but its meta.json "
                                              "says 'lm'"):
        resolve_checkpoint("tts/tiny@v1")
    code, _, err = run(capsys, "download", "tts/tiny@v1", "--unpack")
    assert code == 1 and "the index entry is wrong" in err
    code, _, err = run(capsys, "eval", "tts/tiny@v1")
    assert code == 1 and "the index entry is wrong" in err


def test_new_file_at_a_url_replaces_what_was_unpacked(server: FileServer, checkpoint_dir: Path,
                                                       tmp_path: Path) -> None:
    first, second = tmp_path / "first.tar.gz", tmp_path / "second.tar.gz"
    pack_checkpoint(checkpoint_dir, first)
    (checkpoint_dir / "config.yaml").write_text("recipe: lm\nmodel:\n  num_layers: 2\n")
    pack_checkpoint(checkpoint_dir, second)
    url = server.url("/ckpt.tar.gz")
    for archive, layers in ((first, "1"), (second, "2")):
        server.files["/ckpt.tar.gz"] = archive.read_bytes()
        unpacked = resolve_checkpoint(f"{url}#sha256={sha256(archive.read_bytes())}")
        assert (unpacked / "config.yaml").read_text().endswith(f"num_layers: {layers}\n")


def test_downloaded_archive_with_an_escaping_member_is_not_unpacked(server: FileServer, tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(__file__, arcname="../../../escaped.py")
    server.files["/evil.tar.gz"] = archive.read_bytes()
    with pytest.raises(CheckpointError, match=r"refusing to unpack .*'../../../escaped.py'"):
        resolve_checkpoint(f"{server.url('/evil.tar.gz')}#sha256={sha256(archive.read_bytes())}")
    folder = list_entries()[0].folder
    assert sorted(p.name for p in folder.iterdir()) == ["evil.tar.gz", "record.json"]
    assert not list(tmp_path.rglob("escaped.py"))


def test_eval_of_a_url_that_is_not_an_archive_is_refused(server: FileServer,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    server.files["/weights.bin"] = DATA
    with pytest.raises(CheckpointError, match="not a checkpoint archive"):
        resolve_checkpoint(f"{server.url('/weights.bin')}#sha256={DIGEST}")


def test_help_ends_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["download"], ["cache"], ["cache", "ls"], ["cache", "verify"], ["cache", "rm"], ["info"],
                    ["export"], ["push"]):
        code, out, _ = run(capsys, *command, "--help")
        assert code == 0 and "Examples:" in out.split("Options:")[-1], command


def test_the_default_name_comes_from_out_and_out_dot_is_refused(checkpoint_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --name, OUT's name becomes the config (characters an index name does not take made '-'); an OUT
    that leaves nothing, or the current folder for --format hf, is refused before any work, saying what to give."""
    code, text, _ = run(capsys, "export", str(checkpoint_dir), str(tmp_path / "My Model v2.tar.gz"))
    assert code == 0 and yaml.safe_load(text.split("published):")[1])[0]["name"] == "lm/My-Model-v2@v1"
    code, _, err = run(capsys, "export", str(checkpoint_dir), str(tmp_path / "--.tar.gz"))
    assert code == 2 and "gives no index name to default --name to; give --name lm/<config>@<tag>" in err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("keep")
    code, _, err = run(capsys, "export", str(checkpoint_dir), ".", "--format", "hf", "--overwrite")
    assert code == 2 and "OUT . is the current folder" in err and (tmp_path / "mine.txt").read_text() == "keep"
