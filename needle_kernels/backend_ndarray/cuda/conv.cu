// col2im: the adjoint of the im2col window view of an NHWC image
// (ndarray_backend_numpy.col2im).
//
// One thread per output element gathers the window entries that read it, in
// order of increasing (ki, kj) as the reference adds them, so no two threads
// write the same element and no atomics are needed.
#include "common.cuh"

extern "C" __global__ void col2im(const float* __restrict__ cols, float* __restrict__ out, index_t n, index_t h,
                                  index_t w, index_t c, index_t k, index_t s, index_t ho, index_t wo) {
    const index_t total = n * h * w * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c;
        const index_t x = (idx / c) % w;
        const index_t y = (idx / (c * w)) % h;
        const index_t b = idx / (c * w * h);
        float acc = 0.0f;
        for (index_t ki = 0; ki < k && ki <= y; ++ki) {
            const index_t dy = y - ki;
            if (dy % s != 0 || dy / s >= ho) continue;
            const index_t i = dy / s;
            for (index_t kj = 0; kj < k && kj <= x; ++kj) {
                const index_t dx = x - kj;
                if (dx % s != 0 || dx / s >= wo) continue;
                const index_t j = dx / s;
                acc += cols[((((b * ho + i) * wo + j) * k + ki) * k + kj) * c + ch];
            }
        }
        out[idx] = acc;
    }
}

// Winograd F(2x2, 3x3)'s tile transforms (ndarray_backend_numpy.winograd_input/_output).
// One thread per (tile, channel) runs the whole 4x4 transform of that tile's channel:
// the same additions in the same order as the reference.
extern "C" __global__ void winograd_input(const float* __restrict__ a, float* __restrict__ out, index_t n,
                                          index_t h, index_t w, index_t c, index_t th, index_t tw) {
    const index_t tiles = n * th * tw, total = tiles * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c, t = idx / c;
        const index_t tj = t % tw, ti = (t / tw) % th, b = t / (tw * th);
        float d[4][4];
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                const index_t y = 2 * ti + i, x = 2 * tj + j;
                d[i][j] = y < h && x < w ? a[((b * h + y) * w + x) * c + ch] : 0.0f;
            }
        for (int j = 0; j < 4; ++j) {  // B^T d
            const float d0 = d[0][j], d1 = d[1][j], d2 = d[2][j], d3 = d[3][j];
            d[0][j] = d0 - d2;
            d[1][j] = d1 + d2;
            d[2][j] = d2 - d1;
            d[3][j] = d1 - d3;
        }
        for (int u = 0; u < 4; ++u) {  // (B^T d) B
            const float t0 = d[u][0], t1 = d[u][1], t2 = d[u][2], t3 = d[u][3];
            out[(4 * u + 0) * total + idx] = t0 - t2;
            out[(4 * u + 1) * total + idx] = t1 + t2;
            out[(4 * u + 2) * total + idx] = t2 - t1;
            out[(4 * u + 3) * total + idx] = t1 - t3;
        }
    }
}

extern "C" __global__ void winograd_output(const float* __restrict__ m, float* __restrict__ out, index_t n,
                                           index_t ho, index_t wo, index_t c, index_t th, index_t tw) {
    const index_t tiles = n * th * tw, total = tiles * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c, t = idx / c;
        const index_t tj = t % tw, ti = (t / tw) % th, b = t / (tw * th);
        float s[2][4];
        for (int v = 0; v < 4; ++v) {  // A^T M
            const float m0 = m[v * total + idx], m1 = m[(4 + v) * total + idx], m2 = m[(8 + v) * total + idx],
                        m3 = m[(12 + v) * total + idx];
            s[0][v] = m0 + m1 + m2;
            s[1][v] = m1 - m2 - m3;
        }
        for (int i = 0; i < 2; ++i) {  // (A^T M) A, the pixels inside the image
            const index_t y = 2 * ti + i;
            if (y >= ho) continue;
            const index_t x = 2 * tj;
            out[((b * ho + y) * wo + x) * c + ch] = s[i][0] + s[i][1] + s[i][2];
            if (x + 1 < wo) out[((b * ho + y) * wo + x + 1) * c + ch] = s[i][1] - s[i][2] - s[i][3];
        }
    }
}

