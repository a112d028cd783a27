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
batchnorm_grad_sums(const float* x, const float* dy, const float* relu_out, int relu, const float* mean,
                    const float* invstd, float* dweight, float* dbias, index_t rows, index_t cols) {
    __shared__ double shared[BN_ROWS][BN_LANES];
    const index_t c = (index_t)blockIdx.x * BN_LANES + threadIdx.x;
    double db = 0.0, dw = 0.0;
    if (c < cols) {
        const double m = mean[c], s = invstd[c];
        for (index_t r = threadIdx.y; r < rows; r += BN_ROWS) {
            const double g = relu && !(relu_out[r * cols + c] > 0.0f) ? 0.0 : dy[r * cols + c];
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

extern "C" __global__ void batchnorm_grad_input(const float* x, const float* dy, const float* relu_out, int relu,
                                                const float* mean, const float* invstd, const float* weight,
                                                const float* dweight, const float* dbias, float* dx, index_t rows,
                                                index_t cols, int batch_stats) {
    const index_t n = rows * cols;
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        const index_t c = i % cols;
        const double s = invstd[c], k = (double)weight[c] * s;
        const double g = relu && !(relu_out[i] > 0.0f) ? 0.0 : dy[i];
        if (batch_stats) {
            const double xh = (x[i] - (double)mean[c]) * s;
            dx[i] = (float)(k * (g - (double)dbias[c] / rows - xh * ((double)dweight[c] / rows)));
        } else {
            dx[i] = (float)(k * g);
        }
    }
}

// ---------------------------------------------------------------- layer normalization
// nn.LayerNorm1d over the columns of each row of a compact x (rows, cols)
// (ndarray_backend_numpy.layernorm / layernorm_backward): mean and invstd are
// one per row, weight and bias one per column.
//
// layernorm, layernorm_grad_input: a row's statistics need the whole row, so
// one block owns a row (grid-stride over rows) and its threads stride along
// it, every load of a warp one contiguous line; the row sums are combined by
// a shared-memory tree in double, as the reference's float64 sums are. The
// row is read again from cache for its normalisation (or its dx) in the same
// block, with no second launch and no global scratch. Launched with
// min(NK_THREADS, cols rounded up to whole warps) threads; the tree (row_tree,
// common.cuh) takes any block size.
// layernorm_grad_sums: dweight and dbias are sums down the columns, the
// batch norm's column sums with a mean and invstd per row instead of per
// column: 32 neighbouring columns per block (BN_LANES), BN_ROWS rows of
// threads striding down the rows, grid-stride over the column tiles.
#if !defined(NK_THREADS)
#error "compile with the -D flags of ndarray_backend_cuda.compile_defines()"
#endif
static_assert(NK_THREADS % 32 == 0 && NK_THREADS <= 1024, "a row block is whole warps, at most 1024 threads");

extern "C" __global__ void __launch_bounds__(NK_THREADS)
layernorm(const float* x, const float* weight, const float* bias, float* out, float* mean, float* invstd,
          index_t rows, index_t cols, double eps) {
    __shared__ double shared[2][NK_THREADS];
    for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        double s = 0.0, unused = 0.0;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
        row_tree(s, unused, shared);
        const double m = s / cols;
        double q = 0.0;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const double d = xr[c] - m;
            q += d * d;
        }
        row_tree(q, unused, shared);
        const double inv = 1.0 / sqrt(q / cols + eps);
        if (threadIdx.x == 0) {
            mean[r] = (float)m;
            invstd[r] = (float)inv;
        }
        float* orow = out + r * cols;  // out may be x: each element is read, then written, by one thread
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
            orow[c] = (float)((xr[c] - m) * inv * weight[c] + bias[c]);
    }
}

extern "C" __global__ void __launch_bounds__(BN_LANES * BN_ROWS)
layernorm_grad_sums(const float* x, const float* dy, const float* mean, const float* invstd, float* dweight,
                    float* dbias, index_t rows, index_t cols) {
    __shared__ double shared[BN_ROWS][BN_LANES];
    const index_t tiles = (cols + BN_LANES - 1) / BN_LANES;
    for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // the same trips for the whole block
        const index_t c = tile * BN_LANES + threadIdx.x;
        double db = 0.0, dw = 0.0;
        if (c < cols)
            for (index_t r = threadIdx.y; r < rows; r += BN_ROWS) {
                const double g = dy[r * cols + c];
                db += g;
                dw += g * ((x[r * cols + c] - (double)mean[r]) * invstd[r]);
            }
        db = column_tree(db, shared);
        dw = column_tree(dw, shared);
        if (c < cols && threadIdx.y == 0) {  // rows == 0 writes zeros
            dbias[c] = (float)db;
            dweight[c] = (float)dw;
        }
    }
}

