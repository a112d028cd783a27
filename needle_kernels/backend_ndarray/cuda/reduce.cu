// Reductions (sum, max) of compact float32 arrays.
//
// reduce_*_rows: a (n_out, R) reduced over its contiguous last axis. One
//   block per output row (grid-stride over rows), or per part of a row where
//   the rows are few and long: threads stride along the row (coalesced), four
//   floats a load from the first 16-byte boundary on (a row starts on one only
//   where R is a multiple of 4), then the block combines its partial results
//   with warp shuffles and one shared-memory exchange between warps.
// reduce_*_middle: a (outer, R, inner) reduced over the middle axis. 32
//   threads in x cover 32 neighbouring outputs along inner, so every load
//   of a warp is one contiguous 128-byte line; 8 rows of threads in y split
//   the R axis and are combined by a shared-memory tree.
#include "common.cuh"

#define FULL_MASK 0xffffffffu
// Block sizes come from the Python side as -D flags, the numbers it launches
// with (ndarray_backend_cuda.LAUNCH_GEOMETRY).
#if !defined(NK_THREADS) || !defined(NK_MIDDLE_LANES) || !defined(NK_MIDDLE_ROWS)
#error "compile with the -D flags of ndarray_backend_cuda.compile_defines()"
#endif
#define MIDDLE_LANES NK_MIDDLE_LANES  // blockDim.x of the middle kernels
#define MIDDLE_ROWS NK_MIDDLE_ROWS    // blockDim.y of the middle kernels
static_assert(NK_MIDDLE_LANES == 32, "a warp covers the neighbouring outputs along inner");
static_assert((NK_MIDDLE_ROWS & (NK_MIDDLE_ROWS - 1)) == 0, "the tree over rows halves them");
static_assert(NK_THREADS % 32 == 0 && NK_THREADS <= 1024, "block_reduce keeps one result per warp, 32 at most");

struct SumOp {
    __device__ static float identity() { return 0.0f; }
    __device__ float operator()(float x, float y) const { return x + y; }
};

struct MaxOp {
    __device__ static float identity() { return negative_infinity(); }
    __device__ float operator()(float x, float y) const { return nan_max(x, y); }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v = op(v, __shfl_down_sync(FULL_MASK, v, s));
    return v;
}

// Combines one value per thread; the result is valid in thread 0. Every
// thread of the block must call it (blockDim.x a multiple of 32).
template <class Op>
__device__ __forceinline__ float block_reduce(float v, Op op) {
    __shared__ float warp_results[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int warps = blockDim.x / 32;
    v = warp_reduce(v, op);
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? warp_results[lane] : Op::identity();
        v = warp_reduce(v, op);
    }
    // warp_results is reused by this block's next output.
    __syncthreads();
    return v;
}

// out[o * parts + q] = the reduction of part q of row o, the parts cutting each row into
// runs of ceil(R / parts). parts > 1 for a few long rows (a whole-array sum is one row):
// one block per row would leave the GPU's other multiprocessors idle, so a first launch
// reduces the parts in blocks of their own and a second the (n_out, parts) partials.
template <class Op>
__device__ __forceinline__ void reduce_rows(const float* a, float* out, index_t n_out, index_t R, index_t parts, Op op) {
    const index_t run = (R + parts - 1) / parts;
    for (index_t piece = blockIdx.x; piece < n_out * parts; piece += gridDim.x) {
        const index_t o = piece / parts, q = piece % parts;
        const float* row = a + o * R;
        const index_t begin = q * run < R ? q * run : R;
        const index_t end = (q + 1) * run < R ? (q + 1) * run : R;
        const float* run_start = row + begin;
        const index_t len = end - begin;
        // the floats before the first 16-byte boundary, the float4s from it, the rest
        index_t head = (4 - (index_t)((unsigned long long)run_start / sizeof(float) % 4)) % 4;
        head = head < len ? head : len;
        const index_t quads = (len - head) / 4;
        const float4* body = reinterpret_cast<const float4*>(run_start + head);
        float acc = Op::identity();
        for (index_t r = threadIdx.x; r < head; r += blockDim.x) acc = op(acc, run_start[r]);
        // unrolled so that a thread has several loads in flight before it adds
#pragma unroll 4
        for (index_t i = threadIdx.x; i < quads; i += blockDim.x) {
            const float4 x = body[i];
            acc = op(acc, op(op(x.x, x.y), op(x.z, x.w)));
        }
        for (index_t r = head + 4 * quads + threadIdx.x; r < len; r += blockDim.x) acc = op(acc, run_start[r]);
        acc = block_reduce(acc, op);
        if (threadIdx.x == 0) out[piece] = acc;
    }
}

template <class Op>
__device__ __forceinline__ void reduce_middle(const float* a, float* out, index_t outer, index_t R,
                                              index_t inner, Op op) {
    __shared__ float partial[MIDDLE_ROWS][MIDDLE_LANES];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const index_t inner_tiles = (inner + MIDDLE_LANES - 1) / MIDDLE_LANES;
    const index_t tiles = outer * inner_tiles;
    for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const index_t o = t / inner_tiles;
        const index_t j = (t % inner_tiles) * MIDDLE_LANES + tx;
        float acc = Op::identity();
        if (j < inner) {
            const float* column = a + o * R * inner + j;
            for (index_t r = ty; r < R; r += MIDDLE_ROWS) acc = op(acc, column[r * inner]);
        }
        partial[ty][tx] = acc;
        __syncthreads();
#pragma unroll
        for (int s = MIDDLE_ROWS / 2; s > 0; s >>= 1) {
            if (ty < s) partial[ty][tx] = op(partial[ty][tx], partial[ty + s][tx]);
            __syncthreads();
        }
        if (ty == 0 && j < inner) out[o * inner + j] = partial[0][tx];
        __syncthreads();
    }
}

