"""hw3's speed check times both matmuls on one OpenMP thread, and gives the thread count back.

The ratio is meant to measure the tiling, not the machine's cores or the other work on it, so the
timed calls of ``tiled_speedup`` must see ``omp_get_max_threads() == 1`` in libgomp (the runtime
both the course's plain kernel and a notebook's Cython kernel run on), and the count the notebook
had must be back afterwards. A kernel on the numpy backend records what libgomp says at each call.
"""
import ctypes
import ctypes.util
import sys
import types

from nbhelpers import COURSE

sys.path.insert(0, str(COURSE))
from coursekit.kernels import tiled_speedup  # noqa: E402
from needle_kernels.backend_ndarray import ndarray_backend_numpy as host  # noqa: E402

GOMP = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")


def _recording_module(seen):
    mod = types.ModuleType("recording")
    for attr in ("Array", "to_numpy", "from_numpy", "fill", "__tile_size__"):
        setattr(mod, attr, getattr(host, attr))

    def matmul_tiled(a, b, out, m, n, p):
        seen.append(GOMP.omp_get_max_threads())
        host.matmul_tiled(a, b, out, m, n, p)
    mod.matmul_tiled = matmul_tiled
    return mod


def test_the_timed_calls_run_on_one_thread_and_the_count_is_restored():
    before = GOMP.omp_get_max_threads()
    GOMP.omp_set_num_threads(3)
    try:
        seen = []
        ratio, plain, tiled = tiled_speedup(_recording_module(seen), n=64, repeats=4)
        assert seen == [3, 1, 1, 1, 1]  # the warm-up with the notebook's threads, then the timed calls
        assert GOMP.omp_get_max_threads() == 3
        assert ratio == plain / tiled and plain > 0 and tiled > 0
    finally:
        GOMP.omp_set_num_threads(before)
