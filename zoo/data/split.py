"""A document's split fixed by a hash of its name: the same on every machine and every run, and a document never in
two splits (the built-in corpora cut from the standard library, an utterance of a speech corpus without a split)."""
from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from typing import Literal

SPLITS_90_5_5 = (("validation", 0.05), ("test", 0.05), ("train", 0.90))  # 20 buckets of crc32: 1, 1 and 18


def hash_split(name: str, shares: Sequence[tuple[str, float]] = SPLITS_90_5_5,
               digest: Literal["crc32", "sha256"] = "crc32") -> str:
    """The split of the document ``name``, fixed by a hash of it (the same on every machine and run).

    The hash gives a number u in [0, 1); the split is the first of ``shares`` whose cumulative share passes it.

    Args:
        name: what identifies the document (a module's name, a path relative to the standard library).
        shares: (split, share) in order, the shares summing to 1.
        digest: ``crc32``: u = (crc32 mod 20) / 20, shares in steps of 5%; ``sha256``: u from the digest's first
            32 bits.

    Returns:
        The split's name.
    """
    if digest == "crc32":
        u = (zlib.crc32(name.encode()) % 20) / 20
    else:
        u = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 2**32
    passed = 0.0
    for split, share in shares:
        passed += share
        if u < passed:
            return split
    return shares[-1][0]
