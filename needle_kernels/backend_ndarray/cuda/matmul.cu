// Matrix multiplication: out (M, P) = a (M, N) @ b (N, P), float32.
//
// Shared-memory tiling with register blocking. A block of 256 threads owns a
// 64 x 64 tile of out. For each slice of 16 along N it stages a 64 x 16 tile
// of a and a 16 x 64 tile of b in shared memory, then each thread multiplies
// them into a 4 x 4 set of accumulators held in registers: every value read
// from shared memory is used 4 times, every value read from global memory 64
// times. Loads past the edges read 0, stores past the edges are skipped, so
// any M, N, P work.
//
// blockIdx.z walks the batch of matmul_batched; all three grid dimensions
// are grid-stride loops, so sizes beyond the grid limits still work.
#include "common.cuh"

// Sizes come from the Python side, which compiles the sources with them as -D
// flags and launches the kernels with the same numbers
// (ndarray_backend_cuda.LAUNCH_GEOMETRY and __tile_size__).
#if !defined(NK_TILE_SIZE) || !defined(NK_MATMUL_BLOCK) || !defined(NK_MATMUL_THREADS)
#error "compile with the -D flags of ndarray_backend_cuda.compile_defines()"
#endif

// The tiled layout of matmul_tiled: a matrix of `cols` columns stored as
// (rows/T, cols/T, T, T) with T = NK_TILE_SIZE.

#define BLOCK_M NK_MATMUL_BLOCK
#define BLOCK_N NK_MATMUL_BLOCK
#define BLOCK_K 16
#define THREADS NK_MATMUL_THREADS  // 16 x 16 threads, each computing THREAD_M x THREAD_N outputs
#define THREAD_M (BLOCK_M / 16)
#define THREAD_N (BLOCK_N / 16)
static_assert(NK_MATMUL_THREADS == 256, "the matmul block is 16 x 16 threads");
static_assert(NK_MATMUL_BLOCK % 16 == 0, "each of the 16 x 16 threads owns whole rows and columns of the tile");

// Where element (r, c) of a matrix with `cols` columns lives.
template <bool TILED>
__device__ __forceinline__ index_t element(index_t r, index_t c, index_t cols) {
    if (TILED) {
        const index_t t = NK_TILE_SIZE;
        return ((r / t) * (cols / t) + c / t) * (t * t) + (r % t) * t + (c % t);
    }
    return r * cols + c;
}

template <bool TILED>
__device__ __forceinline__ void matmul_blocks(const float* A, const float* B, float* C,
                                              index_t batch, index_t M, index_t N, index_t P) {
    // a's tile is stored transposed (k-major) so the inner loop reads a row
    // of 4 values per thread with a broadcast; the +1 column breaks the
    // 16-way bank conflict of the transposing store.
    __shared__ float a_tile[BLOCK_K][BLOCK_M + 1];
    __shared__ float b_tile[BLOCK_K][BLOCK_N];

    const int tid = threadIdx.x;
    const int tx = tid % 16;  // this thread's output columns: tx + 16 j
    const int ty = tid / 16;  // this thread's output rows:    ty + 16 i
    const index_t tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    const index_t tiles_p = (P + BLOCK_N - 1) / BLOCK_N;

    for (index_t z = blockIdx.z; z < batch; z += gridDim.z) {
        const float* a = A + z * M * N;
        const float* b = B + z * N * P;
        float* c = C + z * M * P;
        for (index_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
            for (index_t tp = blockIdx.x; tp < tiles_p; tp += gridDim.x) {
                const index_t row0 = tm * BLOCK_M;
                const index_t col0 = tp * BLOCK_N;
                float acc[THREAD_M][THREAD_N] = {};

                for (index_t k0 = 0; k0 < N; k0 += BLOCK_K) {
                    // Consecutive threads read consecutive k of a row of a
                    // and consecutive columns of b: coalesced loads.
#pragma unroll
                    for (int q = 0; q < BLOCK_M * BLOCK_K / THREADS; ++q) {
                        const int l = tid + q * THREADS;
                        const int r = l / BLOCK_K, k = l % BLOCK_K;
                        const index_t gr = row0 + r, gk = k0 + k;
                        a_tile[k][r] = (gr < M && gk < N) ? a[element<TILED>(gr, gk, N)] : 0.0f;
                    }
#pragma unroll
                    for (int q = 0; q < BLOCK_K * BLOCK_N / THREADS; ++q) {
                        const int l = tid + q * THREADS;
                        const int k = l / BLOCK_N, cc = l % BLOCK_N;
                        const index_t gk = k0 + k, gc = col0 + cc;
                        b_tile[k][cc] = (gk < N && gc < P) ? b[element<TILED>(gk, gc, P)] : 0.0f;
                    }
                    __syncthreads();

#pragma unroll
                    for (int k = 0; k < BLOCK_K; ++k) {
                        float ra[THREAD_M], rb[THREAD_N];
#pragma unroll
                        for (int i = 0; i < THREAD_M; ++i) ra[i] = a_tile[k][ty + 16 * i];
#pragma unroll
                        for (int j = 0; j < THREAD_N; ++j) rb[j] = b_tile[k][tx + 16 * j];
#pragma unroll
                        for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                            for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
                    }
                    // The next slice overwrites the tiles other threads may
                    // still be reading.
                    __syncthreads();
                }

#pragma unroll
                for (int i = 0; i < THREAD_M; ++i) {
#pragma unroll
                    for (int j = 0; j < THREAD_N; ++j) {
                        const index_t r = row0 + ty + 16 * i, cc = col0 + tx + 16 * j;
                        if (r < M && cc < P) c[element<TILED>(r, cc, P)] = acc[i][j];
                    }
                }
            }
        }
    }
}

// Row-major operands; gridDim.z > 1 (with batch > 1) for matmul_batched.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const float* a, const float* b, float* out, index_t batch, index_t m, index_t n, index_t p) {
    matmul_blocks<false>(a, b, out, batch, m, n, p);
}

// Operands in the tiled layout; m, n, p are multiples of NK_TILE_SIZE.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tiled(const float* a, const float* b, float* out, index_t batch, index_t m, index_t n, index_t p) {
    matmul_blocks<true>(a, b, out, batch, m, n, p);
}
