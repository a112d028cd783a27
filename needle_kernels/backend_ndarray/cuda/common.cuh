// Helpers shared by every kernel file of the CUDA backend.
//
// The Python side inlines this header into each source before handing it to
// NVRTC, so it must stay free of system includes (NVRTC has no host headers).
#pragma once

// Element counts and offsets are 64-bit: a single H100 holds arrays of more
// than 2^31 float32 elements.
typedef long long index_t;

// Grid-stride loops: every kernel is launched with a grid capped on the
// Python side, and each thread walks i, i + (threads in grid), ... so any
// size is covered by any grid.
__device__ __forceinline__ index_t thread_index() {
    return (index_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ index_t thread_count() {
    return (index_t)gridDim.x * blockDim.x;
}

// numpy's maximum propagates NaN (fmaxf would drop it): if either side is
// NaN the result is NaN.
__device__ __forceinline__ float nan_max(float x, float y) {
    return (x > y || x != x) ? x : y;
}

__device__ __forceinline__ float negative_infinity() {
    return __int_as_float(0xff800000);
}

// A label or id that a kernel indexes n rows with: whether it is an integer in [0, n), as the
// reference's check asks (compared in double, as numpy compares a float32 with an int). The kernels
// check their own as they read them, so that the host never copies them back and waits for the
// GPU before a launch: the first bad one any kernel meets is written to ``errors`` (seen, which
// kernel, n, the label's bits), and the Python side reads that back at its next synchronization
// and raises there. A bad label is never used as an index.
__device__ __forceinline__ bool label_ok(float label, index_t n, int* errors, int kernel) {
    if ((double)label >= 0.0 && (double)label < (double)n && label == floorf(label)) return true;
    if (atomicCAS(errors, 0, 1) == 0) {
        errors[1] = kernel;
        errors[2] = (int)n;
        errors[3] = __float_as_int(label);
    }
    return false;
}

#if defined(NK_THREADS)
// Sums a and b over the threads of a block of at most NK_THREADS (blockDim.x of them, any
// number) in double, through ``shared``; every thread gets the totals. Every thread of the
// block must call it. The row kernels (a block per row: layer norm, softmax) combine their
// row sums with it.
__device__ __forceinline__ void row_tree(double& a, double& b, double (*shared)[NK_THREADS]) {
    const unsigned t = threadIdx.x;
    shared[0][t] = a;
    shared[1][t] = b;
    __syncthreads();
    for (unsigned n = blockDim.x; n > 1;) {
        const unsigned half = (n + 1) / 2;
        if (t < n - half) {
            shared[0][t] += shared[0][t + half];
            shared[1][t] += shared[1][t + half];
        }
        __syncthreads();
        n = half;
    }
    a = shared[0][0];
    b = shared[1][0];
    __syncthreads();  // shared is reused by the caller's next tree
}
#endif
