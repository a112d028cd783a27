"""The Cython backend keeps freed large buffers for the next Array of the same size."""
import os
import subprocess
import sys

import numpy as np
import pytest

from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu


def test_a_freed_large_buffer_is_reused_and_counted_apart_from_live_arrays():
    cpu.release_cached_buffers()
    n = 1 << 20  # 4 MB
    a = cpu.Array(n)
    address, live = a.ptr(), cpu.memory_stats()["live_bytes"]
    del a
    stats = cpu.memory_stats()
    assert stats["live_bytes"] == live - 4 * n and stats["cached_bytes"] == 4 * n
    b = cpu.Array(n)
    assert b.ptr() == address and cpu.memory_stats()["cached_bytes"] == 0
    cpu.from_numpy(np.arange(n, dtype=np.float32), b)  # the reused buffer holds what is written to it
    assert cpu.to_numpy(b, (n,), (1,), 0)[-1] == n - 1
    del b
    assert cpu.release_cached_buffers() == 4 * n and cpu.memory_stats()["cached_bytes"] == 0


def test_small_buffers_are_not_kept():
    cpu.release_cached_buffers()
    a = cpu.Array(100)
    del a
    assert cpu.memory_stats()["cached_bytes"] == 0


@pytest.mark.parametrize("value, expect", [("0", "cached 0"), ("2", "cached 0"), ("abc", "NK_SPARE_MB must be")])
def test_spare_limit_from_the_environment(value, expect):
    # 0 turns the cache off; a 4 MB buffer does not fit a 2 MB limit; nonsense is named
    code = ("from needle_kernels.backend_ndarray import ndarray_backend_cpu as c\n"
            "a = c.Array(1 << 20)\ndel a\nprint('cached', c.memory_stats()['cached_bytes'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NK_SPARE_MB": value})
    assert expect in out.stdout + out.stderr
