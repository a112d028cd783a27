// An embedding's lookup and its adjoint (ndarray_backend_numpy.embedding_gather / _scatter):
// ids holds `rows` integer-valued floats, each in [0, num_rows), checked on the Python side
// before the launch. One thread per element of the (rows, dim) side, grid-stride.
#include "common.cuh"

// out (rows, dim) = weight[ids[r]] row by row.
extern "C" __global__ void embedding_gather(const float* weight, const float* ids, float* out, index_t rows,
                                            index_t dim) {
    const index_t n = rows * dim;
    for (index_t k = thread_index(); k < n; k += thread_count()) {
        const index_t r = k / dim;
        out[k] = weight[(index_t)ids[r] * dim + (k - r * dim)];
    }
}

// out (num_rows, dim), zeroed beforehand, += g[r] at row ids[r]. Rows that share an id add
// into the same elements, so the adds are atomic (their order, and so the last bit of a sum of
// repeated ids, may differ from run to run).
extern "C" __global__ void embedding_scatter(const float* g, const float* ids, float* out, index_t rows,
                                             index_t dim) {
    const index_t n = rows * dim;
    for (index_t k = thread_index(); k < n; k += thread_count()) {
        const index_t r = k / dim;
        atomicAdd(out + (index_t)ids[r] * dim + (k - r * dim), g[k]);
    }
}
