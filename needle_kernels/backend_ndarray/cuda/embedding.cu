// An embedding's lookup and its adjoint (ndarray_backend_numpy.embedding_gather / _scatter):
// ids holds `rows` floats, each to be an integer in [0, num_rows), checked as they are read
// (label_ok, common.cuh: a bad one is reported to the Python side, which raises at its next
// synchronization, and never indexes the table). One thread per element of the (rows, dim)
// side, grid-stride. ``kernel`` is the kernel's number in that report.
#include "common.cuh"

// out (rows, dim) = weight[ids[r]] row by row; a row whose id is bad is NaN.
extern "C" __global__ void embedding_gather(const float* weight, const float* ids, float* out, index_t num_rows,
                                            index_t rows, index_t dim, int* errors, int kernel) {
    const index_t n = rows * dim;
    for (index_t k = thread_index(); k < n; k += thread_count()) {
        const index_t r = k / dim;
        const float id = ids[r];
        out[k] = label_ok(id, num_rows, errors, kernel) ? weight[(index_t)id * dim + (k - r * dim)]
                                                        : __int_as_float(0x7fc00000);
    }
}

// out (num_rows, dim), zeroed beforehand, += g[r] at row ids[r]. Rows that share an id add
// into the same elements, so the adds are atomic (their order, and so the last bit of a sum of
// repeated ids, may differ from run to run). A row of g whose id is bad is added nowhere.
extern "C" __global__ void embedding_scatter(const float* g, const float* ids, float* out, index_t num_rows,
                                             index_t rows, index_t dim, int* errors, int kernel) {
    const index_t n = rows * dim;
    for (index_t k = thread_index(); k < n; k += thread_count()) {
        const index_t r = k / dim;
        const float id = ids[r];
        if (label_ok(id, num_rows, errors, kernel)) atomicAdd(out + (index_t)id * dim + (k - r * dim), g[k]);
    }
}
