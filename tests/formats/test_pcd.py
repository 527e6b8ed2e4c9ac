"""The .pcd reader and writer: all three encodings, LZF, the real PCN demo scans, and every refusal."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from lavo_zoo.errors import DataError
from lavo_zoo.formats.pcd import (
    ENCODINGS,
    lzf_compress,
    lzf_decompress,
    read_pcd,
    read_pcd_records,
    write_pcd,
)

HEADER = ("# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH {n}\nHEIGHT 1\n"
          "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {data}\n")


def _cloud(n: int = 500, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, 3)) * 0.3).astype(np.float32)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_round_trip_is_exact(tmp_path: Path, encoding: str) -> None:
    points = _cloud()
    path = write_pcd(tmp_path / f"c.{encoding}.pcd", points, encoding)
    assert np.array_equal(read_pcd(path, expected_points=500), points)
    assert read_pcd(write_pcd(tmp_path / "empty.pcd", np.zeros((0, 3)), encoding)).shape == (0, 3)


def test_binary_layouts_match_the_pcl_definition(tmp_path: Path) -> None:
    """binary is row major (x0 y0 z0 x1 ...); binary_compressed decompresses to column major (x0 x1 ... y0 ...)."""
    points = _cloud(7)
    body = write_pcd(tmp_path / "b.pcd", points, "binary").read_bytes()
    assert body.endswith(points.astype("<f4").tobytes())
    raw = write_pcd(tmp_path / "c.pcd", points, "binary_compressed").read_bytes()
    block = raw[raw.index(b"DATA binary_compressed\n") + len(b"DATA binary_compressed\n"):]
    size, full = struct.unpack("<II", block[:8])
    assert full == 7 * 12 and len(block) == 8 + size
    assert lzf_decompress(block[8:], full) == points.T.astype("<f4").tobytes()


def test_lzf_hand_built_streams() -> None:
    # literal run "abc" (ctrl 2), then a back reference of length 6, offset 3: ctrl (6-2)<<5, offset byte 3-1
    assert lzf_decompress(b"\x02abc\x80\x02", 9) == b"abcabcabc"
    # long back reference: length 20 = 7 + 11 + 2 (ctrl 0xE0, extra byte 11), offset 1 (byte 0): a run of 'a'
    assert lzf_decompress(b"\x00a\xe0\x0b\x00", 21) == b"a" * 21


@pytest.mark.parametrize("seed", [0, 1])
def test_lzf_round_trip_and_compresses_redundant_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for data in (rng.integers(0, 3, size=5000).astype(np.uint8).tobytes(), rng.bytes(3000), b"", b"xy",
                 np.repeat(rng.normal(size=40).astype("<f4"), 50).tobytes()):
        packed = lzf_compress(data)
        assert lzf_decompress(packed, len(data)) == data
    redundant = np.repeat(np.arange(100, dtype="<f4"), 30).tobytes()
    assert len(lzf_compress(redundant)) < len(redundant) / 10


def test_lzf_interoperates_with_liblzf() -> None:
    lzf = pytest.importorskip("lzf", reason="python-lzf (liblzf's binding) is not installed; optional cross-check")
    data = np.round(np.random.default_rng(3).normal(size=4000), 2).astype("<f4").tobytes()
    assert lzf.decompress(lzf_compress(data), len(data)) == data
    assert lzf_decompress(lzf.compress(data, 2 * len(data)), len(data)) == data


def test_extra_fields_counts_and_organised_clouds(tmp_path: Path) -> None:
    """rgb / normal fields, COUNT > 1 and WIDTH x HEIGHT organised clouds: x, y, z come out in point order."""
    header = ("VERSION .7\nFIELDS x y z rgb normal\nSIZE 4 4 8 4 4\nTYPE F F F U F\nCOUNT 1 1 1 1 3\nWIDTH 2\n"
              "HEIGHT 2\nPOINTS 4\nDATA {}\n")
    rows = [(0.5, 1.5, -2.0, 255, 0.0, 0.0, 1.0), (1, 2, 3, 7, 1, 0, 0), (4, 5, 6, 8, 0, 1, 0), (7, 8, 9, 9, 0, 0, 1)]
    text = header.format("ascii") + "".join(" ".join(map(str, r)) + "\n" for r in rows)
    (tmp_path / "a.pcd").write_text(text)
    expected = np.array([r[:3] for r in rows], np.float32)
    assert np.array_equal(read_pcd(tmp_path / "a.pcd"), expected)
    _, records = read_pcd_records(tmp_path / "a.pcd")
    assert records["normal"].shape == (4, 3) and list(records["rgb"]) == [255, 7, 8, 9]
    rec = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f8"), ("rgb", "<u4"), ("normal", "<f4", (3,))])
    body = np.array([(r[0], r[1], r[2], r[3], r[4:]) for r in rows], dtype=rec)
    (tmp_path / "b.pcd").write_bytes(header.format("binary").encode() + body.tobytes())
    assert np.array_equal(read_pcd(tmp_path / "b.pcd"), expected)
    columns = b"".join(body[name].tobytes() for name in rec.names)
    packed = lzf_compress(columns)
    (tmp_path / "c.pcd").write_bytes(header.format("binary_compressed").encode()
                                     + struct.pack("<II", len(packed), len(columns)) + packed)
    assert np.array_equal(read_pcd(tmp_path / "c.pcd"), expected)


def test_real_pcn_demo_scans(shared_data: Path, tmp_path: Path) -> None:
    demo = shared_data / "pcn-demo"
    files = sorted(demo.glob("*.pcd"))
    if not files:
        pytest.skip(f"no .pcd files in {demo}")
    for path in files:
        text = path.read_text().splitlines()
        n = int(next(line.split()[1] for line in text if line.startswith("POINTS")))
        points = read_pcd(path)
        body = np.array([[float(v) for v in line.split()] for line in text[text.index("DATA ascii") + 1:]])
        assert points.shape == (n, 3) and np.array_equal(points, body.astype(np.float32))
        assert np.abs(points).max() < 1.0  # PCN clouds are normalised into the unit cube
        for encoding in ENCODINGS:  # re-encoded in every encoding, read back bit-exact
            assert np.array_equal(read_pcd(write_pcd(tmp_path / f"{path.stem}.{encoding}.pcd", points, encoding)),
                                  points)


def _refused(tmp_path: Path, content: bytes | str, match: str, **kwargs) -> None:
    path = tmp_path / "bad.pcd"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(DataError, match=match) as info:
        read_pcd(path, **kwargs)
    assert str(path) in str(info.value)


GOOD_BODY = "0 0 0\n1 1 1\n"


@pytest.mark.parametrize("content, match", [
    ("hello world\n", "'HELLO' is not a PCD header keyword"),
    ("VERSION 0.7\nFIELDS x y z\n", "ends .* before its DATA line"),
    (HEADER.format(n=2, data="ascii").replace("SIZE 4 4 4\n", "") + GOOD_BODY, "lacks SIZE"),
    (HEADER.format(n=2, data="ascii").replace("SIZE 4 4 4", "SIZE 4 4") + GOOD_BODY, "SIZE has 2 entries"),
    (HEADER.format(n=2, data="ascii").replace("COUNT 1 1 1", "COUNT 1 1 1 1") + GOOD_BODY, "COUNT has 4 entries"),
    (HEADER.format(n=2, data="ascii").replace("TYPE F F F", "TYPE F F Q") + GOOD_BODY, "TYPE Q with SIZE 4"),
    (HEADER.format(n=2, data="ascii").replace("SIZE 4 4 4", "SIZE 4 4 2") + GOOD_BODY, "TYPE F with SIZE 2"),
    (HEADER.format(n=2, data="ascii").replace("WIDTH 2", "WIDTH 3") + GOOD_BODY, r"WIDTH x HEIGHT = 3 x 1 = 3"),
    (HEADER.format(n=2, data="ascii").replace("POINTS 2", "POINTS two") + GOOD_BODY, "POINTS must be integers"),
    (HEADER.format(n=2, data="lzma") + GOOD_BODY, "DATA 'lzma' is not a PCD encoding"),
    (HEADER.format(n=2, data="ascii").replace("FIELDS x y z", "FIELDS x y w") + GOOD_BODY, "no z field"),
    (HEADER.format(n=2, data="ascii").replace("WIDTH 2", "WIDTH 2\nWIDTH 2") + GOOD_BODY, "WIDTH appears twice"),
    (HEADER.format(n=2, data="ascii").replace("VIEWPOINT 0 0 0 1 0 0 0", "VIEWPOINT 0 0"), "VIEWPOINT must be 7"),
    (HEADER.format(n=3, data="ascii") + GOOD_BODY, "holds 2 points, the header's POINTS says 3"),
    (HEADER.format(n=1, data="ascii") + GOOD_BODY, r"bad.pcd:13: more points than the header's POINTS 1"),
    (HEADER.format(n=2, data="ascii") + "0 0 0\n1 1\n", r"bad.pcd:13: 2 values"),
    (HEADER.format(n=2, data="ascii") + "0 0 0\n1 x 1\n", r"bad.pcd:13: 'x' is not a number"),
    (HEADER.format(n=2, data="ascii") + "0 0 0\n1 nan 1\n", "NaN or infinite"),
    (HEADER.format(n=2, data="binary").encode() + bytes(20), "body has 20 bytes, 2 points of 12 bytes need 24"),
    (HEADER.format(n=2, data="binary").encode() + bytes(30), "6 bytes more than"),
    (HEADER.format(n=2, data="binary_compressed").encode() + b"\x01\x00", "needs an 8-byte size header"),
    (HEADER.format(n=2, data="binary_compressed").encode() + struct.pack("<II", 10, 24) + bytes(4),
     "announces 10 bytes, the file holds 4"),
    (HEADER.format(n=2, data="binary_compressed").encode() + struct.pack("<II", 4, 30) + bytes(4),
     "expands to 30 bytes, but 2 points of 12 bytes are 24"),
    (HEADER.format(n=2, data="binary_compressed").encode() + struct.pack("<II", 3, 24) + b"\x20\x05\x00",
     "corrupt LZF data: a back reference .* before the start"),
    (HEADER.format(n=2, data="binary_compressed").encode() + struct.pack("<II", 2, 24) + b"\x05a",
     "corrupt LZF data: a literal run of 6 bytes"),
    (HEADER.format(n=2, data="binary_compressed").encode() + struct.pack("<II", 4, 24) + b"\x02abc",
     "corrupt LZF data: the stream expands to 3 bytes"),
])
def test_malformed_files_are_refused(tmp_path: Path, content: bytes | str, match: str) -> None:
    _refused(tmp_path, content, match)


def test_missing_file_and_wrong_point_count(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nope.pcd: no such file"):
        read_pcd(tmp_path / "nope.pcd")
    path = write_pcd(tmp_path / "c.pcd", _cloud(10), "binary")
    with pytest.raises(DataError, match="c.pcd: 10 points, expected 16384"):
        read_pcd(path, expected_points=16384)


def test_an_out_of_range_coordinate_is_refused_without_a_numpy_warning(tmp_path: Path) -> None:
    import warnings

    path = tmp_path / "huge.pcd"
    path.write_text("VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 2\nHEIGHT 1\n"
                    "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS 2\nDATA ascii\n0 0 0\n1e300 0 0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match="NaN or infinite"):
            read_pcd(path)