// The weight gradient's pieces (ndarray_backend_numpy.winograd_weight_grad): the 2x2 blocks
// of the output gradient transformed by G' (one thread per tile and channel), and the summed
// products M transformed to the 3x3 kernel, A'^T M A' (one thread per channel pair).
extern "C" __global__ void winograd_grad_tiles(const float* __restrict__ g, float* __restrict__ out, index_t n,
                                               index_t ho, index_t wo, index_t c, index_t th, index_t tw) {
    const index_t tiles = n * th * tw, total = tiles * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c, t = idx / c;
        const index_t tj = t % tw, ti = (t / tw) % th, b = t / (tw * th);
        float e[2][2], r[4][2];
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
                const index_t y = 2 * ti + i, x = 2 * tj + j;
                e[i][j] = y < ho && x < wo ? g[((b * ho + y) * wo + x) * c + ch] : 0.0f;
            }
        for (int j = 0; j < 2; ++j) {  // G' e
            r[0][j] = e[0][j];
            r[1][j] = 0.5f * (e[0][j] + e[1][j]);
            r[2][j] = 0.5f * (e[0][j] - e[1][j]);
            r[3][j] = -e[1][j];
        }
        for (int u = 0; u < 4; ++u) {  // (G' e) G'^T
            out[(4 * u + 0) * total + idx] = r[u][0];
            out[(4 * u + 1) * total + idx] = 0.5f * (r[u][0] + r[u][1]);
            out[(4 * u + 2) * total + idx] = 0.5f * (r[u][0] - r[u][1]);
            out[(4 * u + 3) * total + idx] = -r[u][1];
        }
    }
}

extern "C" __global__ void winograd_weight_output(const float* __restrict__ m, float* __restrict__ dw, index_t pairs) {
    for (index_t i = thread_index(); i < pairs; i += thread_count()) {
        float s[3][4];
        for (int v = 0; v < 4; ++v) {  // A'^T M
            const float m0 = m[v * pairs + i], m1 = m[(4 + v) * pairs + i], m2 = m[(8 + v) * pairs + i],
                        m3 = m[(12 + v) * pairs + i];
            s[0][v] = m0 + m1 + m2;
            s[1][v] = m1 - m2;
            s[2][v] = m1 + m2 + m3;
        }
        for (int a = 0; a < 3; ++a) {  // (A'^T M) A'
            dw[(3 * a + 0) * pairs + i] = s[a][0] + s[a][1] + s[a][2];
            dw[(3 * a + 1) * pairs + i] = s[a][1] - s[a][2];
            dw[(3 * a + 2) * pairs + i] = s[a][1] + s[a][2] + s[a][3];
        }
    }
}

// Implicit-GEMM convolution (ndarray_backend_numpy.conv_implicit / conv_implicit_weight_grad):
// out = X @ w and out = X^T @ g for the im2col matrix X of a strided NHWC image view, X never
// stored. Both are a tiled product like matmul.cu's (one copy of the staged tiles, smaller
// tiles: a convolution's c_out is often 16 to 128), with X's tile gathered from the image where
// a product loads a: a block of NK_MATMUL_THREADS threads owns a CONV_TILE x CONV_TILE tile of
// out, stages CONV_DEPTH steps of the summed dimension of both operands in shared memory and
// each thread accumulates a CONV_PATCH x CONV_PATCH patch in registers, reading every staged
// value CONV_PATCH times and every gathered image value CONV_TILE times. The zero padding is a bounds check on the read.
//
// The weight gradient's out (k*k*c, c_out) is often a tile or a few while its sums run over all
// n*ho*wo pixels, too few blocks for a GPU; so the pixels are cut into ``splits`` contiguous runs
// (blockIdx.z), each writing its own partial product, and conv_implicit_weight_sum adds them in
// run order. Every sum is taken in a fixed order, with no atomics, so results repeat bit for bit.
#if !defined(NK_CONV_TILE) || !defined(NK_MATMUL_THREADS) || !defined(NK_CONV_DEPTH)
#error "compile with the -D flags of ndarray_backend_cuda.compile_defines()"
#endif
#define CONV_TILE NK_CONV_TILE
#define CONV_DEPTH NK_CONV_DEPTH
#define CONV_PATCH (CONV_TILE / 16)  // each of the 16 x 16 threads owns CONV_PATCH rows and columns of the tile
static_assert(NK_MATMUL_THREADS == 256, "the convolution block is 16 x 16 threads");
static_assert(CONV_TILE % 16 == 0, "each of the 16 x 16 threads owns whole rows and columns of the tile");
static_assert(CONV_TILE + CONV_DEPTH <= NK_MATMUL_THREADS, "a thread per row of the tile, and others per step");
static_assert(CONV_TILE * CONV_DEPTH % NK_MATMUL_THREADS == 0, "the staged tiles split evenly over the threads");

