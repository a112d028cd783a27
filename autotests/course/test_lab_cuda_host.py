"""The host stand-in for cupy (``coursekit.cupy_host``) and the custom-operator lab's CUDA cells on it.

The stand-in runs CUDA C on the CPU (see its docstring); ``coursekit.cuda.cupy_or_host()`` hands it
out where cupy sees no GPU. Checked here:

* kernels that tile through ``__shared__`` memory with ``__syncthreads()`` give numpy's result, and
  the usual mistakes of such kernels fail visibly: a missing barrier, a barrier that only some
  threads reach, a shared element nobody loaded; what it cannot run is refused;
* the lab executes as in ``test_lectures.py``, but its ``import cupy`` finds the stand-in:
  ``CUDA_SOURCE`` is compiled with g++ and every launch runs the kernels on the CPU, through the
  lab's own glue (``RawModule``, grids and blocks, ``np.int32`` arguments, ``asarray``/``asnumpy``
  copies, ``synchronize``). The lab's own checks then compare the kernels with numpy, with finite
  differences and with the library's autograd, and its training asserts that the loss curve
  matches numpy's.
"""
import os
import re
import shutil

import numpy as np
import pytest

from nbhelpers import LECTURES, REPO, assert_ran_as_a_lecture, execute_notebook, kernel_env, output_text

LAB = LECTURES / "lab_custom_operator.ipynb"
FINAL_LOSS = re.compile(r"^\s*(.+?): final loss ([0-9.]+), test error ([0-9.]+)", re.M)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def execute_on_host(notebook, build_dir):
    """Execute ``notebook`` with the host stand-in as its ``cupy``; returns (notebook, seconds)."""
    shim = build_dir / "cupy_shim" / "cupy"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("import sys\nfrom coursekit import cupy_host\nsys.modules[__name__] = cupy_host\n")
    env = kernel_env({"CUPY_HOST_BUILD_DIR": str(build_dir)})
    env["PYTHONPATH"] = os.pathsep.join([str(shim.parent), env["PYTHONPATH"]])
    return execute_notebook(notebook, timeout=600, env=env)


# ---------------------------------------------------------------- the stand-in on its own

TILED = r"""
#define TILE 16
extern "C" __global__
void tiled_matmul(const float* A, const float* B, float* C, int M, int K, int N) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;  /* EARLY_RETURN */
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();  // FIRST
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // SECOND
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""


def run_tiled(source, M=37, K=50, N=29, seed=0):
    """(the kernel's C, A @ B) for random A (M, K), B (K, N), launched as a GPU would launch it."""
    from coursekit import cupy_host as cp

    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    C = cp.empty((M, N), dtype=cp.float32)
    kernel = cp.RawModule(code=source).get_function("tiled_matmul")
    kernel(((N + 15) // 16, (M + 15) // 16), (16, 16),
           (cp.asarray(A), cp.asarray(B), C, np.int32(M), np.int32(K), np.int32(N)))
    return cp.asnumpy(C), A.astype(np.float64) @ B


@needs_gxx
def test_shared_memory_tiles_with_barriers(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_HOST_BUILD_DIR", str(tmp_path))
    for M, K, N in [(37, 50, 29), (16, 16, 16), (1, 70, 3)]:
        C, want = run_tiled(TILED, M, K, N)
        np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)


@needs_gxx
def test_a_missing_barrier_gives_a_wrong_result(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_HOST_BUILD_DIR", str(tmp_path))
    for which in ("FIRST", "SECOND"):
        C, want = run_tiled(TILED.replace(f"__syncthreads();  // {which}", ""))
        assert not np.allclose(C, want, rtol=1e-3, atol=1e-3), f"a kernel without its {which.lower()} barrier passed"


@needs_gxx
def test_a_barrier_some_threads_skip_fails_the_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_HOST_BUILD_DIR", str(tmp_path))
    early = TILED.replace("/* EARLY_RETURN */", "if (row >= M || col >= N) return;")
    with pytest.raises(RuntimeError, match=r"__syncthreads\(\) number 1 of block .* reached by \d+ of its 256"):
        run_tiled(early)


@needs_gxx
def test_shared_memory_starts_as_nan(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_HOST_BUILD_DIR", str(tmp_path))
    C, _ = run_tiled(TILED.replace("Bs[ty][tx] = (col", "if (tx > 0) Bs[ty][tx] = (col"))
    assert np.isnan(C).any(), "reading a shared element nobody wrote did not show up"


@needs_gxx
@pytest.mark.parametrize("code", ["float v = __shfl_down_sync(0xffffffffu, a[0], 1); a[0] = v;",
                                  "extern __shared__ float buf[]; a[0] = buf[0];",
                                  "a[0] = __syncthreads_count(1);"])
def test_what_needs_a_real_gpu_is_refused(code):
    from coursekit import cupy_host as cp

    with pytest.raises(NotImplementedError, match="run them on a GPU"):
        cp.RawModule(code='extern "C" __global__ void k(float* a) { ' + code + " }")


def test_cupy_or_host_falls_back_to_the_stand_in(monkeypatch):
    from coursekit import cuda

    monkeypatch.setenv(cuda.ENV_VAR, "host")
    cp = cuda.cupy_or_host()
    assert cuda.is_host(cp) and cp.__name__ == "coursekit.cupy_host"
    assert "host stand-in" in cuda.describe(cp)
    monkeypatch.delenv(cuda.ENV_VAR)
    cp = cuda.cupy_or_host()
    try:
        import cupy
        gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        gpu = False
    assert cuda.is_host(cp) is not gpu, cuda.describe(cp)


# ---------------------------------------------------------------- the lab on the stand-in


@pytest.mark.slow
@needs_gxx
def test_lab_cuda_cells_run_on_the_host_stand_in(tmp_path, record_property):
    nb, seconds = execute_on_host(LAB, tmp_path)
    record_property("seconds", round(seconds, 1))
    print(f"{LAB.relative_to(REPO)} executed with the host stand-in for cupy in {seconds:.1f}s")
    text = output_text(nb)

    assert "CUDA device: host stand-in (g++)" in text, "the lab did not pick up the host stand-in for cupy"
    assert "skipped (no GPU)" not in text and "No GPU" not in text, "a CUDA cell was skipped"
    # the kernels against numpy and finite differences (cell 4), then against the library's autograd
    assert "CUDA kernels agree with numpy" in text
    assert re.search(r"cuda \(via host\): forward and gradients match the library's autograd", text)
    # training: the lab asserts every loss curve equals numpy's; the printed final losses say so too
    finals = {name: float(loss) for name, loss, _ in FINAL_LOSS.findall(text)}
    assert "cuda (via host)" in finals, f"no CUDA training run in the output: {finals}"
    assert abs(finals["cuda (via host)"] - finals["numpy"]) <= 0.01, finals
    assert re.search(r"CUDA \(naive kernels\):\s+[0-9.]+ ms", text), "no CUDA timing row"

    assert_ran_as_a_lecture(f"{LAB.stem} with the host stand-in", nb, seconds)
