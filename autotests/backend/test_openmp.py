"""The Cython + OpenMP backend really runs in parallel, and only where it pays.

``omp_threads_used()`` reports how many distinct OpenMP threads ran a chunk
of the most recent kernel, so these tests see the threads, not just the
results. Every matmul micro-kernel this CPU supports is checked as well.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
from backend_cases import get, put

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_set_and_get_num_threads(cpu):
    cpu.set_num_threads(1)
    assert cpu.get_num_threads() == 1
    cpu.set_num_threads(3)
    assert cpu.get_num_threads() == 3


@pytest.mark.parametrize("bad", [0, -2, "two", 1.5])
def test_bad_num_threads(cpu, bad):
    with pytest.raises(ValueError):
        cpu.set_num_threads(bad)


def test_default_follows_omp_num_threads():
    code = ("import importlib; m = importlib.import_module('needle_kernels.backend_ndarray.ndarray_backend_cpu');"
            "print(m.get_num_threads())")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, OMP_NUM_THREADS="3", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "3"


def test_small_work_runs_on_one_thread(cpu):
    cpu.set_num_threads(2)
    assert cpu.num_threads_for(1000) == 1
    assert cpu.num_threads_for(10**7) == 2
    cpu.set_num_threads(1)
    assert cpu.num_threads_for(10**7) == 1
    cpu.set_num_threads(2)
    a = put(cpu, np.ones(100))
    cpu.ewise_add(a, a, a)
    assert cpu.omp_threads_used() == 1


def _kernels(cpu, n):
    """Large calls of every kind of kernel, each with the work to split."""
    x = put(cpu, np.random.default_rng(0).random(n * n))
    out = cpu.Array(n * n)
    small = cpu.Array(n)
    one = cpu.Array(1)
    return {
        "fill": lambda: cpu.fill(out, 1.0),
        "ewise_add": lambda: cpu.ewise_add(x, x, out),
        "scalar_mul": lambda: cpu.scalar_mul(x, 2.0, out),
        "ewise_exp": lambda: cpu.ewise_exp(x, out),
        "compact (transpose)": lambda: cpu.compact(x, out, (n, n), (1, n), 0),
        "compact (flip)": lambda: cpu.compact(x, out, (n, n), (-n, 1), n * n - n),
        "ewise_setitem": lambda: cpu.ewise_setitem(x, out, (n, n), (1, n), 0),
        "reduce_sum (rows)": lambda: cpu.reduce_sum(x, small, n),
        "reduce_sum (all)": lambda: cpu.reduce_sum(x, one, n * n),
        "reduce_max_axis (first)": lambda: cpu.reduce_max_axis(x, small, 1, n, n),
        "matmul": lambda: cpu.matmul(x, x, out, n, n, n),
        "matmul_batched": lambda: cpu.matmul_batched(x, x, out, 16, n // 4, n // 4, n // 4),
        "matmul_tiled": lambda: cpu.matmul_tiled(x, x, out, n, n, n),
    }


KERNELS = ["fill", "ewise_add", "scalar_mul", "ewise_exp", "compact (transpose)", "compact (flip)", "ewise_setitem",
           "reduce_sum (rows)", "reduce_sum (all)", "reduce_max_axis (first)", "matmul", "matmul_batched",
           "matmul_tiled"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_large_kernels_use_every_thread(cpu, kernel):
    run = _kernels(cpu, 512)[kernel]
    cpu.set_num_threads(2)
    run()
    assert cpu.omp_threads_used() == 2, kernel
    cpu.set_num_threads(1)
    run()
    assert cpu.omp_threads_used() == 1, kernel


def test_thread_count_does_not_change_results(cpu):
    rng = np.random.default_rng(3)
    n = 700
    a = put(cpu, rng.standard_normal(n * n))
    b = put(cpu, rng.standard_normal(n * n))
    results = []
    for threads in (1, 2, 3):
        cpu.set_num_threads(threads)
        out = cpu.Array(n * n)
        s = cpu.Array(n)
        cpu.matmul(a, b, out, n, n, n)
        cpu.reduce_sum_axis(a, s, 1, n, n)
        results.append((get(cpu, out), get(cpu, s)))
    for got in results[1:]:
        # the same blocks in the same order: the thread count does not change any rounding
        np.testing.assert_array_equal(got[0], results[0][0])
        np.testing.assert_array_equal(got[1], results[0][1])


@pytest.mark.parametrize("m, n, p", [(5, 7, 3), (37, 300, 45), (260, 257, 130), (64, 1000, 64), (147, 300, 16),
                                     (3, 40, 33), (1, 600, 1), (16, 400, 100),
                                     # a last panel of rows of each height: 64 and 37 (a third of
                                     # 12 rows or less), 260 (two thirds), 70 (more; 4 of 6 rows)
                                     (70, 300, 45),
                                     # rows in several blocks, the last ones cut into pieces that
                                     # the threads take as they come free, the last piece partial
                                     (1000, 70, 50),
                                     # deep enough for a transposed A to split its depth among threads
                                     # (each share of 16x2100x147's in blocks of 445 rows of B, the last partial)
                                     (16, 2100, 147), (5, 1025, 3)])
@pytest.mark.parametrize("limit", [1 << 40, 1, 0], ids=["direct", "direct-strips", "packed"])
def test_every_gemm_kernel(cpu, m, n, p, limit):
    """Each instruction set's packed and direct kernels (B in place, or packed into strips when
    it is over the limit and A has 64 rows or more, and then taken a block of its depth at a
    time: 64 deep under a limit of 1 float, the last block partial; a deep product of a
    transposed A split by depth among the threads), on 1 and 2 threads, with rows and columns
    that leave partial tiles; without and with a bias (matmul_bias)."""
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((n, p)).astype(np.float32)
    bias = rng.standard_normal(p).astype(np.float32)
    want = a @ b
    assert cpu.available_isas()[-1] == "generic"
    old = cpu.set_gemm_direct_limit(limit)
    try:
        for name in cpu.available_isas():
            cpu.set_isa(name)
            assert cpu.isa()["name"] == name
            for threads in (1, 2):
                cpu.set_num_threads(threads)
                # and each operand given as its transpose's rows (matmul_t)
                for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
                    out = cpu.Array(m * p)
                    cpu.fill(out, np.nan)  # every element must be written
                    a_in = put(cpu, np.ascontiguousarray(a.T) if ta else a)
                    b_in = put(cpu, np.ascontiguousarray(b.T) if tb else b)
                    if ta or tb:
                        cpu.matmul_t(a_in, b_in, out, m, n, p, ta, tb)
                    else:
                        cpu.matmul(a_in, b_in, out, m, n, p)
                    np.testing.assert_allclose(get(cpu, out).reshape(m, p), want, rtol=1e-4, atol=1e-4 * n**0.5,
                                               err_msg=f"{name}, {threads} threads, transposed {ta, tb}")
                # and the product with a bias added as each tile is stored
                out = cpu.Array(m * p)
                cpu.fill(out, np.nan)
                cpu.matmul_bias(put(cpu, a), put(cpu, b), put(cpu, bias), out, m, n, p)
                np.testing.assert_allclose(get(cpu, out).reshape(m, p), want + bias, rtol=1e-4,
                                           atol=1e-4 * n**0.5, err_msg=f"{name}, {threads} threads, bias")
    finally:
        cpu.set_gemm_direct_limit(old)


def test_gemm_direct_limit_is_checked(cpu):
    with pytest.raises(ValueError, match="floats must be >= 0"):
        cpu.set_gemm_direct_limit(-1)


# the path each product takes with A and B as they are, A given as its transpose's rows, and B so
# (B's in-place limit 131072 floats, 48 rows, two threads)
PATHS = {(47, 70, 100): ("direct", "direct", "direct"),
         (48, 70, 100): ("packed", "packed", "packed"),
         (48, 70, 64): ("direct", "direct", "direct"),
         (300, 70, 65): ("packed", "packed", "packed"),
         (16, 70, 400): ("direct", "direct", "direct"),
         (100, 1023, 100): ("packed", "packed", "packed"),
         (100, 1024, 100): ("packed", "packed", "direct"),
         (70, 1100, 130): ("direct", "packed", "direct"),
         (16, 2048, 40): ("direct", "ksplit", "direct"),
         (4, 4, 4): ("small", "small", "small")}


@pytest.mark.parametrize("m, n, p", list(PATHS))
def test_products_on_either_side_of_the_direct_row_limit(cpu, m, n, p):
    """Under a row limit of 48 (Zen 3's row has one), a product of 48 rows or more and more than
    64 columns takes the packed kernel, the others read B in place, and one 1024 deep or more
    whose B is packed into strips (given as its transpose's rows, or over the in-place limit)
    takes the direct kernel unless A is transposed; a transposed A of few rows and great depth
    splits the depth among the threads. gemm_path says which kernel each takes, and each is
    right, with each operand given as itself or as its transpose's rows."""
    rng = np.random.default_rng(m + p)
    a, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((n, p)).astype(np.float32)
    old_rows, old_limit, old_threads = cpu.set_gemm_direct_rows(48), cpu.set_gemm_direct_limit(131072), \
        cpu.get_num_threads()
    cpu.set_num_threads(2)
    try:
        rule = cpu.gemm_direct_rule()
        assert (rule["rows"], rule["narrow"], rule["deep"]) == (48, 64, 1024), rule
        for (ta, tb), path in zip(((False, False), (True, False), (False, True)), PATHS[m, n, p]):
            assert cpu.gemm_path(m, n, p, ta, tb) == path, f"transposed {ta, tb}"
            out = cpu.Array(m * p)
            cpu.fill(out, np.nan)
            cpu.matmul_t(put(cpu, np.ascontiguousarray(a.T) if ta else a),
                         put(cpu, np.ascontiguousarray(b.T) if tb else b), out, m, n, p, ta, tb)
            np.testing.assert_allclose(get(cpu, out).reshape(m, p), a @ b, rtol=1e-4, atol=1e-4 * n**0.5,
                                       err_msg=f"transposed {ta, tb}")
    finally:
        cpu.set_num_threads(old_threads)
        assert cpu.set_gemm_direct_limit(old_limit) == 131072
        assert cpu.set_gemm_direct_rows(old_rows) == 48


@pytest.mark.parametrize("bad, match", [(-1, "rows must be >= 0"), (2.5, "rows")])
def test_gemm_direct_rows_is_checked(cpu, bad, match):
    with pytest.raises(ValueError, match=match):
        cpu.set_gemm_direct_rows(bad)


@pytest.mark.parametrize("fn", ["ewise_exp", "ewise_log", "ewise_tanh", "reduce_max"])
@pytest.mark.parametrize("n", [1, 15, 17, 1000, 70001])
def test_every_isa_for_exp_log_tanh_max(cpu, fn, n):
    rng = np.random.default_rng(n)
    x = np.concatenate([(rng.standard_normal(n) * 30), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 88.8, -104]])
    x = x.astype(np.float32)[: max(n, 1)]
    if fn == "ewise_log":
        x = np.abs(x)
    want = {"ewise_exp": np.exp, "ewise_log": np.log, "ewise_tanh": np.tanh, "reduce_max": np.max}[fn](x)
    for name in cpu.available_isas():
        cpu.set_isa(name)
        out = cpu.Array(1 if fn == "reduce_max" else x.size)
        getattr(cpu, fn)(put(cpu, x), out, *([x.size] if fn == "reduce_max" else []))
        np.testing.assert_allclose(get(cpu, out), np.atleast_1d(want), rtol=4e-6, atol=1e-37, err_msg=name)


@pytest.mark.parametrize("cols", [1, 7, 16, 33, 10001])
def test_every_isa_for_softmax_xent(cpu, ref, cols):
    # the row's exps summed as they are made (padded lanes must add nothing) and, for the
    # gradient, scaled as they are made: each instruction set against the reference
    rng = np.random.default_rng(cols)
    rows = 5
    z = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
    z[1, 0] = -np.inf
    labels = rng.integers(0, cols, rows).astype(np.float32)
    g = rng.standard_normal(rows).astype(np.float32)
    lse, loss, out = ref.Array(rows), ref.Array(rows), ref.Array(rows * cols)
    ref.softmax_xent(put(ref, z.ravel()), put(ref, labels), lse, loss, rows, cols)
    ref.softmax_xent_grad(put(ref, z.ravel()), put(ref, labels), lse, put(ref, g), out, rows, cols)
    want = [get(ref, lse), get(ref, loss), get(ref, out)]
    for name in cpu.available_isas():
        cpu.set_isa(name)
        lse, loss, out = cpu.Array(rows), cpu.Array(rows), cpu.Array(rows * cols)
        cpu.softmax_xent(put(cpu, z.ravel()), put(cpu, labels), lse, loss, rows, cols)
        cpu.softmax_xent_grad(put(cpu, z.ravel()), put(cpu, labels), put(cpu, want[0]), put(cpu, g), out, rows, cols)
        for got, w in zip([get(cpu, lse), get(cpu, loss), get(cpu, out)], want):
            np.testing.assert_allclose(got, w, rtol=2e-5, atol=1e-6, err_msg=name)


def test_unknown_isa(cpu):
    with pytest.raises(ValueError, match="unknown"):
        cpu.set_isa("sse9")


@pytest.mark.parametrize("given, spin", [({}, None), ({"GOMP_SPINCOUNT": "1000"}, "1000"),
                                         ({"OMP_WAIT_POLICY": "PASSIVE"}, None),
                                         ({"NEEDLE_SHARE_BLAS_THREADS": "0"}, "1000"),
                                         ({"NEEDLE_SHARE_BLAS_THREADS": "0", "GOMP_SPINCOUNT": "5"}, "5")],
                         ids=["default", "spin-given", "policy-given", "two-pools", "two-pools-spin-given"])
def test_idle_threads_spin_long_unless_another_pool_shares_the_cores(given, spin):
    # a process alone keeps libgomp's long spin (a kernel after some Python finds its threads
    # awake); where processes share the cores, whoever starts them sets a short one (the hub,
    # this suite's conftest.py; bench_wait_policy.py); in one process, OpenBLAS on a pool of its
    # own gets the short one from the package (bench_backend.py --only beside)
    code = ("import os, needle_kernels.backend_ndarray.ndarray_backend_cpu;"
            "print(os.environ.get('GOMP_SPINCOUNT'))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "NEEDLE_SHARE_BLAS_THREADS")}
    env.update(given, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(spin)