// Where one pixel (a row of X) or one tap (a column of X) reads: X[pixel, tap] is
// image[pixel.offset + tap.offset] when 0 <= pixel.y + tap.y < h and 0 <= pixel.x + tap.x < w,
// and 0 elsewhere. A pixel or tap past the end reads 0 through a y no sum brings back in range.
struct WindowPart {
    index_t offset, y, x;
};
constexpr index_t OUTSIDE_IMAGE = -(1LL << 60);

struct ImageWindows {
    const float* __restrict__ data;
    index_t h, w, c, sn, sh, sw, sc, offset, k, s, pad_h, pad_w, ho, wo;

    // pixel p = (b*ho + i)*wo + j: its window's corner, which may lie in the padding
    __device__ __forceinline__ WindowPart pixel(index_t p, index_t end) const {
        if (p >= end) return {0, OUTSIDE_IMAGE, 0};
        const index_t j = p % wo, i = (p / wo) % ho, b = p / (wo * ho);
        const index_t y = i * s - pad_h, x = j * s - pad_w;
        return {offset + b * sn + y * sh + x * sw, y, x};
    }

    // tap t = (ki*k + kj)*c + ch: its place in every window
    __device__ __forceinline__ WindowPart tap(index_t t, index_t end) const {
        if (t >= end) return {0, OUTSIDE_IMAGE, 0};
        const index_t ch = t % c, kj = (t / c) % k, ki = t / (c * k);
        return {ki * sh + kj * sw + ch * sc, ki, kj};
    }

    __device__ __forceinline__ float at(const WindowPart& p, const WindowPart& t) const {
        const index_t y = p.y + t.y, x = p.x + t.x;
        return y >= 0 && y < h && x >= 0 && x < w ? data[p.offset + t.offset] : 0.0f;
    }
};

template <bool PIXEL>
__device__ __forceinline__ WindowPart window_part(const ImageWindows& image, index_t index, index_t end) {
    return PIXEL ? image.pixel(index, end) : image.tap(index, end);
}

// c[z] (rows, cols) = A[:, run z] @ b[run z, :] for z < splits, the runs cutting depth into
// contiguous pieces of whole CONV_DEPTH steps; A is X (rows = pixels, depth = taps) or X^T
// (rows = taps, depth = pixels), b compact (depth, cols).

