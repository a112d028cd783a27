// Optimizer steps: the element-wise Adam and SGD updates of
// ndarray_backend_numpy.adam_update / sgd_update, one pass over a parameter.
//
// The scalars arrive already rounded to float32 (step = lr / c1 and
// inv_c2 = 1 / c2 formed in double on the host). out may alias param: each
// element is read before it is written, so nothing is __restrict__.
#include "common.cuh"

extern "C" __global__ void adam_update(const float* param, const float* grad, float* m, float* v, float* out,
                                       float b1, float omb1, float b2, float omb2, float wd, float step,
                                       float inv_c2, float eps, index_t n) {
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        const float p = param[i];
        const float g = wd != 0.0f ? grad[i] + p * wd : grad[i];
        const float mi = m[i] * b1 + g * omb1;
        const float vi = v[i] * b2 + (g * g) * omb2;
        m[i] = mi;
        v[i] = vi;
        out[i] = p - (mi * step) / (sqrtf(vi * inv_c2) + eps);
    }
}

extern "C" __global__ void sgd_update(const float* param, const float* grad, float* out, float lr, float wd,
                                      index_t n) {
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        const float p = param[i];
        const float g = wd != 0.0f ? grad[i] + p * wd : grad[i];
        out[i] = p - g * lr;
    }
}

// With needle's moving-average momentum buffer u, updated in place.
extern "C" __global__ void sgd_momentum_update(const float* param, const float* grad, float* u, float* out,
                                               float lr, float mom, float ommom, float wd, index_t n) {
    for (index_t i = thread_index(); i < n; i += thread_count()) {
        const float p = param[i];
        const float g = wd != 0.0f ? grad[i] + p * wd : grad[i];
        const float ui = u[i] * mom + g * ommom;
        u[i] = ui;
        out[i] = p - ui * lr;
    }
}
