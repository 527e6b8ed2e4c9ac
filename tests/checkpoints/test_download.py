"""Downloads against a loopback server: full, resumed, without Range, wrong hash, errors, offline, concurrent."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lavo_zoo.checkpoints.cache import entry_dir, list_entries, read_record
from lavo_zoo.checkpoints.download import fetch, parse_hf
from lavo_zoo.errors import CheckpointError, UsageError
from tests.checkpoints.helpers import DATA, FileServer, sha256

DIGEST = sha256(DATA)


def test_full_download_is_verified_recorded_and_reused(server: FileServer, isolated_cache: Path) -> None:
    server.files["/ckpt.tar.gz"] = DATA
    path = fetch(server.url("/ckpt.tar.gz"), DIGEST, name="lm/tiny@v1")
    assert path.read_bytes() == DATA and path.is_relative_to(isolated_cache)
    assert read_record(path.parent) | {"downloaded_at": None} == {
        "source": server.url("/ckpt.tar.gz"), "name": "lm/tiny@v1", "file": "ckpt.tar.gz", "sha256": DIGEST,
        "pinned": True, "size": len(DATA), "downloaded_at": None}
    assert fetch(server.url("/ckpt.tar.gz"), DIGEST) == path
    assert len(server.requests) == 1, "the second call is served from the cache"
    assert not list(path.parent.glob("*.part"))


def test_cut_off_transfer_resumes_with_range(server: FileServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.files["/a.bin"] = DATA
    server.cuts = 1
    path = fetch(server.url("/a.bin"), DIGEST)
    assert path.read_bytes() == DATA
    assert server.requests == [("/a.bin", None), ("/a.bin", "bytes=3000-")]
    assert "interrupted after 3000 bytes" in capsys.readouterr().err


def test_repeated_cut_offs_keep_the_part_file_for_the_next_run(server: FileServer) -> None:
    server.files["/a.bin"] = DATA
    server.cuts = 3
    with pytest.raises(CheckpointError, match=r"(?i)cut off after 9000 of 10240 bytes .*run the same command again"):
        fetch(server.url("/a.bin"), DIGEST)
    part = entry_dir(server.url("/a.bin")) / "a.bin.part"
    assert part.stat().st_size == 9000
    assert [(e.state, e.record["source"]) for e in list_entries()] == [("partial", server.url("/a.bin"))]
    assert fetch(server.url("/a.bin"), DIGEST).read_bytes() == DATA
    assert server.requests[-1] == ("/a.bin", "bytes=9000-")


def test_complete_part_file_is_accepted_after_416(server: FileServer) -> None:
    server.files["/a.bin"] = DATA
    folder = entry_dir(server.url("/a.bin"))
    folder.mkdir(parents=True)
    (folder / "a.bin.part").write_bytes(DATA)
    assert fetch(server.url("/a.bin"), DIGEST).read_bytes() == DATA
    assert server.requests == [("/a.bin", "bytes=10240-")]


def test_server_without_range_support_starts_over(server: FileServer) -> None:
    server.files["/a.bin"] = DATA
    server.range_support = False
    server.cuts = 1
    assert fetch(server.url("/a.bin"), DIGEST).read_bytes() == DATA
    assert server.requests == [("/a.bin", None), ("/a.bin", "bytes=3000-")]  # asked, got 200 and the whole file


def test_wrong_hash_leaves_nothing_and_names_both_hashes(server: FileServer, isolated_cache: Path) -> None:
    server.files["/a.bin"] = DATA
    wrong = "0" * 64
    with pytest.raises(CheckpointError) as err:
        fetch(server.url("/a.bin"), wrong)
    assert wrong in str(err.value) and DIGEST in str(err.value)
    assert list_entries() == []
    assert not [p for p in (isolated_cache / "downloads").rglob("*") if p.is_file()]


def test_404_and_connection_refused_and_timeout_are_clear(server: FileServer, closed_port: int) -> None:
    with pytest.raises(CheckpointError, match=r"not found \(HTTP 404"):
        fetch(server.url("/missing.tar.gz"), DIGEST)
    with pytest.raises(CheckpointError, match=r"cannot connect to 127\.0\.0\.1:\d+ .*Connection refused"):
        fetch(f"http://127.0.0.1:{closed_port}/a.bin", DIGEST)
    server.files["/slow.bin"] = DATA
    server.stall_s = 1.0
    with pytest.raises(CheckpointError, match="timed out waiting for 127.0.0.1"):
        fetch(server.url("/slow.bin"), DIGEST, timeout=(2.0, 0.2))
    assert list_entries() == []


def test_download_without_hash_warns_and_records_the_hash(server: FileServer,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    server.files["/a.bin"] = DATA
    path = fetch(server.url("/a.bin"))
    assert "no sha256 given" in capsys.readouterr().err
    assert read_record(path.parent)["sha256"] == DIGEST and read_record(path.parent)["pinned"] is False


def test_corrupt_cached_file_is_downloaded_again(server: FileServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.files["/a.bin"] = DATA
    path = fetch(server.url("/a.bin"), DIGEST)
    path.write_bytes(b"bit rot")
    assert fetch(server.url("/a.bin"), DIGEST).read_bytes() == DATA
    assert "is corrupt" in capsys.readouterr().err and len(server.requests) == 2


@pytest.mark.parametrize("variable", ["LAVO_ZOO_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_serves_cache_or_names_what_is_missing(server: FileServer, monkeypatch: pytest.MonkeyPatch,
                                                       variable: str) -> None:
    server.files["/a.bin"] = DATA
    cached = fetch(server.url("/a.bin"), DIGEST)
    monkeypatch.setenv(variable, "1")
    assert fetch(server.url("/a.bin"), DIGEST) == cached
    with pytest.raises(CheckpointError, match=rf"offline mode \({variable}=1\): lm/other@v2 is not in the cache"):
        fetch(server.url("/other.bin"), DIGEST, name="lm/other@v2")
    assert len(server.requests) == 1


def test_concurrent_threads_download_once(server: FileServer) -> None:
    server.files["/a.bin"] = DATA
    server.gate = threading.Event()
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(fetch(server.url("/a.bin"), DIGEST))) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    server.gate.set()
    for t in threads:
        t.join(20)
    assert len(results) == 2 and results[0] == results[1] and results[0].read_bytes() == DATA
    assert len(server.requests) == 1


def test_two_processes_download_one_file_once(server: FileServer, isolated_cache: Path) -> None:
    """Process A holds the lock mid-transfer; process B must wait for it and reuse its file."""
    server.files["/a.bin"] = DATA
    server.gate = threading.Event()
    script = ("import sys; from lavo_zoo.checkpoints.download import fetch; "
              "print(fetch(sys.argv[1], sys.argv[2]))")
    env = {**os.environ, "LAVO_ZOO_CACHE": str(isolated_cache)}

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", script, server.url("/a.bin"), DIGEST], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = start()
    deadline = time.monotonic() + 15
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    second = start()
    waiting = second.stderr.readline()  # blocks until B reports that it waits for the lock
    server.gate.set()
    outputs = [p.communicate(timeout=20)[0].strip() for p in (first, second)]
    assert "waiting for another process" in waiting
    assert first.returncode == second.returncode == 0
    assert outputs[0] == outputs[1] and Path(outputs[0]).read_bytes() == DATA
    assert len(server.requests) == 1


def test_hf_reference_goes_through_huggingface_hub_and_is_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def hf_hub_download(repo_id: str, filename: str, revision: str, local_dir: Path) -> str:
        calls.append((repo_id, filename, revision))
        out = Path(local_dir) / filename
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(DATA)
        return str(out)

    monkeypatch.setitem(sys.modules, "huggingface_hub", type(sys)("huggingface_hub"))
    monkeypatch.setattr(sys.modules["huggingface_hub"], "hf_hub_download", hf_hub_download, raising=False)
    path = fetch("hf://org/repo@abc123/ckpts/a.tar.gz", DIGEST)
    assert path.read_bytes() == DATA and calls == [("org/repo", "ckpts/a.tar.gz", "abc123")]
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.tar.gz", "record.json"]
    with pytest.raises(CheckpointError, match="sha256 mismatch"):
        fetch("hf://org/repo@abc123/ckpts/b.tar.gz", "1" * 64)


def test_hf_reference_through_the_real_huggingface_hub(server: FileServer, isolated_cache: Path) -> None:
    """The installed huggingface_hub against the loopback server as its endpoint (skipped without the hf extra)."""
    pytest.importorskip("huggingface_hub")
    server.files["/org/repo/resolve/abc123/ckpts/a.tar.gz"] = DATA
    env = {**os.environ, "HF_ENDPOINT": server.base, "LAVO_ZOO_CACHE": str(isolated_cache),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(isolated_cache / "hf-home")}
    script = "import sys; from lavo_zoo.checkpoints.download import fetch; print(fetch(sys.argv[1], sys.argv[2]))"
    ok = subprocess.run([sys.executable, "-c", script, "hf://org/repo@abc123/ckpts/a.tar.gz", DIGEST], env=env,
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    assert Path(ok.stdout.strip()).read_bytes() == DATA
    assert sorted(p.name for p in Path(ok.stdout.strip()).parent.iterdir()) == ["a.tar.gz", "record.json"]


def test_hf_without_huggingface_hub_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(CheckpointError, match=r"pip install 'lavo-zoo\[hf\]'"):
        fetch("hf://org/repo@main/a.tar.gz", DIGEST)


def test_parse_hf() -> None:
    assert parse_hf("hf://org/repo@v1.0/dir/x.tar.gz") == ("org/repo", "v1.0", "dir/x.tar.gz")
    assert parse_hf("hf://org/repo/x.zip") == ("org/repo", "main", "x.zip")
    with pytest.raises(UsageError):
        parse_hf("hf://org/x.zip")


def test_a_full_disk_mid_download_says_so_and_the_next_run_resumes(server: FileServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from lavo_zoo.checkpoints import download

    class FullAfter:
        """A file that takes 4000 bytes, then the disk is full."""

        def __init__(self, f) -> None:
            self.f, self.room = f, 4000

        def write(self, data: bytes) -> int:
            self.f.write(data[:self.room])
            self.room -= min(self.room, len(data))
            if self.room == 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return len(data)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

    server.files["/a.bin"] = DATA
    with monkeypatch.context() as m:
        m.setattr(download, "open", lambda path, mode: FullAfter(open(path, mode)), raising=False)  # noqa: SIM115
        with pytest.raises(CheckpointError, match=r"could not write the download of .*a\.bin\.part: the disk is "
                                                  r"full\. What arrived is kept there.*run the same command again"):
            fetch(server.url("/a.bin"), DIGEST)
    [part] = entry_dir(server.url("/a.bin")).glob("*.part")
    assert part.stat().st_size == 4000
    assert fetch(server.url("/a.bin"), DIGEST).read_bytes() == DATA
    assert server.requests[-1] == ("/a.bin", "bytes=4000-")