extern "C" __global__ void __launch_bounds__(NK_THREADS)
layernorm_grad_input(const float* x, const float* dy, const float* mean, const float* invstd, const float* weight,
                     float* dx, index_t rows, index_t cols) {
    __shared__ double shared[2][NK_THREADS];
    for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        const float* gr = dy + r * cols;
        const double m = mean[r], s = invstd[r];
        double sg = 0.0, sgx = 0.0;  // sum of gw = dy * weight, of gw * xhat
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const double gw = (double)gr[c] * weight[c];
            sg += gw;
            sgx += gw * ((xr[c] - m) * s);
        }
        row_tree(sg, sgx, shared);
        const double mg = sg / cols, mgx = sgx / cols;
        float* dxr = dx + r * cols;  // dx may be x or dy, as out may be x above
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const double gw = (double)gr[c] * weight[c];
            dxr[c] = (float)(s * (gw - mg - ((xr[c] - m) * s) * mgx));
        }
    }
}

// ---------------------------------------------------------------- RMS normalization
// nn.RMSNorm1d (ndarray_backend_numpy.rmsnorm / rmsnorm_backward): the layer norm's
// blocks without the mean and the bias. rmsnorm and rmsnorm_grad_input: a block per
// row, its sums by the row tree in double; rmsnorm_grad_sums: dweight down the
// columns, 32 neighbouring columns per block as layernorm_grad_sums.

extern "C" __global__ void __launch_bounds__(NK_THREADS)
rmsnorm(const float* x, const float* weight, float* out, float* invrms, index_t rows, index_t cols, double eps) {
    __shared__ double shared[2][NK_THREADS];
    for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        double q = 0.0, unused = 0.0;
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) q += (double)xr[c] * xr[c];
        row_tree(q, unused, shared);
        const double inv = 1.0 / sqrt(q / cols + eps);
        if (threadIdx.x == 0) invrms[r] = (float)inv;
        float* orow = out + r * cols;  // out may be x: each element is read, then written, by one thread
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = (float)(xr[c] * inv * weight[c]);
    }
}

extern "C" __global__ void __launch_bounds__(BN_LANES * BN_ROWS)
rmsnorm_grad_sums(const float* x, const float* dy, const float* invrms, float* dweight, index_t rows, index_t cols) {
    __shared__ double shared[BN_ROWS][BN_LANES];
    const index_t tiles = (cols + BN_LANES - 1) / BN_LANES;
    for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // the same trips for the whole block
        const index_t c = tile * BN_LANES + threadIdx.x;
        double dw = 0.0;
        if (c < cols)
            for (index_t r = threadIdx.y; r < rows; r += BN_ROWS)
                dw += (double)dy[r * cols + c] * ((double)x[r * cols + c] * invrms[r]);
        dw = column_tree(dw, shared);
        if (c < cols && threadIdx.y == 0) dweight[c] = (float)dw;  // rows == 0 writes zeros
    }
}

extern "C" __global__ void __launch_bounds__(NK_THREADS)
rmsnorm_grad_input(const float* x, const float* dy, const float* invrms, const float* weight, float* dx,
                   index_t rows, index_t cols) {
    __shared__ double shared[2][NK_THREADS];
    for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        const float* gr = dy + r * cols;
        const double s = invrms[r];
        double sgx = 0.0, unused = 0.0;  // sum of gw * xhat, gw = dy * weight
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x) sgx += (double)gr[c] * weight[c] * (xr[c] * s);
        row_tree(sgx, unused, shared);
        const double mgx = sgx / cols;
        float* dxr = dx + r * cols;  // dx may be dy, as out may be x above
        for (index_t c = threadIdx.x; c < cols; c += blockDim.x)
            dxr[c] = (float)(s * ((double)gr[c] * weight[c] - (xr[c] * s) * mgx));
    }
}
