// Element-wise kernels on compact float32 arrays of n elements.
//
// Each kernel is one line of math handed to a grid-stride map. Inputs may
// alias the output (out = a + a, a += b), so no pointer is __restrict__.
// Where every array starts on a 16-byte boundary (cupy's pool hands out
// 256-byte aligned blocks) the map moves four floats per load and store,
// then finishes the last n % 4 one at a time.
#include "common.cuh"

__device__ __forceinline__ bool aligned16(const void* p) {
    return (unsigned long long)p % 16 == 0;
}

template <class F>
__device__ __forceinline__ float4 apply4(F f, float4 x) {
    return make_float4(f(x.x), f(x.y), f(x.z), f(x.w));
}

template <class F>
__device__ __forceinline__ float4 apply4(F f, float4 x, float4 y) {
    return make_float4(f(x.x, y.x), f(x.y, y.y), f(x.z, y.z), f(x.w, y.w));
}

template <class F>
__device__ __forceinline__ void map_unary(const float* a, float* out, index_t n, F f) {
    index_t done = 0;
    if (aligned16(a) && aligned16(out)) {
        done = n / 4 * 4;
        for (index_t i = thread_index(); i < n / 4; i += thread_count()) {
            reinterpret_cast<float4*>(out)[i] = apply4(f, reinterpret_cast<const float4*>(a)[i]);
        }
    }
    for (index_t i = done + thread_index(); i < n; i += thread_count()) {
        out[i] = f(a[i]);
    }
}

template <class F>
__device__ __forceinline__ void map_binary(const float* a, const float* b, float* out, index_t n, F f) {
    index_t done = 0;
    if (aligned16(a) && aligned16(b) && aligned16(out)) {
        done = n / 4 * 4;
        for (index_t i = thread_index(); i < n / 4; i += thread_count()) {
            reinterpret_cast<float4*>(out)[i] =
                apply4(f, reinterpret_cast<const float4*>(a)[i], reinterpret_cast<const float4*>(b)[i]);
        }
    }
    for (index_t i = done + thread_index(); i < n; i += thread_count()) {
        out[i] = f(a[i], b[i]);
    }
}

extern "C" __global__ void fill(float* out, float val, index_t n) {
    index_t done = 0;
    if (aligned16(out)) {
        done = n / 4 * 4;
        for (index_t i = thread_index(); i < n / 4; i += thread_count()) {
            reinterpret_cast<float4*>(out)[i] = make_float4(val, val, val, val);
        }
    }
    for (index_t i = done + thread_index(); i < n; i += thread_count()) {
        out[i] = val;
    }
}

// ------------------------------------------------------------ array, array

extern "C" __global__ void ewise_add(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x + y; });
}

extern "C" __global__ void ewise_mul(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x * y; });
}

extern "C" __global__ void ewise_div(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x / y; });
}

extern "C" __global__ void ewise_maximum(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return nan_max(x, y); });
}

extern "C" __global__ void ewise_eq(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x == y ? 1.0f : 0.0f; });
}

extern "C" __global__ void ewise_ge(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x >= y ? 1.0f : 0.0f; });
}

// The activations' adjoints for out_grad a (the formulas of the numpy reference, which
// no fused multiply-add can round differently).
extern "C" __global__ void ewise_relu_backward(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x * (y > 0.0f ? 1.0f : 0.0f); });
}

extern "C" __global__ void ewise_tanh_backward(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x * ((1.0f - y) * (1.0f + y)); });
}

extern "C" __global__ void ewise_sigmoid_backward(const float* a, const float* b, float* out, index_t n) {
    map_binary(a, b, out, n, [](float x, float y) { return x * y * (1.0f - y); });
}

// ------------------------------------------------------------ array, scalar

extern "C" __global__ void scalar_add(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return x + v; });
}

extern "C" __global__ void scalar_mul(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return x * v; });
}

extern "C" __global__ void scalar_div(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return x / v; });
}

extern "C" __global__ void scalar_power(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return powf(x, v); });
}

extern "C" __global__ void scalar_maximum(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return nan_max(x, v); });
}

extern "C" __global__ void scalar_eq(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return x == v ? 1.0f : 0.0f; });
}

extern "C" __global__ void scalar_ge(const float* a, float v, float* out, index_t n) {
    map_unary(a, out, n, [v](float x) { return x >= v ? 1.0f : 0.0f; });
}

// ------------------------------------------------------------ unary

extern "C" __global__ void ewise_log(const float* a, float* out, index_t n) {
    map_unary(a, out, n, [](float x) { return logf(x); });
}

extern "C" __global__ void ewise_exp(const float* a, float* out, index_t n) {
    map_unary(a, out, n, [](float x) { return expf(x); });
}

extern "C" __global__ void ewise_tanh(const float* a, float* out, index_t n) {
    map_unary(a, out, n, [](float x) { return tanhf(x); });
}