extern "C" __global__ void reduce_sum_rows(const float* a, float* out, index_t n_out, index_t R, index_t parts) {
    reduce_rows(a, out, n_out, R, parts, SumOp());
}

extern "C" __global__ void reduce_max_rows(const float* a, float* out, index_t n_out, index_t R, index_t parts) {
    reduce_rows(a, out, n_out, R, parts, MaxOp());
}

extern "C" __global__ void __launch_bounds__(MIDDLE_LANES * MIDDLE_ROWS)
reduce_sum_middle(const float* a, float* out, index_t outer, index_t R, index_t inner) {
    reduce_middle(a, out, outer, R, inner, SumOp());
}

extern "C" __global__ void __launch_bounds__(MIDDLE_LANES * MIDDLE_ROWS)
reduce_max_middle(const float* a, float* out, index_t outer, index_t R, index_t inner) {
    reduce_middle(a, out, outer, R, inner, MaxOp());
}

// softmax_xent / softmax_xent_grad (ndarray_backend_numpy.softmax_xent): one
// block per row of logits z (rows, cols), grid-stride over rows. The block
// finds the row's max, then the sum of exp(z - max), with block_reduce; the
// gradient is one coalesced pass per row. Labels are float32 ids, checked here
// (label_ok, common.cuh): a row whose label is not an integer in [0, cols) gets
// a NaN loss (and NaN gradient), and the Python side raises at its next
// synchronization. ``kernel`` is the kernel's number in that report.
extern "C" __global__ void softmax_xent(const float* z, const float* labels, float* lse, float* loss, index_t rows,
                                        index_t cols, int* errors, int kernel) {
    __shared__ float row_max;
    for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* zr = z + row * cols;
        float m = MaxOp::identity();
        for (index_t j = threadIdx.x; j < cols; j += blockDim.x) m = nan_max(m, zr[j]);
        m = block_reduce(m, MaxOp());
        if (threadIdx.x == 0) row_max = m;
        __syncthreads();
        m = row_max;
        float s = 0.0f;
        for (index_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(zr[j] - m);
        s = block_reduce(s, SumOp());
        if (threadIdx.x == 0) {
            const float l = m + logf(s), y = labels[row];
            lse[row] = l;
            loss[row] = label_ok(y, cols, errors, kernel) ? l - zr[(index_t)y] : __int_as_float(0x7fc00000);
        }
    }
}

extern "C" __global__ void softmax_xent_grad(const float* z, const float* labels, const float* lse, const float* g,
                                             float* out, index_t rows, index_t cols, int* errors, int kernel) {
    for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* zr = z + row * cols;
        float* orow = out + row * cols;
        const float l = lse[row], w = g[row], label = labels[row];
        const bool ok = label_ok(label, cols, errors, kernel);  // (the first thread to see a bad one reports it)
        const index_t y = ok ? (index_t)label : -1;
        for (index_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float p = expf(zr[j] - l) * w;
            orow[j] = !ok ? __int_as_float(0x7fc00000) : j == y ? p - w : p;
        }
    }
}

// ---------------------------------------------------------------- softmax
// softmax / softmax_backward (ndarray_backend_numpy.softmax / softmax_backward):
// each row of a compact (rows, cols), an attention's weights. A row's outputs
// need a statistic of the whole row (its max and sum of exponentials forward,
// the sum of g * y back), so, as softmax_xent above, one block owns a row
// (grid-stride over rows) and its threads stride along it, every load of a
// warp one contiguous line; the row is read again from cache for the writes in
// the same block: no second launch and no global scratch. The max is
// block_reduce's (NaN propagating, as numpy's), broadcast through shared
// memory; the sums go through row_tree (common.cuh), in double (the reference's
// backward sum is float64; forward, a double sum rounded once is as close to
// the exact sum as float32 can be), rounded to float once. exp(x - max) is
// recomputed for the writes rather than stored: the same expf of the same
// value, one write per element. A row of -inf (fully masked) gives
// -inf - -inf = NaN everywhere, as numpy does. out may be x (y or g): every
// element is read, then written, by the same thread, after the trees'
// barriers. Launched with cols rounded up to whole warps threads, at most
// NK_THREADS (block_reduce needs whole warps; the tree takes any block size).
extern "C" __global__ void __launch_bounds__(NK_THREADS)
softmax(const float* x, float* out, index_t rows, index_t cols) {
    __shared__ double shared[2][NK_THREADS];
    __shared__ float row_max;
    for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float m = MaxOp::identity();
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) m = nan_max(m, xr[c]);
        m = block_reduce(m, MaxOp());
        if (threadIdx.x == 0) row_max = m;
        __syncthreads();
        m = row_max;
        double s = 0.0, unused = 0.0;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
        row_tree(s, unused, shared);  // its barriers also order row_max's reuse
        const float total = (float)s;
        float* orow = out + r * cols;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = expf(xr[c] - m) / total;
    }
}

extern "C" __global__ void __launch_bounds__(NK_THREADS)
softmax_backward(const float* y, const float* g, float* out, index_t rows, index_t cols) {
    __shared__ double shared[2][NK_THREADS];
    for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* yr = y + r * cols;
        const float* gr = g + r * cols;
        double s = 0.0, unused = 0.0;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) s += (double)gr[c] * yr[c];
        row_tree(s, unused, shared);
        const float dot = (float)s;
        float* orow = out + r * cols;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = yr[c] * (gr[c] - dot);
    }
}