template <bool ROWS_ARE_PIXELS>
__device__ __forceinline__ void implicit_gemm(const ImageWindows& image, const float* __restrict__ b,
                                              float* __restrict__ c, index_t rows, index_t depth, index_t cols,
                                              index_t splits) {
    __shared__ float a_tile[CONV_DEPTH][CONV_TILE + 1];  // k-major, +1 against bank conflicts as in matmul.cu
    __shared__ float b_tile[CONV_DEPTH][CONV_TILE];
    __shared__ WindowPart row_parts[CONV_TILE];
    // two steps' worth: the threads that work out the next step's parts write one while the
    // others still gather through the other
    __shared__ WindowPart depth_parts[2][CONV_DEPTH];

    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const index_t row_tiles = (rows + CONV_TILE - 1) / CONV_TILE;
    const index_t col_tiles = (cols + CONV_TILE - 1) / CONV_TILE;
    const index_t steps = (depth + CONV_DEPTH - 1) / CONV_DEPTH;
    const index_t per_split = (steps + splits - 1) / splits * CONV_DEPTH;

    for (index_t z = blockIdx.z; z < splits; z += gridDim.z) {
        const index_t d_begin = z * per_split;
        const index_t d_end = d_begin + per_split < depth ? d_begin + per_split : depth;
        float* out = c + z * rows * cols;
        for (index_t tm = blockIdx.y; tm < row_tiles; tm += gridDim.y) {
            for (index_t tp = blockIdx.x; tp < col_tiles; tp += gridDim.x) {
                const index_t row0 = tm * CONV_TILE, col0 = tp * CONV_TILE;
                // the previous tile's last barrier has every thread done with the parts
                if (tid < CONV_TILE) row_parts[tid] = window_part<ROWS_ARE_PIXELS>(image, row0 + tid, rows);
                const int depth_worker = tid - CONV_TILE;  // these threads work out each step's parts
                const bool works_out_depth = depth_worker >= 0 && depth_worker < CONV_DEPTH;
                if (works_out_depth)
                    depth_parts[0][depth_worker] = window_part<!ROWS_ARE_PIXELS>(image, d_begin + depth_worker, d_end);
                __syncthreads();

                float acc[CONV_PATCH][CONV_PATCH] = {};
                int current = 0;
                for (index_t k0 = d_begin; k0 < d_end; k0 += CONV_DEPTH, current ^= 1) {
                    const WindowPart* step = depth_parts[current];
                    // Neighbouring threads gather neighbouring taps, the channels of one pixel
                    // that an NHWC image keeps side by side.
#pragma unroll
                    for (int q = 0; q < CONV_TILE * CONV_DEPTH / NK_MATMUL_THREADS; ++q) {
                        const int l = tid + q * NK_MATMUL_THREADS;
                        const int r = ROWS_ARE_PIXELS ? l / CONV_DEPTH : l % CONV_TILE;
                        const int kk = ROWS_ARE_PIXELS ? l % CONV_DEPTH : l / CONV_TILE;
                        a_tile[kk][r] = ROWS_ARE_PIXELS ? image.at(row_parts[r], step[kk])
                                                        : image.at(step[kk], row_parts[r]);
                    }
#pragma unroll
                    for (int q = 0; q < CONV_DEPTH * CONV_TILE / NK_MATMUL_THREADS; ++q) {
                        const int l = tid + q * NK_MATMUL_THREADS;
                        const int kk = l / CONV_TILE, cc = l % CONV_TILE;
                        const index_t gk = k0 + kk, gc = col0 + cc;
                        b_tile[kk][cc] = gk < d_end && gc < cols ? b[gk * cols + gc] : 0.0f;
                    }
                    if (works_out_depth)
                        depth_parts[current ^ 1][depth_worker] =
                            window_part<!ROWS_ARE_PIXELS>(image, k0 + CONV_DEPTH + depth_worker, d_end);
                    __syncthreads();

#pragma unroll
                    for (int kk = 0; kk < CONV_DEPTH; ++kk) {
                        float ra[CONV_PATCH], rb[CONV_PATCH];
#pragma unroll
                        for (int i = 0; i < CONV_PATCH; ++i) ra[i] = a_tile[kk][ty + 16 * i];
#pragma unroll
                        for (int j = 0; j < CONV_PATCH; ++j) rb[j] = b_tile[kk][tx + 16 * j];
#pragma unroll
                        for (int i = 0; i < CONV_PATCH; ++i)
#pragma unroll
                            for (int j = 0; j < CONV_PATCH; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
                    }
                    // the next step overwrites the tiles other threads may still be reading
                    __syncthreads();
                }

#pragma unroll
                for (int i = 0; i < CONV_PATCH; ++i) {
#pragma unroll
                    for (int j = 0; j < CONV_PATCH; ++j) {
                        const index_t r = row0 + ty + 16 * i, cc = col0 + tx + 16 * j;
                        if (r < rows && cc < cols) out[r * cols + cc] = acc[i][j];
                    }
                }
            }
        }
    }
}

// out (n*ho*wo, c_out) = X @ w, w compact (k*k*c, c_out).
extern "C" __global__ void __launch_bounds__(NK_MATMUL_THREADS)
conv_implicit(const float* __restrict__ a, const float* __restrict__ w, float* __restrict__ out, index_t n,
              index_t h, index_t wd, index_t c, index_t sn, index_t sh, index_t sw, index_t sc, index_t offset,
              index_t k, index_t s, index_t pad_h, index_t pad_w, index_t ho, index_t wo, index_t c_out) {
    const ImageWindows image{a, h, wd, c, sn, sh, sw, sc, offset, k, s, pad_h, pad_w, ho, wo};
    implicit_gemm<true>(image, w, out, n * ho * wo, k * k * c, c_out, 1);
}

// sums[z] (k*k*c, c_out) = X^T @ g over the z-th of ``splits`` runs of pixels, g compact (n*ho*wo, c_out).
extern "C" __global__ void __launch_bounds__(NK_MATMUL_THREADS)
conv_implicit_weight_grad(const float* __restrict__ a, const float* __restrict__ g, float* __restrict__ sums,
                          index_t n, index_t h, index_t wd, index_t c, index_t sn, index_t sh, index_t sw, index_t sc,
                          index_t offset, index_t k, index_t s, index_t pad_h, index_t pad_w, index_t ho,
                          index_t wo, index_t c_out, index_t splits) {
    const ImageWindows image{a, h, wd, c, sn, sh, sw, sc, offset, k, s, pad_h, pad_w, ho, wo};
    implicit_gemm<false>(image, g, sums, k * k * c, n * ho * wo, c_out, splits);
}

// out[i] = sums[0][i] + sums[1][i] + ... in that order, one thread per element.
extern "C" __global__ void conv_implicit_weight_sum(const float* __restrict__ sums, float* __restrict__ out,
                                                    index_t size, index_t splits) {
    for (index_t i = thread_index(); i < size; i += thread_count()) {
        float acc = sums[i];
        for (index_t z = 1; z < splits; ++z) acc += sums[z * size + i];
        out[i] = acc;
    }
}
