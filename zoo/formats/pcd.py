"""PCL's ``.pcd`` point-cloud files (format v0.7, also the older v0.6 headers): a reader for ``DATA ascii``,
``binary`` and ``binary_compressed`` (LZF, in pure Python) with the header validated, and a writer for all three.

    points = read_pcd("partial/02691156/abc/00.pcd")                  # [N, 3] float32 (x, y, z)
    write_pcd("out.pcd", points, encoding="binary_compressed")

Everything malformed is refused with :class:`DataError` naming the file (and line, for ASCII bodies) and the
reason: a missing file, a header that is not PCD, a missing or inconsistent header key, WIDTH x HEIGHT != POINTS,
an unknown DATA encoding, no x/y/z fields, a body with too few or too many points, a corrupt LZF stream, and a
point count other than the one the caller expects.

Layouts (PCL's ``PCDReader``): ``binary`` stores the points one after another, each point's fields in FIELDS order
(row major); ``binary_compressed`` stores two little-endian uint32 (compressed size, uncompressed size) then an LZF
stream whose output is column major: all points' values of the first field, then of the second, and so on.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lavo_zoo.atomic import write_file
from lavo_zoo.errors import DataError

ENCODINGS = ("ascii", "binary", "binary_compressed")
_TYPES = {("F", 4): "f4", ("F", 8): "f8", ("I", 1): "i1", ("I", 2): "i2", ("I", 4): "i4", ("I", 8): "i8",
          ("U", 1): "u1", ("U", 2): "u2", ("U", 4): "u4", ("U", 8): "u8"}
_REQUIRED = ("FIELDS", "SIZE", "TYPE", "WIDTH", "HEIGHT", "POINTS", "DATA")
_KEYS = ("VERSION", "FIELDS", "SIZE", "TYPE", "COUNT", "WIDTH", "HEIGHT", "VIEWPOINT", "POINTS", "DATA")
_MAX_HEADER_LINES = 64


@dataclass
class PcdHeader:
    """The validated header of a ``.pcd`` file."""

    fields: list[str]
    sizes: list[int]
    types: list[str]
    counts: list[int]
    width: int
    height: int
    points: int
    data: str  # one of ENCODINGS
    version: str = "0.7"
    viewpoint: list[float] = field(default_factory=lambda: [0, 0, 0, 1, 0, 0, 0])

    def dtype(self) -> np.dtype:
        """The numpy record type of one point (little-endian; a field with COUNT > 1 is a sub-array)."""
        return np.dtype([(name, "<" + _TYPES[(t, s)], (c,) if c > 1 else ())
                         for name, t, s, c in zip(self.unique_names(), self.types, self.sizes, self.counts)])

    def unique_names(self) -> list[str]:
        """Field names made unique (PCL pads records with fields all called ``_``)."""
        seen: dict[str, int] = {}
        out = []
        for name in self.fields:
            seen[name] = seen.get(name, 0) + 1
            out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        return out


# ---------------------------------------------------------------------------------------------------------- LZF
def lzf_decompress(data: bytes, expected_size: int) -> bytes:
    """Decompress an LZF stream (liblzf's format) that must expand to exactly ``expected_size`` bytes.

    Control byte c < 32: a literal run of c + 1 bytes follows. Otherwise a back reference: length (c >> 5) + 2
    (with c >> 5 == 7 meaning 7 + the next byte), offset ((c & 31) << 8 | next byte) + 1 back from the output end.
    Raises ValueError on a corrupt stream.
    """
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        ctrl = data[i]
        i += 1
        if ctrl < 32:  # literal run
            run = ctrl + 1
            if i + run > n:
                raise ValueError(f"a literal run of {run} bytes at stream byte {i - 1} runs past the end of the data")
            out += data[i:i + run]
            i += run
        else:  # back reference
            length = ctrl >> 5
            if length == 7:
                if i >= n:
                    raise ValueError("the stream ends inside a back reference")
                length += data[i]
                i += 1
            if i >= n:
                raise ValueError("the stream ends inside a back reference")
            offset = ((ctrl & 31) << 8 | data[i]) + 1
            i += 1
            length += 2
            start = len(out) - offset
            if start < 0:
                raise ValueError(f"a back reference at stream byte {i} points {offset} bytes back, before the start "
                                 f"of the output ({len(out)} bytes so far)")
            if offset >= length:
                out += out[start:start + length]
            else:  # overlapping copy: repeats the last `offset` bytes
                for k in range(length):
                    out.append(out[start + k])
        if len(out) > expected_size:
            raise ValueError(f"the stream expands to more than the {expected_size} bytes the header announces")
    if len(out) != expected_size:
        raise ValueError(f"the stream expands to {len(out)} bytes, the header announces {expected_size}")
    return bytes(out)


def lzf_compress(data: bytes) -> bytes:
    """Compress ``data`` into an LZF stream that :func:`lzf_decompress` (and liblzf / PCL) read back.

    Greedy matching through a hash table of 3-byte prefixes; back references reach at most 8,192 bytes back and
    copy at most 264 bytes, literal runs hold at most 32 bytes.
    """
    out = bytearray()
    literals = bytearray()
    table: dict[bytes, int] = {}
    i, n = 0, len(data)

    def flush() -> None:
        for k in range(0, len(literals), 32):
            chunk = literals[k:k + 32]
            out.append(len(chunk) - 1)
            out.extend(chunk)
        literals.clear()

    while i < n:
        if i + 2 < n:
            key = data[i:i + 3]
            ref = table.get(key)
            table[key] = i
            if ref is not None and i - ref - 1 < 8192:
                limit = min(264, n - i)
                length = 3
                while length < limit and data[ref + length] == data[i + length]:
                    length += 1
                flush()
                off, code = i - ref - 1, length - 2
                if code < 7:
                    out.append((code << 5) | (off >> 8))
                else:
                    out.append((7 << 5) | (off >> 8))
                    out.append(code - 7)
                out.append(off & 0xFF)
                for k in range(i + 1, min(i + length, n - 2)):  # keep the table warm inside the match
                    table[data[k:k + 3]] = k
                i += length
                continue
        literals.append(data[i])
        i += 1
    flush()
    return bytes(out)


# ------------------------------------------------------------------------------------------------------- reading
def _parse_header(path: Path, raw: bytes) -> tuple[PcdHeader, int]:
    """(header, byte offset of the body) from the start of the file."""
    entries: dict[str, list[str]] = {}
    pos = 0
    for lineno in range(1, _MAX_HEADER_LINES + 1):
        end = raw.find(b"\n", pos)
        if end < 0:
            raise DataError(f"{path}: the header ends (line {lineno}) before its DATA line; the file is truncated "
                            "or not a PCD file")
        line = raw[pos:end].decode("ascii", errors="replace").strip()
        pos = end + 1
        if not line or line.startswith("#"):
            continue
        key, *values = line.split()
        key = key.upper()
        if key not in _KEYS:
            raise DataError(f"{path}:{lineno}: '{key}' is not a PCD header keyword (expected one of "
                            f"{', '.join(_KEYS)}); is this a .pcd file?")
        if key in entries:
            raise DataError(f"{path}:{lineno}: header key {key} appears twice")
        entries[key] = values
        if key == "DATA":
            break
    else:
        raise DataError(f"{path}: no DATA line in the first {_MAX_HEADER_LINES} lines; not a PCD file")
    missing = [k for k in _REQUIRED if k not in entries]
    if missing:
        raise DataError(f"{path}: the header lacks {', '.join(missing)} (a PCD header needs "
                        f"{', '.join(_REQUIRED)}, in that order)")

    def ints(key: str) -> list[int]:
        try:
            return [int(v) for v in entries[key]]
        except ValueError:
            raise DataError(f"{path}: header {key} must be integers, got '{' '.join(entries[key])}'") from None

    fields = entries["FIELDS"]
    sizes, counts = ints("SIZE"), ints("COUNT") if "COUNT" in entries else [1] * len(fields)
    types = [t.upper() for t in entries["TYPE"]]
    if not fields:
        raise DataError(f"{path}: header FIELDS is empty")
    for key, values in (("SIZE", sizes), ("TYPE", types), ("COUNT", counts)):
        if len(values) != len(fields):
            raise DataError(f"{path}: header {key} has {len(values)} entries but FIELDS names {len(fields)} "
                            f"({' '.join(fields)})")
    for name, t, s, c in zip(fields, types, sizes, counts):
        if (t, s) not in _TYPES:
            raise DataError(f"{path}: field '{name}' has TYPE {t} with SIZE {s}; PCD allows F 4/8, I 1/2/4/8, "
                            "U 1/2/4/8")
        if c < 1:
            raise DataError(f"{path}: field '{name}' has COUNT {c}; counts must be >= 1")
    for key in ("WIDTH", "HEIGHT", "POINTS"):
        if len(entries[key]) != 1:
            raise DataError(f"{path}: header {key} must be one integer, got '{' '.join(entries[key])}'")
    (width,), (height,), (points,) = ints("WIDTH"), ints("HEIGHT"), ints("POINTS")
    if width < 0 or height < 0 or points < 0:
        raise DataError(f"{path}: WIDTH, HEIGHT and POINTS must be >= 0, got {width}, {height}, {points}")
    if width * height != points:
        raise DataError(f"{path}: WIDTH x HEIGHT = {width} x {height} = {width * height} but POINTS is {points}")
    data = entries["DATA"][0].lower() if len(entries["DATA"]) == 1 else " ".join(entries["DATA"])
    if data not in ENCODINGS:
        raise DataError(f"{path}: DATA '{data}' is not a PCD encoding; expected one of {', '.join(ENCODINGS)}")
    viewpoint = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    if "VIEWPOINT" in entries:
        try:
            viewpoint = [float(v) for v in entries["VIEWPOINT"]]
        except ValueError:
            viewpoint = []
        if len(viewpoint) != 7:
            raise DataError(f"{path}: VIEWPOINT must be 7 numbers (tx ty tz qw qx qy qz), got "
                            f"'{' '.join(entries['VIEWPOINT'])}'")
    version = entries.get("VERSION", ["0.7"])[0] if entries.get("VERSION") else "0.7"
    return PcdHeader(fields, sizes, types, counts, width, height, points, data, version, viewpoint), pos


def _read_ascii(path: Path, header: PcdHeader, body: bytes, first_line: int) -> np.ndarray:
    dtype = header.dtype()
    columns = sum(header.counts)
    lines = [ln for ln in body.decode("ascii", errors="replace").splitlines()]
    rows: list[list[float]] = []
    for k, line in enumerate(lines):
        tokens = line.split()
        if not tokens:
            continue
        lineno = first_line + k
        if len(rows) == header.points:
            raise DataError(f"{path}:{lineno}: more points than the header's POINTS {header.points}")
        if len(tokens) != columns:
            raise DataError(f"{path}:{lineno}: {len(tokens)} values, but the header's FIELDS/COUNT describe "
                            f"{columns} per point")
        try:
            rows.append([float(t) for t in tokens])
        except ValueError:
            bad = next(t for t in tokens if not _is_number(t))
            raise DataError(f"{path}:{lineno}: '{bad}' is not a number") from None
    if len(rows) != header.points:
        raise DataError(f"{path}: the body holds {len(rows)} points, the header's POINTS says {header.points} "
                        "(truncated file?)")
    flat = np.asarray(rows, dtype=np.float64).reshape(header.points, columns)
    out = np.empty(header.points, dtype=dtype)
    col = 0
    for name, c in zip(dtype.names, header.counts):
        values = flat[:, col:col + c]
        with np.errstate(over="ignore", invalid="ignore"):  # out of the field's range: inf, refused by the caller
            out[name] = values[:, 0] if c == 1 else values
        col += c
    return out


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _read_binary(path: Path, header: PcdHeader, body: bytes) -> np.ndarray:
    dtype = header.dtype()
    need = header.points * dtype.itemsize
    if len(body) < need:
        raise DataError(f"{path}: the binary body has {len(body)} bytes, {header.points} points of "
                        f"{dtype.itemsize} bytes need {need} (truncated file?)")
    if len(body) > need:
        raise DataError(f"{path}: the binary body has {len(body) - need} bytes more than the header's "
                        f"{header.points} points of {dtype.itemsize} bytes (wrong POINTS?)")
    return np.frombuffer(body, dtype=dtype, count=header.points).copy()


def _read_compressed(path: Path, header: PcdHeader, body: bytes) -> np.ndarray:
    dtype = header.dtype()
    if len(body) < 8:
        raise DataError(f"{path}: binary_compressed data needs an 8-byte size header, the file has {len(body)} "
                        "bytes after DATA (truncated file?)")
    compressed, uncompressed = struct.unpack("<II", body[:8])
    need = header.points * dtype.itemsize
    if uncompressed != need:
        raise DataError(f"{path}: the compressed block expands to {uncompressed} bytes, but {header.points} "
                        f"points of {dtype.itemsize} bytes are {need} (wrong POINTS?)")
    if len(body) - 8 < compressed:
        raise DataError(f"{path}: the compressed block announces {compressed} bytes, the file holds "
                        f"{len(body) - 8} (truncated file?)")
    if need == 0:
        return np.empty(0, dtype=dtype)
    try:
        raw = lzf_decompress(body[8:8 + compressed], uncompressed)
    except ValueError as e:
        raise DataError(f"{path}: corrupt LZF data: {e}") from None
    out = np.empty(header.points, dtype=dtype)
    offset = 0
    for name in dtype.names:  # column major: every point's value of one field, then the next field
        sub = dtype.fields[name][0]
        size = header.points * sub.itemsize
        out[name] = np.frombuffer(raw, dtype=sub.base, count=header.points * max(1, int(np.prod(sub.shape))),
                                  offset=offset).reshape((header.points, *sub.shape))
        offset += size
    return out


def read_pcd_records(path: str | Path) -> tuple[PcdHeader, np.ndarray]:
    """(header, structured array with one record per point) of a ``.pcd`` file; see the module docstring."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    header, body_at = _parse_header(path, raw)
    body = raw[body_at:]
    if header.data == "ascii":
        first_line = raw[:body_at].count(b"\n") + 1
        records = _read_ascii(path, header, body, first_line)
    elif header.data == "binary":
        records = _read_binary(path, header, body)
    else:
        records = _read_compressed(path, header, body)
    return header, records


def read_pcd(path: str | Path, expected_points: int | None = None) -> np.ndarray:
    """The x, y, z coordinates of a ``.pcd`` file as float32 ``[N, 3]``; ``expected_points`` refuses other N."""
    header, records = read_pcd_records(path)
    missing = [f for f in ("x", "y", "z") if f not in header.fields]
    if missing:
        raise DataError(f"{path}: no {', '.join(missing)} field (FIELDS: {' '.join(header.fields)}); a point cloud "
                        "needs x, y and z")
    if any(header.counts[header.fields.index(f)] != 1 for f in ("x", "y", "z")):
        raise DataError(f"{path}: fields x, y, z must each have COUNT 1")
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range values become inf: refused just below
        points = np.stack([records[f].astype(np.float32) for f in ("x", "y", "z")], axis=1)  # [N, 3]
    if expected_points is not None and len(points) != expected_points:
        raise DataError(f"{path}: {len(points)} points, expected {expected_points}")
    if not np.isfinite(points).all():
        raise DataError(f"{path}: {int((~np.isfinite(points)).any(1).sum())} point(s) have NaN or infinite "
                        "coordinates; remove them (PCL's removeNaNFromPointCloud) before use")
    return points


# ------------------------------------------------------------------------------------------------------- writing
def write_pcd(path: str | Path, points: np.ndarray, encoding: str = "binary_compressed", overwrite: bool = True
              ) -> Path:
    """Write ``points`` [N, 3] as float32 x, y, z in a v0.7 ``.pcd`` file (``encoding`` one of ENCODINGS),
    atomically; with ``overwrite=False`` an existing file is refused.

    Args:
        path: the file to write.
        points: [N, 3] the cloud.
        encoding: ``ascii``, ``binary`` or ``binary_compressed`` (:data:`ENCODINGS`).
        overwrite: replace an existing file.

    Raises:
        ValueError: an unknown encoding or points not of shape [N, 3].
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got '{encoding}'")
    points = np.asarray(points, dtype=np.float32)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"points must have shape [N, 3], got {list(points.shape)}")
    n = len(points)
    header = ("# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\n"
              f"COUNT 1 1 1\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {encoding}\n")
    if encoding == "ascii":
        body = "".join(f"{x:.9g} {y:.9g} {z:.9g}\n" for x, y, z in points.tolist()).encode("ascii")
    elif encoding == "binary":
        body = points.astype("<f4").tobytes()
    else:
        raw = np.ascontiguousarray(points.astype("<f4").T).tobytes()  # column major: all x, all y, all z
        packed = lzf_compress(raw)
        body = struct.pack("<II", len(packed), len(raw)) + packed
    return write_file(Path(path), header.encode("ascii") + body, overwrite)
