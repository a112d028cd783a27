// The element-wise part of one LSTM step (ndarray_backend_numpy.lstm_cell):
// gate pre-activations z (rows, 4H) laid out [i | f | g | o] per row, one
// thread per (row, j) of the (rows, H) states, grid-stride.
#include "common.cuh"

__device__ __forceinline__ float gate_sigmoid(float a) { return (tanhf(a * 0.5f) + 1.0f) * 0.5f; }

extern "C" __global__ void lstm_cell(const float* z, const float* c0, float* h, float* c, index_t rows,
                                     index_t hidden) {
    const index_t n = rows * hidden;
    for (index_t k = thread_index(); k < n; k += thread_count()) {
        const index_t r = k / hidden, j = k % hidden;
        const float* zr = z + r * 4 * hidden;
        const float cn = gate_sigmoid(zr[hidden + j]) * c0[k] + gate_sigmoid(zr[j]) * tanhf(zr[2 * hidden + j]);
        c[k] = cn;
        h[k] = gate_sigmoid(zr[3 * hidden + j]) * tanhf(cn);
    }
}

extern "C" __global__ void lstm_cell_backward(const float* z, const float* c0, const float* dh, const float* dc,
                                              float* dz, float* dc0, index_t rows, index_t hidden) {
    const index_t n = rows * hidden;
    for (index_t k = thread_index(); k < n; k += thread_count()) {
        const index_t r = k / hidden, j = k % hidden;
        const float* zr = z + r * 4 * hidden;
        float* dzr = dz + r * 4 * hidden;
        const float i = gate_sigmoid(zr[j]), f = gate_sigmoid(zr[hidden + j]);
        const float g = tanhf(zr[2 * hidden + j]), o = gate_sigmoid(zr[3 * hidden + j]);
        const float t = tanhf(f * c0[k] + i * g);
        const float d = dc[k] + dh[k] * o * (1.0f - t * t);
        dzr[j] = d * g * i * (1.0f - i);
        dzr[hidden + j] = d * c0[k] * f * (1.0f - f);
        dzr[2 * hidden + j] = d * i * (1.0f - g * g);
        dzr[3 * hidden + j] = dh[k] * t * o * (1.0f - o);
        dc0[k] = d * f;
    }
}
