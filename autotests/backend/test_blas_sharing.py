"""numpy's OpenBLAS runs its parallel jobs on the Cython backend's OpenMP threads, and a
forked child runs both libraries without waiting on threads that fork left behind.

The speed this buys is printed by ``benchmarks/bench_backend.py --only beside``; these
tests prove the mechanism and that nothing computes differently or hangs.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from needle_kernels.backend_ndarray import blas_sharing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code, **env):
    """Run code in a fresh interpreter (60 s at most: a hang fails, it does not stall the suite)."""
    full_env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    out = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def numpy_products_are_right():
    rng = np.random.default_rng(0)
    for m, n, p in ((1, 1, 1), (3, 700, 5), (256, 256, 256), (700, 300, 513), (1024, 64, 1024)):
        a, b = rng.standard_normal((m, n), dtype=np.float32), rng.standard_normal((n, p), dtype=np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(a @ b, want, rtol=1e-4, atol=1e-4 * n**0.5)


def test_numpy_runs_on_the_backends_threads(cpu):
    libs = blas_sharing.blas_libraries()
    assert any(lib["internal_api"] == "openblas" and lib["shares_threads"] for lib in libs), libs
    before = cpu.blas_threads_calls()
    numpy_products_are_right()
    assert cpu.blas_threads_calls() > before  # the parallel products went through the callback


def test_sharing_can_be_turned_off_and_on(cpu):
    try:
        libs = blas_sharing.share_blas_threads(False)
        assert not any(lib["shares_threads"] for lib in libs)
        before = cpu.blas_threads_calls()
        numpy_products_are_right()
        assert cpu.blas_threads_calls() == before  # OpenBLAS's own pool again
    finally:
        libs = blas_sharing.share_blas_threads(True)
    assert any(lib["shares_threads"] for lib in libs)


def test_the_environment_can_keep_openblas_pool():
    out = run_python("from needle_kernels.backend_ndarray import ndarray_backend_cpu, blas_sharing;"
                     "print(any(l['shares_threads'] for l in blas_sharing.blas_libraries()))",
                     NEEDLE_SHARE_BLAS_THREADS="0")
    assert out.split()[-1] == "False"


@pytest.mark.parametrize("env", [{"OMP_DYNAMIC": "true"}, {"OMP_THREAD_LIMIT": "1"}], ids=["dynamic", "limit"])
def test_jobs_run_on_threads_of_their_own_where_a_team_is_not_promised(env):
    # OpenBLAS's jobs wait for each other: where OpenMP may give fewer threads than jobs, the
    # callback starts threads for them, and the products are still right (no hang)
    code = ("import numpy as np; from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu;"
            "a = np.random.default_rng(0).standard_normal((700, 600), dtype=np.float32);"
            "assert np.allclose(a @ a.T, a.astype(np.float64) @ a.T.astype(np.float64), rtol=1e-4, atol=1e-2);"
            "print(cpu.blas_threads_calls())")
    assert int(run_python(code, OMP_NUM_THREADS="2", **env).split()[-1]) > 0


def test_a_forked_child_runs_kernels_and_numpy():
    # the parent's kernels and numpy products ran on libgomp's pool, which fork does not copy:
    # the child must neither wait for those threads nor give numpy's jobs to them
    code = """
import os, numpy as np
from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu
n = 512
a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
A, C = cpu.Array(n * n), cpu.Array(n * n)
cpu.from_numpy(a, A)
cpu.matmul(A, A, C, n, n, n)
a @ a
assert cpu.omp_threads_used() == min(2, cpu.get_num_threads())
pid = os.fork()
if pid == 0:
    cpu.matmul(A, A, C, n, n, n)
    ok = np.allclose(cpu.to_numpy(C, (n, n), (n, 1), 0), a @ a, rtol=1e-3, atol=1e-2)
    os._exit(0 if ok and cpu.get_num_threads() == 1 else 1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), cpu.get_num_threads())
"""
    child, parent_threads = run_python(code, OMP_NUM_THREADS="2").split()[-2:]
    assert child == "0"
    assert parent_threads == "2"  # only the child went down to one thread
