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
