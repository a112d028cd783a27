"""hw3's speed check times both matmuls on one OpenMP thread, gives the thread count back, and
takes the median ratio of back-to-back pairs.

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
import coursekit.kernels as kernels  # noqa: E402
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


def test_the_ratio_is_the_median_pair_run_back_to_back_in_turns(monkeypatch):
    # a clock that moves only as far as each call says: the plain kernel always takes 10, the
    # tiled one a scripted time per call, so every pair's ratio is known
    clock, order = [0.0], []
    tiled_times = iter([1.0, 1.0, 5.0, 2.0, 100.0, 4.0])  # the warm-up, then five timed calls
    real_plain = kernels._plain_matmul()

    def plain(*args):
        real_plain(*args)
        order.append("plain")
        clock[0] += 10.0

    mod = _recording_module([])
    real_tiled = mod.matmul_tiled

    def tiled(*args):
        real_tiled(*args)
        order.append("tiled")
        clock[0] += next(tiled_times)

    mod.matmul_tiled = tiled
    monkeypatch.setattr(kernels, "_plain_matmul", lambda: plain)
    monkeypatch.setattr(kernels, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    ratio, plain_s, tiled_s = tiled_speedup(mod, n=64, repeats=5)
    # after the warm-up, each pair back to back, in turns first
    assert order == ["plain", "tiled"] + ["plain", "tiled", "tiled", "plain"] * 2 + ["plain", "tiled"]
    # pair ratios 10, 2, 5, 0.1 (that tiled call hit a busy moment), 2.5: the median is the fifth
    # pair's, with that pair's own times (the best call of each would have given 10)
    assert (ratio, plain_s, tiled_s) == (2.5, 10.0, 4.0)
