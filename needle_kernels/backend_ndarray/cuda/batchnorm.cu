// Batch normalization over the rows of a compact x (rows, cols), one column
// per channel (ndarray_backend_numpy.batchnorm_*).
//
// Column sums: a block covers 32 neighbouring columns (threadIdx.x, so a
// warp's loads are one contiguous line) and BN_ROWS rows of threads
// (threadIdx.y) stride down the rows; a shared-memory tree adds the rows of
// threads. Sums accumulate in double, as the reference's do.
#include "common.cuh"

#define BN_LANES 32
#define BN_ROWS 8

__device__ __forceinline__ double column_tree(double v, double (*shared)[BN_LANES]) {
    shared[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    for (int half = BN_ROWS / 2; half > 0; half >>= 1) {
        if (threadIdx.y < half) shared[threadIdx.y][threadIdx.x] += shared[threadIdx.y + half][threadIdx.x];
        __syncthreads();
    }
    const double total = shared[0][threadIdx.x];
    __syncthreads();  // shared is reused by the caller's next tree
    return total;
}

extern "C" __global__ void __launch_bounds__(BN_LANES * BN_ROWS)
batchnorm_stats(const float* x, float* mean, float* var, index_t rows, index_t cols) {
    __shared__ double shared[BN_ROWS][BN_LANES];
    const index_t c = (index_t)blockIdx.x * BN_LANES + threadIdx.x;
    double s = 0.0;
    if (c < cols)
        for (index_t r = threadIdx.y; r < rows; r += BN_ROWS) s += x[r * cols + c];
    const double m = column_tree(s, shared) / rows;
    double q = 0.0;
    if (c < cols)
        for (index_t r = threadIdx.y; r < rows; r += BN_ROWS) {
            const double d = x[r * cols + c] - m;
            q += d * d;
        }
    q = column_tree(q, shared);
    if (c < cols && threadIdx.y == 0) {
        mean[c] = (float)m;
        var[c] = (float)(q / rows);
    }
}

// A linear layer's bias: out[r, c] = a[r, c] + bias[c]; out may be a.
extern "C" __global__ void bias_add(const float* a, const float* bias, float* out, index_t rows, index_t cols) {
    const index_t n = rows * cols;
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        out[i] = a[i] + bias[i % cols];
    }
}

extern "C" __global__ void batchnorm_fold(const float* mean, const float* var, const float* weight,
                                          const float* bias, const float* running_mean, const float* running_var,
                                          float* invstd, float* scale, float* shift, float* new_mean,
                                          float* new_var, index_t cols, double eps, float keep, float take) {
    for (index_t c = thread_index(); c < cols; c += thread_count()) {
        const float inv = (float)(1.0 / sqrt((double)var[c] + eps));
        const float sc = weight[c] * inv;
        invstd[c] = inv;
        scale[c] = sc;
        shift[c] = bias[c] - mean[c] * sc;
        new_mean[c] = running_mean[c] * keep + mean[c] * take;
        new_var[c] = running_var[c] * keep + var[c] * take;
    }
}

extern "C" __global__ void batchnorm_apply(const float* x, const float* scale, const float* shift, float* out,
                                           index_t rows, index_t cols, int relu) {
    const index_t n = rows * cols;
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        const index_t c = i % cols;
        const float y = x[i] * scale[c] + shift[c];
        out[i] = relu ? fmaxf(y, 0.0f) : y;
    }
}

extern "C" __global__ void __launch_bounds__(BN_LANES * BN_ROWS)
batchnorm_grad_sums(const float* x, const float* dy, const float* mean, const float* invstd, float* dweight,
                    float* dbias, index_t rows, index_t cols) {
    __shared__ double shared[BN_ROWS][BN_LANES];
    const index_t c = (index_t)blockIdx.x * BN_LANES + threadIdx.x;
    double db = 0.0, dw = 0.0;
    if (c < cols) {
        const double m = mean[c], s = invstd[c];
        for (index_t r = threadIdx.y; r < rows; r += BN_ROWS) {
            const double g = dy[r * cols + c];
            db += g;
            dw += g * (x[r * cols + c] - m) * s;
        }
    }
    db = column_tree(db, shared);
    dw = column_tree(dw, shared);
    if (c < cols && threadIdx.y == 0) {
        dbias[c] = (float)db;
        dweight[c] = (float)dw;
    }
}

extern "C" __global__ void batchnorm_grad_input(const float* x, const float* dy, const float* mean,
                                                const float* invstd, const float* weight, const float* dweight,
                                                const float* dbias, float* dx, index_t rows, index_t cols,
                                                int batch_stats) {
    const index_t n = rows * cols;
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        const index_t c = i % cols;
        const double s = invstd[c], k = (double)weight[c] * s;
        if (batch_stats) {
            const double xh = (x[i] - (double)mean[c]) * s;
            dx[i] = (float)(k * (dy[i] - (double)dbias[c] / rows - xh * ((double)dweight[c] / rows)));
        } else {
            dx[i] = (float)(k * dy[i]);
        }
    }
}
