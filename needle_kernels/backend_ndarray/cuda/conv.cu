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

// Winograd F(2x2, 3x3)'s tile transforms (ndarray_backend_numpy.winograd_input/_output).
// One thread per (tile, channel) runs the whole 4x4 transform of that tile's channel:
// the same additions in the same order as the reference.
extern "C" __global__ void winograd_input(const float* __restrict__ a, float* __restrict__ out, index_t n,
                                          index_t h, index_t w, index_t c, index_t th, index_t tw) {
    const index_t tiles = n * th * tw, total = tiles * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c, t = idx / c;
        const index_t tj = t % tw, ti = (t / tw) % th, b = t / (tw * th);
        float d[4][4];
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                const index_t y = 2 * ti + i, x = 2 * tj + j;
                d[i][j] = y < h && x < w ? a[((b * h + y) * w + x) * c + ch] : 0.0f;
            }
        for (int j = 0; j < 4; ++j) {  // B^T d
            const float d0 = d[0][j], d1 = d[1][j], d2 = d[2][j], d3 = d[3][j];
            d[0][j] = d0 - d2;
            d[1][j] = d1 + d2;
            d[2][j] = d2 - d1;
            d[3][j] = d1 - d3;
        }
        for (int u = 0; u < 4; ++u) {  // (B^T d) B
            const float t0 = d[u][0], t1 = d[u][1], t2 = d[u][2], t3 = d[u][3];
            out[(4 * u + 0) * total + idx] = t0 - t2;
            out[(4 * u + 1) * total + idx] = t1 + t2;
            out[(4 * u + 2) * total + idx] = t2 - t1;
            out[(4 * u + 3) * total + idx] = t1 - t3;
        }
    }
}

extern "C" __global__ void winograd_output(const float* __restrict__ m, float* __restrict__ out, index_t n,
                                           index_t ho, index_t wo, index_t c, index_t th, index_t tw) {
    const index_t tiles = n * th * tw, total = tiles * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c, t = idx / c;
        const index_t tj = t % tw, ti = (t / tw) % th, b = t / (tw * th);
        float s[2][4];
        for (int v = 0; v < 4; ++v) {  // A^T M
            const float m0 = m[v * total + idx], m1 = m[(4 + v) * total + idx], m2 = m[(8 + v) * total + idx],
                        m3 = m[(12 + v) * total + idx];
            s[0][v] = m0 + m1 + m2;
            s[1][v] = m1 - m2 - m3;
        }
        for (int i = 0; i < 2; ++i) {  // (A^T M) A, the pixels inside the image
            const index_t y = 2 * ti + i;
            if (y >= ho) continue;
            const index_t x = 2 * tj;
            out[((b * ho + y) * wo + x) * c + ch] = s[i][0] + s[i][1] + s[i][2];
            if (x + 1 < wo) out[((b * ho + y) * wo + x + 1) * c + ch] = s[i][1] - s[i][2] - s[i][3];
        }
    }
}

// The weight gradient's pieces (ndarray_backend_numpy.winograd_weight_grad): the 2x2 blocks
// of the output gradient transformed by G' (one thread per tile and channel), and the summed
// products M transformed to the 3x3 kernel, A'^T M A' (one thread per channel pair).
extern "C" __global__ void winograd_grad_tiles(const float* __restrict__ g, float* __restrict__ out, index_t n,
                                               index_t ho, index_t wo, index_t c, index_t th, index_t tw) {
    const index_t tiles = n * th * tw, total = tiles * c;
    for (index_t idx = thread_index(); idx < total; idx += thread_count()) {
        const index_t ch = idx % c, t = idx / c;
        const index_t tj = t % tw, ti = (t / tw) % th, b = t / (tw * th);
        float e[2][2], r[4][2];
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
                const index_t y = 2 * ti + i, x = 2 * tj + j;
                e[i][j] = y < ho && x < wo ? g[((b * ho + y) * wo + x) * c + ch] : 0.0f;
            }
        for (int j = 0; j < 2; ++j) {  // G' e
            r[0][j] = e[0][j];
            r[1][j] = 0.5f * (e[0][j] + e[1][j]);
            r[2][j] = 0.5f * (e[0][j] - e[1][j]);
            r[3][j] = -e[1][j];
        }
        for (int u = 0; u < 4; ++u) {  // (G' e) G'^T
            out[(4 * u + 0) * total + idx] = r[u][0];
            out[(4 * u + 1) * total + idx] = 0.5f * (r[u][0] + r[u][1]);
            out[(4 * u + 2) * total + idx] = 0.5f * (r[u][0] - r[u][1]);
            out[(4 * u + 3) * total + idx] = -r[u][1];
        }
    }
}

extern "C" __global__ void winograd_weight_output(const float* __restrict__ m, float* __restrict__ dw, index_t pairs) {
    for (index_t i = thread_index(); i < pairs; i += thread_count()) {
        float s[3][4];
        for (int v = 0; v < 4; ++v) {  // A'^T M
            const float m0 = m[v * pairs + i], m1 = m[(4 + v) * pairs + i], m2 = m[(8 + v) * pairs + i],
                        m3 = m[(12 + v) * pairs + i];
            s[0][v] = m0 + m1 + m2;
            s[1][v] = m1 - m2;
            s[2][v] = m1 + m2 + m3;
        }
        for (int a = 0; a < 3; ++a) {  // (A'^T M) A'
            dw[(3 * a + 0) * pairs + i] = s[a][0] + s[a][1] + s[a][2];
            dw[(3 * a + 1) * pairs + i] = s[a][1] - s[a][2];
            dw[(3 * a + 2) * pairs + i] = s[a][1] + s[a][2] + s[a][3];
        }
    }
}
