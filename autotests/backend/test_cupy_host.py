"""The host stand-in for cupy (``needle_kernels.backend_ndarray.cupy_host``) on its own.

The stand-in runs CUDA C on the CPU (see its docstring); the CUDA backend's tests
(``test_cuda_backend.py``) and a notebook's CUDA cells run on it where there is no GPU. Checked
here: kernels that tile through ``__shared__`` memory with ``__syncthreads()`` and kernels that
reduce with warp shuffles give numpy's result, and the usual mistakes of such kernels fail
visibly: a missing barrier, a barrier that only some threads reach, a shuffle a lane of its mask
never joins, a shared element nobody loaded; what it cannot run is refused.
"""
import shutil

import numpy as np
import pytest

from needle_kernels.backend_ndarray import cupy_host as cp

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(autouse=True)
def build_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_HOST_BUILD_DIR", str(tmp_path))


# ---------------------------------------------------------------- barriers and shared memory

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
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    C = cp.empty((M, N), dtype=cp.float32)
    kernel = cp.RawModule(code=source).get_function("tiled_matmul")
    kernel(((N + 15) // 16, (M + 15) // 16), (16, 16),
           (cp.asarray(A), cp.asarray(B), C, np.int32(M), np.int32(K), np.int32(N)))
    return cp.asnumpy(C), A.astype(np.float64) @ B


def test_shared_memory_tiles_with_barriers():
    for M, K, N in [(37, 50, 29), (16, 16, 16), (1, 70, 3)]:
        C, want = run_tiled(TILED, M, K, N)
        np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)


def test_a_missing_barrier_gives_a_wrong_result():
    for which in ("FIRST", "SECOND"):
        C, want = run_tiled(TILED.replace(f"__syncthreads();  // {which}", ""))
        assert not np.allclose(C, want, rtol=1e-3, atol=1e-3), f"a kernel without its {which.lower()} barrier passed"


def test_a_barrier_some_threads_skip_fails_the_launch():
    early = TILED.replace("/* EARLY_RETURN */", "if (row >= M || col >= N) return;")
    with pytest.raises(RuntimeError, match=r"__syncthreads\(\) number 1 of block .* reached by \d+ of its 256"):
        run_tiled(early)


def test_shared_memory_starts_as_nan():
    C, _ = run_tiled(TILED.replace("Bs[ty][tx] = (col", "if (tx > 0) Bs[ty][tx] = (col"))
    assert np.isnan(C).any(), "reading a shared element nobody wrote did not show up"


# ---------------------------------------------------------------- warp shuffles

# Each warp sums its 32 values with shuffles, then warp 0 sums the warps' sums (the block's
# threads are whole warps, as shuffles over a full mask need).
WARP_SUM = r"""
__device__ float warp_sum(float v) {
    for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
    return v;
}
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float sums[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v = threadIdx.x < n ? x[threadIdx.x] : 0.0f;
    v = warp_sum(v);  /* WARP */
    if (lane == 0) sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < blockDim.x / 32 ? sums[lane] : 0.0f);
        if (lane == 0) out[blockIdx.x] = v;
    }
}
"""


def block_sum(source, n=200, threads=256):
    x = np.arange(n, dtype=np.float32)
    out = cp.empty(1, dtype=cp.float32)
    cp.RawModule(code=source).get_function("block_sum")((1,), (threads,), (cp.asarray(x), out, np.int32(n)))
    return float(out.get()[0]), float(x.sum())


def test_warp_shuffles_reduce_a_block():
    got, want = block_sum(WARP_SUM)
    assert got == want


def test_each_shuffle_reads_its_own_lane():
    source = r"""
    extern "C" __global__ void lanes(int* out) {
        const int lane = threadIdx.x;
        out[0 * 32 + lane] = __shfl_sync(0xffffffffu, lane, 5);
        out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, lane, 3);
        out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, lane, 3, 8);
        out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
    }
    """
    out = cp.empty(4 * 32, dtype=cp.int32)
    cp.RawModule(code=source).get_function("lanes")((1,), (32,), (out,))
    lane = np.arange(32)
    down = np.where(lane % 8 + 3 < 8, lane + 3, lane)
    want = np.stack([np.full(32, 5), np.where(lane >= 3, lane - 3, lane), down, lane ^ 1])
    np.testing.assert_array_equal(out.get().reshape(4, 32), want)


def test_a_shuffle_some_lanes_skip_fails_the_launch():
    skipped = WARP_SUM.replace("v = warp_sum(v);  /* WARP */", "if (lane < 16) v = warp_sum(v);")
    with pytest.raises(RuntimeError, match=r"warp shuffle .* waits for lanes of its mask 0xffffffff"):
        block_sum(skipped)


@pytest.mark.parametrize("code", ["a[0] = __ballot_sync(0xffffffffu, a[0] > 0);",
                                  "extern __shared__ float buf[]; a[0] = buf[0];",
                                  "a[0] = __syncthreads_count(1);",
                                  "a[0] = __shfl_down(a[0], 1);"])
def test_what_needs_a_real_gpu_is_refused(code):
    with pytest.raises(NotImplementedError, match="run them on a GPU"):
        cp.RawModule(code='extern "C" __global__ void k(float* a) { ' + code + " }")


# ---------------------------------------------------------------- what the CUDA backend uses

def test_compiler_options_macros_and_ieee_arithmetic():
    source = r"""
    extern "C" __global__ void __launch_bounds__(SCALE) scale(float* a) { a[threadIdx.x] *= SCALE; }
    """
    a = cp.asarray(np.ones(4, dtype=np.float32))
    kernel = cp.RawModule(code=source, options=("-std=c++17", "-DSCALE=4", "--ftz=false", "--prec-div=true"))
    kernel.get_function("scale")((1,), (4,), (a,))
    np.testing.assert_array_equal(a.get(), 4.0)
    with pytest.raises(NotImplementedError, match="--use_fast_math"):
        cp.RawModule(code=source, options=("-DSCALE=4", "--use_fast_math"))


def test_a_struct_passes_by_value_as_a_one_element_array():
    source = r"""
    struct Pair { long long a, b; };
    extern "C" __global__ void add(const Pair p, long long* out) { out[0] = p.a + p.b; }
    """
    pair = np.zeros(1, dtype=[("a", np.int64), ("b", np.int64)])
    pair["a"], pair["b"] = 40, 2
    out = cp.empty(1, dtype=cp.int64)
    function = cp.RawModule(code=source).get_function("add")
    function((1,), (1,), (pair, out))
    assert out.get()[0] == 42
    with pytest.raises(TypeError, match="would misread"):
        function((1,), (1,), (np.zeros(1, dtype=np.int64), out))


def test_arrays_slice_into_the_same_memory_and_set_copies_in():
    a = cp.empty(3, dtype=cp.float32)
    a.set(np.array([1, 2, 3], dtype=np.float32))
    assert a[:0].size == 0 and a[:0].data.ptr == a.data.ptr
    assert a[1:].data.ptr == a.data.ptr + 4 and a[1:].get().tolist() == [2, 3]
    with pytest.raises(TypeError):
        a.set(np.zeros(3))
    with pytest.raises(ValueError):
        a.set(np.zeros(2, dtype=np.float32))
