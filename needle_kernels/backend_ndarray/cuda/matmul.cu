// Matrix multiplication: out (M, P) = a (M, N) @ b (N, P), float32.
//
// A block of 256 threads owns a 128 x 128 tile of out; each thread keeps an
// 8 x 8 patch of it in registers. For each slice of 8 along N the block
// stages a 128 x 8 tile of a and an 8 x 128 tile of b in shared memory, and
// every thread reads 8 + 8 values there for its 64 multiply-adds. Two copies
// of the staged tiles alternate: while the block multiplies one slice, the
// next is already on its way from global memory into registers.
//
// Where n and p are multiples of 4 (and the arrays 16-byte aligned) loads and
// stores move four floats at once. Loads past the edges read 0, stores past
// the edges are skipped, so any M, N, P work.
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

#define BLOCK NK_MATMUL_BLOCK     // rows and columns of out per block
#define BLOCK_K 8                 // the slice of the summed dimension staged at a time
#define THREADS NK_MATMUL_THREADS // 16 x 16 threads
#define PATCH (BLOCK / 16)        // each thread's rows and columns of out: two runs of PATCH / 2
#define HALF (BLOCK / 2)
// a's tile is stored transposed (k-major) so a thread reads its rows as float4s; the 4
// extra columns move the second half of the transposing store to the other 16 banks.
#define A_PITCH (BLOCK + 4)
static_assert(NK_MATMUL_THREADS == 256, "the matmul block is 16 x 16 threads");
static_assert(BLOCK % 32 == 0 && PATCH % 2 == 0, "a thread's patch is two runs of whole float4s");
static_assert(BLOCK * BLOCK_K == 4 * THREADS, "each thread stages four values of a and four of b per slice");

// Where element (r, c) of a matrix with `cols` columns lives.
template <bool TILED>
__device__ __forceinline__ index_t element(index_t r, index_t c, index_t cols) {
    if (TILED) {
        const index_t t = NK_TILE_SIZE;
        return ((r / t) * (cols / t) + c / t) * (t * t) + (r % t) * t + (c % t);
    }
    return r * cols + c;
}

