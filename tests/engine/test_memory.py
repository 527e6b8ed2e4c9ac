"""Peak-memory measurement helpers (``lavo_zoo.engine.memory``)."""
from __future__ import annotations

import gc

import pytest

from lavo_zoo.engine.memory import memory_now, release_freed_memory

MiB = 2**20


def test_memory_freed_but_kept_by_the_allocator_is_returned_to_the_system():
    """Freed heap blocks stay resident (a region measured next would reuse them without growing the resident set,
    and read smaller than the same region measured first) until release_freed_memory returns them."""
    blocks = [bytearray(4096) for _ in range(25_000)]  # ~100 MiB in blocks below glibc's mmap threshold
    keep = bytearray(4096)  # allocated last: the top of the heap stays in use, so free() alone cannot shrink it
    for b in blocks:
        b[::512] = b"x" * len(b[::512])  # touch every page
    del blocks
    gc.collect()
    freed = memory_now()[0]
    if not release_freed_memory():
        pytest.skip("this C library has no malloc_trim")
    released = memory_now()[0]
    assert freed - released > 80 * MiB
    assert len(keep) == 4096
