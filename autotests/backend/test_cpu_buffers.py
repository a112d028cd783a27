"""The Cython backend keeps freed large buffers for the next Array of the same size, and its
kernels' scratch buffers for their next call."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from backend_cases import get, put

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


def _packed_product(cpu, m, n, p, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, n), dtype=np.float32), rng.standard_normal((n, p), dtype=np.float32)
    out = cpu.Array(m * p)
    cpu.matmul(put(cpu, a), put(cpu, b), out, m, n, p)
    np.testing.assert_allclose(get(cpu, out).reshape(m, p), a @ b, rtol=1e-4, atol=1e-4 * n**0.5)


def test_a_kernels_scratch_buffers_are_kept_for_its_next_call():
    old = cpu.set_gemm_direct_limit(0)  # the packed kernel, which packs B and A into scratch buffers
    try:
        cpu.release_cached_buffers()
        assert cpu.memory_stats()["scratch_bytes"] == 0
        _packed_product(cpu, 300, 300, 300)
        kept = cpu.memory_stats()["scratch_bytes"]
        assert kept >= 300 * 300 * 4  # at least the packed B
        _packed_product(cpu, 300, 300, 300, seed=1)  # the same buffers again, holding new panels
        assert cpu.memory_stats()["scratch_bytes"] == kept
        assert cpu.release_cached_buffers() >= kept and cpu.memory_stats()["scratch_bytes"] == 0
    finally:
        cpu.set_gemm_direct_limit(old)


def test_scratch_buffers_are_shared_safely_by_threads_that_run_kernels_at_once():
    # kernels run without the GIL: each Python thread's products must get buffers of their own
    old = cpu.set_gemm_direct_limit(0)
    errors = []

    def work(seed):
        try:
            for i in range(6):
                _packed_product(cpu, 200 + 37 * seed, 150 + 11 * i, 90 + 23 * seed, seed=seed * 10 + i)
        except Exception as e:  # noqa: BLE001 - reported below with the others
            errors.append(e)

    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        cpu.set_gemm_direct_limit(old)
    assert not errors, errors[0]


def test_no_scratch_buffer_is_kept_when_the_spare_limit_is_0():
    code = ("import numpy as np\nfrom needle_kernels.backend_ndarray import ndarray_backend_cpu as c\n"
            "c.set_gemm_direct_limit(0)\na, b, o = c.Array(300 * 300), c.Array(300 * 300), c.Array(300 * 300)\n"
            "c.matmul(a, b, o, 300, 300, 300)\nprint('scratch', c.memory_stats()['scratch_bytes'])")
    for value, kept in (("0", False), ("1024", True)):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "NK_SPARE_MB": value})
        assert out.returncode == 0, out.stderr
        assert (out.stdout.split()[-1] != "0") == kept, (value, out.stdout)