// v = the four elements (r, c..c+3) of a rows x cols matrix, 0 past its edges.
template <bool TILED, bool VEC>
__device__ __forceinline__ void load_run(float* v, const float* m, index_t r, index_t c, index_t rows, index_t cols) {
    if (VEC && r < rows && c + 3 < cols) {
        const float4 q = *reinterpret_cast<const float4*>(m + r * cols + c);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
        return;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = (r < rows && c + i < cols) ? m[element<TILED>(r, c + i, cols)] : 0.0f;
}

// Row r, columns c..c+3 of out from v, skipping what lies past its edges.
template <bool TILED, bool VEC>
__device__ __forceinline__ void store_run(float* m, const float* v, index_t r, index_t c, index_t rows, index_t cols) {
    if (r >= rows) return;
    if (VEC && c + 3 < cols) {
        *reinterpret_cast<float4*>(m + r * cols + c) = make_float4(v[0], v[1], v[2], v[3]);
        return;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (c + i < cols) m[element<TILED>(r, c + i, cols)] = v[i];
}

// The two copies of the staged tiles; the kernels declare them, so that their two
// instantiations of matmul_blocks share one set.
struct Staged {
    float a[2][BLOCK_K][A_PITCH];
    float b[2][BLOCK_K][BLOCK];
};

template <bool TILED, bool VEC>
__device__ __forceinline__ void matmul_blocks(Staged& staged, const float* A, const float* B, float* C,
                                              index_t batch, index_t M, index_t N, index_t P) {
    auto& a_tile = staged.a;
    auto& b_tile = staged.b;
    const int tid = threadIdx.x;
    const int tx = tid % 16;  // this thread's output columns: 4 tx + j and HALF + 4 tx + j
    const int ty = tid / 16;  // this thread's output rows:    4 ty + i and HALF + 4 ty + i
    // What this thread stages: 4 consecutive k of row a_row of a's tile, and 4 consecutive
    // columns of row b_row of b's tile (consecutive threads, consecutive addresses).
    const int a_row = tid / (BLOCK_K / 4), a_k = tid % (BLOCK_K / 4) * 4;
    const int b_row = tid / (BLOCK / 4), b_col = tid % (BLOCK / 4) * 4;
    const index_t tiles_m = (M + BLOCK - 1) / BLOCK;
    const index_t tiles_p = (P + BLOCK - 1) / BLOCK;

    for (index_t z = blockIdx.z; z < batch; z += gridDim.z) {
        const float* a = A + z * M * N;
        const float* b = B + z * N * P;
        float* c = C + z * M * P;
        for (index_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
            for (index_t tp = blockIdx.x; tp < tiles_p; tp += gridDim.x) {
                const index_t row0 = tm * BLOCK;
                const index_t col0 = tp * BLOCK;
                float acc[PATCH][PATCH] = {};
                float a_next[4], b_next[4];

                load_run<TILED, VEC>(a_next, a, row0 + a_row, a_k, M, N);
                load_run<TILED, VEC>(b_next, b, b_row, col0 + b_col, N, P);
                int stage = 0;
#pragma unroll
                for (int i = 0; i < 4; ++i) a_tile[0][a_k + i][a_row] = a_next[i];
                *reinterpret_cast<float4*>(&b_tile[0][b_row][b_col]) = make_float4(b_next[0], b_next[1], b_next[2], b_next[3]);
                __syncthreads();

                for (index_t k0 = 0; k0 < N; k0 += BLOCK_K) {
                    const bool more = k0 + BLOCK_K < N;
                    if (more) {  // the next slice's loads overlap this slice's arithmetic
                        load_run<TILED, VEC>(a_next, a, row0 + a_row, k0 + BLOCK_K + a_k, M, N);
                        load_run<TILED, VEC>(b_next, b, k0 + BLOCK_K + b_row, col0 + b_col, N, P);
                    }
#pragma unroll
                    for (int k = 0; k < BLOCK_K; ++k) {
                        float ra[PATCH], rb[PATCH];
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const float4 qa = *reinterpret_cast<const float4*>(&a_tile[stage][k][h * HALF + 4 * ty]);
                            const float4 qb = *reinterpret_cast<const float4*>(&b_tile[stage][k][h * HALF + 4 * tx]);
                            ra[4 * h] = qa.x; ra[4 * h + 1] = qa.y; ra[4 * h + 2] = qa.z; ra[4 * h + 3] = qa.w;
                            rb[4 * h] = qb.x; rb[4 * h + 1] = qb.y; rb[4 * h + 2] = qb.z; rb[4 * h + 3] = qb.w;
                        }
#pragma unroll
                        for (int i = 0; i < PATCH; ++i)
#pragma unroll
                            for (int j = 0; j < PATCH; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
                    }
                    if (more) {
                        // The other copy was last read before the previous barrier, so it is free.
                        stage ^= 1;
#pragma unroll
                        for (int i = 0; i < 4; ++i) a_tile[stage][a_k + i][a_row] = a_next[i];
                        *reinterpret_cast<float4*>(&b_tile[stage][b_row][b_col]) =
                            make_float4(b_next[0], b_next[1], b_next[2], b_next[3]);
                    }
                    // The staged slice is complete for every thread before anyone reads it, and
                    // (for the next output tile) read by every thread before anyone overwrites it.
                    __syncthreads();
                }

#pragma unroll
                for (int i = 0; i < PATCH; ++i) {
                    const index_t r = row0 + (i / 4) * HALF + 4 * ty + i % 4;
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        store_run<TILED, VEC>(c, &acc[i][4 * h], r, col0 + h * HALF + 4 * tx, M, P);
                }
            }
        }
    }
}

// Whether every row of a, b and out starts on a 16-byte boundary: four floats move at once.
__device__ __forceinline__ bool aligned_rows(const float* a, const float* b, const float* out, index_t n, index_t p) {
    return n % 4 == 0 && p % 4 == 0 &&
           ((unsigned long long)a | (unsigned long long)b | (unsigned long long)out) % 16 == 0;
}

// Row-major operands; gridDim.z > 1 (with batch > 1) for matmul_batched.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const float* a, const float* b, float* out, index_t batch, index_t m, index_t n, index_t p) {
    __shared__ __align__(16) Staged staged;
    if (aligned_rows(a, b, out, n, p))
        matmul_blocks<false, true>(staged, a, b, out, batch, m, n, p);
    else
        matmul_blocks<false, false>(staged, a, b, out, batch, m, n, p);
}

// Operands in the tiled layout; m, n, p are multiples of NK_TILE_SIZE.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tiled(const float* a, const float* b, float* out, index_t batch, index_t m, index_t n, index_t p) {
    __shared__ __align__(16) Staged staged;
    matmul_blocks<true, false>(staged, a, b, out, batch, m, n, p);
}
