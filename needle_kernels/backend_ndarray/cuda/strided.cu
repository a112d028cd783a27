// Strided copies: compact, ewise_setitem, scalar_setitem.
//
// The view (shape, strides, offset) travels BY VALUE in a struct of fixed
// rank, so a launch needs no device allocation for its metadata. The Python
// side merges contiguous dimensions and drops size-1 ones first, so most
// views reach the kernel with rank 1 to 3 and pay few divisions.
#include "common.cuh"

#define MAX_DIMS 8

// Must match the numpy dtype _VIEW_DTYPE in ndarray_backend_cuda.py: eighteen
// int64 fields, 144 bytes, no padding.
struct StridedView {
    index_t shape[MAX_DIMS];    // dimensions 0..ndim-1 used, row-major
    index_t strides[MAX_DIMS];  // in elements; may be negative or zero
    index_t offset;             // element offset of view[0, ..., 0]
    index_t ndim;
};
static_assert(sizeof(StridedView) == 18 * sizeof(index_t), "StridedView layout must match the host dtype");

// Calls body(i, position) for every row-major index i < n of the view, where
// position = offset + sum_k idx_k(i) * strides[k]. The loop over dimensions
// is unrolled with constant indices so the struct stays in the constant
// (parameter) bank instead of being copied to local memory.
template <typename I, class Body>
__device__ __forceinline__ void for_each_position(const StridedView& v, index_t n, Body body) {
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        I rest = (I)i;
        index_t pos = v.offset;
#pragma unroll
        for (int k = MAX_DIMS - 1; k >= 0; --k) {
            if (k < v.ndim) {
                const I dim = (I)v.shape[k];
                pos += (index_t)(rest % dim) * v.strides[k];
                rest /= dim;
            }
        }
        body(i, pos);
    }
}

// 64-bit division costs several times a 32-bit one; views of fewer than
// 2^32 elements (nearly all) take the 32-bit path. n is uniform, so the
// branch does not diverge.
template <class Body>
__device__ __forceinline__ void dispatch_positions(const StridedView& v, index_t n, Body body) {
    if (n <= 0xffffffffLL) {
        for_each_position<unsigned int>(v, n, body);
    } else {
        for_each_position<unsigned long long>(v, n, body);
    }
}

// out[i] = a[position(i)]: gather the view into row-major order.
extern "C" __global__ void compact(const float* a, float* out, StridedView v, index_t n) {
    dispatch_positions(v, n, [=](index_t i, index_t pos) { out[i] = a[pos]; });
}

// out[position(i)] = a[i]: scatter a compact array into the view.
extern "C" __global__ void ewise_setitem(const float* a, float* out, StridedView v, index_t n) {
    dispatch_positions(v, n, [=](index_t i, index_t pos) { out[pos] = a[i]; });
}

// out[position(i)] = val for every element of the view.
extern "C" __global__ void scalar_setitem(float val, float* out, StridedView v, index_t n) {
    dispatch_positions(v, n, [=](index_t, index_t pos) { out[pos] = val; });
}
