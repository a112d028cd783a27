/* What one thread does on its chunk, for the Cython + OpenMP backend.
 *
 * ndarray_backend_cpu.pyx decides how work is split across OpenMP threads;
 * the loops here run on one contiguous chunk each. They are plain C loops
 * that gcc/clang vectorize at -O3, compiled several times for different
 * instruction sets (NK_CLONES: AVX-512, AVX2+FMA, baseline) and picked at
 * load time, so a portable build still uses the wide registers of the CPU
 * it runs on.
 *
 * exp/log/tanh (and max) are in ndarray_backend_cpu_vmath.h, written with
 * explicit vector types: a libm call inside a loop stops gcc from
 * vectorizing it, and so do the selects that handle NaN and overflow.
 */
#ifndef NK_CPU_KERNELS_H
#define NK_CPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && !defined(NK_NO_CLONES)
#define NK_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define NK_CLONES
#endif

#define NK_CAT_(a, b) a##b
#define NK_CAT(a, b) NK_CAT_(a, b)

#if defined(__GNUC__)
#define NK_UNROLL _Pragma("GCC unroll 16")
#else
#define NK_UNROLL
#endif

/* ------------------------------------------------------------ scalar helpers */

/* numpy's maximum propagates NaN from either side. */
static inline float nk_maxf(float a, float b) { return ((a > b) | (a != a)) ? a : b; }

/* ------------------------------------------------------------ element-wise */

enum { NK_ADD, NK_MUL, NK_DIV, NK_MAX, NK_EQ, NK_GE, NK_POW, NK_SQUARE,
       NK_RELU_BACKWARD, NK_TANH_BACKWARD, NK_SIGMOID_BACKWARD };
enum { NK_LOG, NK_EXP, NK_TANH };

NK_CLONES static void nk_binary(int op, const float *a, const float *b, float *out, ptrdiff_t n)
{
    ptrdiff_t i;
    switch (op) {
    case NK_ADD: for (i = 0; i < n; i++) out[i] = a[i] + b[i]; break;
    case NK_MUL: for (i = 0; i < n; i++) out[i] = a[i] * b[i]; break;
    case NK_DIV: for (i = 0; i < n; i++) out[i] = a[i] / b[i]; break;
    case NK_MAX: for (i = 0; i < n; i++) out[i] = nk_maxf(a[i], b[i]); break;
    case NK_EQ:  for (i = 0; i < n; i++) out[i] = a[i] == b[i] ? 1.0f : 0.0f; break;
    case NK_GE:  for (i = 0; i < n; i++) out[i] = a[i] >= b[i] ? 1.0f : 0.0f; break;
    /* the activations' adjoints; (1 - b)(1 + b) rather than 1 - b*b, which an FMA would
     * round differently from numpy (and which cancels badly for b near 1) */
    case NK_RELU_BACKWARD: for (i = 0; i < n; i++) out[i] = a[i] * (b[i] > 0.0f ? 1.0f : 0.0f); break;
    case NK_TANH_BACKWARD: for (i = 0; i < n; i++) out[i] = a[i] * ((1.0f - b[i]) * (1.0f + b[i])); break;
    case NK_SIGMOID_BACKWARD: for (i = 0; i < n; i++) out[i] = a[i] * b[i] * (1.0f - b[i]); break;
    }
}

NK_CLONES static void nk_scalar(int op, const float *a, float v, float *out, ptrdiff_t n)
{
    ptrdiff_t i;
    switch (op) {
    case NK_ADD: for (i = 0; i < n; i++) out[i] = a[i] + v; break;
    case NK_MUL: for (i = 0; i < n; i++) out[i] = a[i] * v; break;
    case NK_DIV: for (i = 0; i < n; i++) out[i] = a[i] / v; break;
    case NK_MAX: for (i = 0; i < n; i++) out[i] = nk_maxf(a[i], v); break;
    case NK_EQ:  for (i = 0; i < n; i++) out[i] = a[i] == v ? 1.0f : 0.0f; break;
    case NK_GE:  for (i = 0; i < n; i++) out[i] = a[i] >= v ? 1.0f : 0.0f; break;
    case NK_SQUARE: for (i = 0; i < n; i++) out[i] = a[i] * a[i]; break;
    case NK_POW: for (i = 0; i < n; i++) out[i] = powf(a[i], v); break;
    }
}

NK_CLONES static void nk_fill(float *out, float v, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) out[i] = v;
}

/* ------------------------------------------------------------ optimizer steps */

/* The element-wise Adam and SGD updates of ndarray_backend_numpy.adam_update
 * and sgd_update, on one chunk. out may be p: each element is read before it
 * is written. Built with -fno-math-errno (setup.py), so sqrtf is one vector
 * instruction (v >= 0) and the loop vectorizes. */
NK_CLONES static void nk_adam(const float *p, const float *g, float *m, float *v, float *out, ptrdiff_t n,
                              float b1, float omb1, float b2, float omb2, float wd, int has_wd,
                              float step, float inv_c2, float eps)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        float gi = has_wd ? g[i] + p[i] * wd : g[i];
        float mi = m[i] * b1 + gi * omb1;
        float vi = v[i] * b2 + (gi * gi) * omb2;
        m[i] = mi;
        v[i] = vi;
        out[i] = p[i] - (mi * step) / (sqrtf(vi * inv_c2) + eps);
    }
}

/* u == NULL: plain SGD. */
NK_CLONES static void nk_sgd(const float *p, const float *g, float *u, float *out, ptrdiff_t n,
                             float lr, float mom, float ommom, float wd, int has_wd)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        float gi = has_wd ? g[i] + p[i] * wd : g[i];
        if (u) {
            gi = u[i] * mom + gi * ommom;
            u[i] = gi;
        }
        out[i] = p[i] - gi * lr;
    }
}

/* ------------------------------------------------------------ col2im */

/* Row y of image b of ndarray_backend_numpy.col2im: out_row (w, c) is
 * overwritten with the sum of the window entries that read it, gathered in
 * order of increasing (ki, kj) so the sums round as the reference's do. */
/* out = a + bias, the bias repeated on every row of n (out may be a: no restrict on them). */
NK_CLONES static void nk_bias_add_rows(const float *a, const float *restrict bias, float *out, ptrdiff_t rows,
                                       ptrdiff_t n)
{
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t c = 0; c < n; c++) out[r * n + c] = a[r * n + c] + bias[c];
}

/* Batch norm over a block of rows of n channels, one call per thread's block (a call per
 * row cost more than its few vectors of work when n is 64). */
NK_CLONES static void nk_bn_apply_rows(const float *restrict x, const float *restrict scale,
                                       const float *restrict shift, float *restrict out, ptrdiff_t rows,
                                       ptrdiff_t n, int relu)
{
    if (relu) { /* the ReLU after the batch norm, in the same pass */
        for (ptrdiff_t r = 0; r < rows; r++)
            for (ptrdiff_t c = 0; c < n; c++) {
                const float y = x[r * n + c] * scale[c] + shift[c];
                out[r * n + c] = y > 0.0f ? y : 0.0f;
            }
        return;
    }
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t c = 0; c < n; c++) out[r * n + c] = x[r * n + c] * scale[c] + shift[c];
}

/* acc[c] += x[r, c] (or (x[r, c] - center[c])**2 when center is not NULL) over the rows,
 * in float64. */
NK_CLONES static void nk_bn_col_sums(const float *restrict x, ptrdiff_t rows, ptrdiff_t n,
                                     const double *restrict center, double *restrict acc)
{
    for (ptrdiff_t r = 0; r < rows; r++) {
        if (center == NULL) {
            for (ptrdiff_t c = 0; c < n; c++) acc[c] += x[r * n + c];
        } else {
            for (ptrdiff_t c = 0; c < n; c++) {
                double d = x[r * n + c] - center[c];
                acc[c] += d * d;
            }
        }
    }
}

/* db[c] += dy[r, c] and dw[c] += dy[r, c] * (x[r, c] - mean[c]) * invstd[c] over the rows, in float64. */
/* d where y > 0, else +0 (whatever d is, NaN included): the ReLU's adjoint as a bit mask, which
 * gcc vectorises where a select of d or 0 stays a branch. */
static inline float nk_relu_pass(float d, float y)
{
    uint32_t bits, keep = -(uint32_t)(y > 0.0f);
    memcpy(&bits, &d, sizeof bits);
    bits &= keep;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* relu (y != NULL): dy counts only where the ReLU's output y > 0; the loops are written twice so
 * that the one without a mask reads no y. */
NK_CLONES static void nk_bn_grad_sums(const float *restrict x, const float *restrict dy, const float *restrict y,
                                      ptrdiff_t rows, ptrdiff_t n, const double *restrict mean,
                                      const double *restrict invstd, double *restrict db, double *restrict dw)
{
    if (y) {
        for (ptrdiff_t r = 0; r < rows; r++)
            for (ptrdiff_t c = 0; c < n; c++) {
                double g = nk_relu_pass(dy[r * n + c], y[r * n + c]);
                db[c] += g;
                dw[c] += g * (x[r * n + c] - mean[c]) * invstd[c];
            }
        return;
    }
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t c = 0; c < n; c++) {
            double g = dy[r * n + c];
            db[c] += g;
            dw[c] += g * (x[r * n + c] - mean[c]) * invstd[c];
        }
}

/* dx = k * ((dy - gm) - (x - mean) * xd), the per-channel k, gm, mean, xd precomputed; dy masked
 * by the ReLU's output y as in nk_bn_grad_sums. */
NK_CLONES static void nk_bn_dx_rows(const float *restrict x, const float *restrict dy, const float *restrict y,
                                    const float *restrict k, const float *restrict gm, const float *restrict mean,
                                    const float *restrict xd, float *restrict dx, ptrdiff_t rows, ptrdiff_t n)
{
    if (y) {
        for (ptrdiff_t r = 0; r < rows; r++)
            for (ptrdiff_t c = 0; c < n; c++) {
                float g = nk_relu_pass(dy[r * n + c], y[r * n + c]);
                dx[r * n + c] = k[c] * ((g - gm[c]) - (x[r * n + c] - mean[c]) * xd[c]);
            }
        return;
    }
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t c = 0; c < n; c++)
            dx[r * n + c] = k[c] * ((dy[r * n + c] - gm[c]) - (x[r * n + c] - mean[c]) * xd[c]);
}

/* softmax's adjoint for one row: out = y * (g - sum(g * y)), the sum in float64. out may be y or g. */
NK_CLONES static void nk_softmax_grad_row(const float *y, const float *g, float *out, ptrdiff_t n)
{
    double p[4] = {0.0, 0.0, 0.0, 0.0};
    ptrdiff_t i, n4 = n - n % 4;
    for (i = 0; i < n4; i += 4)
        for (int j = 0; j < 4; j++) p[j] += (double)g[i + j] * y[i + j];
    for (; i < n; i++) p[0] += (double)g[i] * y[i];
    float s = (float)(p[0] + p[1] + p[2] + p[3]);
    for (i = 0; i < n; i++) out[i] = y[i] * (g[i] - s);
}

/* One row of a layer norm over n features: the row's mean and inverse std in float64 (four
 * partial sums, which the compiler can keep in vector lanes), then out = (x - mean) * invstd * w + b
 * in float32. */
NK_CLONES static void nk_ln_row(const float *restrict x, const float *restrict w, const float *restrict b,
                                float *restrict out, ptrdiff_t n, double eps, float *mean, float *invstd)
{
    double p[4] = {0.0, 0.0, 0.0, 0.0}, q[4] = {0.0, 0.0, 0.0, 0.0};
    ptrdiff_t i, n4 = n - n % 4;
    for (i = 0; i < n4; i += 4)
        for (int j = 0; j < 4; j++) p[j] += x[i + j];
    for (; i < n; i++) p[0] += x[i];
    double m = (p[0] + p[1] + p[2] + p[3]) / (double)n;
    for (i = 0; i < n4; i += 4)
        for (int j = 0; j < 4; j++) { double d = x[i + j] - m; q[j] += d * d; }
    for (; i < n; i++) { double d = x[i] - m; q[0] += d * d; }
    double s = 1.0 / sqrt((q[0] + q[1] + q[2] + q[3]) / (double)n + eps);
    *mean = (float)m;
    *invstd = (float)s;
    float mf = (float)m, sf = (float)s;
    for (i = 0; i < n; i++) out[i] = (x[i] - mf) * sf * w[i] + b[i];
}

/* The layer norm's gradient for one row: db[c] += dy and dw[c] += dy * xhat (float64 column
 * accumulators of this thread), and dx = invstd * (gw - mean(gw) - xhat * mean(gw * xhat)) with
 * gw = dy * w, the two row means in float64. gw goes through dx as stored floats: gw - mean(gw)
 * is then exactly 0 where the row's gw are all equal (a single feature), where a product fused
 * into the subtraction would leave its rounding error, times invstd = 1 / sqrt(eps).
 * dx may be dy (each dy[i] is read before dx[i] is written), not x. */
NK_CLONES static void nk_ln_grad_row(const float *x, const float *dy, const float *restrict w,
                                     float mean, float invstd, float *dx, ptrdiff_t n,
                                     double *restrict dw, double *restrict db)
{
    /* four partial sums of each row sum, as in nk_ln_row: one chain of float64 adds would
     * wait out an add's latency per feature */
    double a[4] = {0.0, 0.0, 0.0, 0.0}, c[4] = {0.0, 0.0, 0.0, 0.0};
    ptrdiff_t i, n4 = n - n % 4;
    for (i = 0; i < n4; i += 4)
        for (int j = 0; j < 4; j++) {
            float g = dy[i + j], xh = (x[i + j] - mean) * invstd, gw = g * w[i + j];
            a[j] += gw;
            c[j] += (double)gw * xh;
            db[i + j] += g;
            dw[i + j] += (double)g * xh;
            dx[i + j] = gw;
        }
    for (; i < n; i++) {
        float g = dy[i], xh = (x[i] - mean) * invstd, gw = g * w[i];
        a[0] += gw;
        c[0] += (double)gw * xh;
        db[i] += g;
        dw[i] += (double)g * xh;
        dx[i] = gw;
    }
    float am = (float)((a[0] + a[1] + a[2] + a[3]) / (double)n);
    float cm = (float)((c[0] + c[1] + c[2] + c[3]) / (double)n);
    for (i = 0; i < n; i++)
        dx[i] = invstd * ((dx[i] - am) - (x[i] - mean) * invstd * cm);
}

/* The RMS norm of one row: invrms = 1 / sqrt(mean(x^2) + eps), the sum in float64, and
 * out = x * invrms * w. out may be x. */
NK_CLONES static void nk_rms_row(const float *x, const float *restrict w, float *out, ptrdiff_t n, double eps,
                                 float *invrms)
{
    double q[4] = {0.0, 0.0, 0.0, 0.0};
    ptrdiff_t i, n4 = n - n % 4;
    for (i = 0; i < n4; i += 4)
        for (int j = 0; j < 4; j++) q[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) q[0] += (double)x[i] * x[i];
    double s = 1.0 / sqrt((q[0] + q[1] + q[2] + q[3]) / (double)n + eps);
    *invrms = (float)s;
    float sf = (float)s;
    for (i = 0; i < n; i++) out[i] = x[i] * sf * w[i];
}

/* The RMS norm's gradient for one row: dw[c] += dy * xhat (a float64 column accumulator of this
 * thread) and dx = invrms * (gw - xhat * mean(gw * xhat)) with xhat = x * invrms, gw = dy * w,
 * the row mean in float64. dx may be dy (each dy[i] is read before dx[i] is written), not x. */
NK_CLONES static void nk_rms_grad_row(const float *x, const float *dy, const float *restrict w, float invrms,
                                      float *dx, ptrdiff_t n, double *restrict dw)
{
    double c = 0.0;
    for (ptrdiff_t i = 0; i < n; i++) {
        float g = dy[i], xh = x[i] * invrms, gw = g * w[i];
        c += (double)gw * xh;
        dw[i] += (double)g * xh;
        dx[i] = gw;
    }
    float cm = (float)(c / (double)n);
    for (ptrdiff_t i = 0; i < n; i++)
        dx[i] = invrms * (dx[i] - x[i] * invrms * cm);
}

NK_CLONES static void nk_col2im_row(const float *cols, float *out_row, ptrdiff_t b, ptrdiff_t y, ptrdiff_t w,
                                    ptrdiff_t c, ptrdiff_t k, ptrdiff_t s, ptrdiff_t ho, ptrdiff_t wo)
{
    memset(out_row, 0, (size_t)(w * c) * sizeof(float));
    for (ptrdiff_t ki = 0; ki < k && ki <= y; ki++) {
        ptrdiff_t dy = y - ki;
        if (dy % s || dy / s >= ho) continue;
        const float *src_i = cols + (b * ho + dy / s) * wo * k * k * c + ki * k * c;
        for (ptrdiff_t kj = 0; kj < k; kj++) {
            for (ptrdiff_t j = 0; j < wo; j++) {
                const float *src = src_i + j * k * k * c + kj * c;
                float *dst = out_row + (j * s + kj) * c;
                for (ptrdiff_t ch = 0; ch < c; ch++) dst[ch] += src[ch];
            }
        }
    }
}

/* Ask for n floats from p into the cache, a line at a time, in order: a sweep the hardware
 * streams at full bandwidth, where the kernel's own reads would come scattered and cold. */
static inline void nk_prefetch(const float *p, ptrdiff_t n)
{
#if defined(__GNUC__)
    for (ptrdiff_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
#else
    (void)p;
    (void)n;
#endif
}

/* The segment table of conv_implicit's convolution kernels (see the gemm header) for the pixels
 * r0 .. r0 + npix of the NHWC image a[b*sn + y*sh + x*sw + ch*sc] (h x w x c), whose k x k
 * windows start at (i*s - ph, j*s - pw). A window is read as nseg segments of contiguous floats:
 *
 * - rows (planar == 0): segment ki is the window's row ki, k * c floats (kj, ch), in the image
 *   itself where its pixels are contiguous (sc == 1, sw == c);
 * - planes (planar != 0, an image whose rows are contiguous in each channel, sw == 1: an NCHW
 *   batch seen as NHWC): segment ki * c + ch is channel ch of row ki, k floats (kj).
 *
 * rows[p * nseg + seg] points at segment seg of pixel p's window: in the image, at ``zeros``
 * (k * c zeros) where the segment lies wholly outside it, or at a copy gathered into ``edge``
 * (zero outside the image; at most npix * k * k * c floats) where it is cut by the image's
 * edge or its floats are not contiguous.
 *
 * A window inside the image whose left neighbour's was too (the same output row) is the
 * neighbour's moved s columns on: its pointers are the neighbour's plus s * sw, a loop the
 * compiler vectorizes, where working each one out again costs as much as the product's
 * arithmetic for a window of few channels (ResNet9's first layer: 21 segments of 7 floats). */
NK_CLONES static void nk_window_rows(const float *a, ptrdiff_t sn, ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t sc,
                                     ptrdiff_t h, ptrdiff_t w, ptrdiff_t c, ptrdiff_t k, ptrdiff_t s, ptrdiff_t ph,
                                     ptrdiff_t pw, ptrdiff_t ho, ptrdiff_t wo, int planar, ptrdiff_t r0,
                                     ptrdiff_t npix, const float *zeros, float *edge, const float **rows)
{
    const ptrdiff_t planes = planar ? c : 1, seglen = planar ? k : k * c, nseg = k * planes;
    const ptrdiff_t cc = planar ? 1 : c; /* channels in one segment */
    const int dense = planar ? sw == 1 : sc == 1 && sw == c;
    /* the first pixel's position, then a step at a time (no divisions per pixel) */
    ptrdiff_t j = r0 % wo, i = r0 / wo % ho, b = r0 / wo / ho;
    int prev_inside = 0; /* the pixel before (in this row) lies wholly inside the image */
    const float **seg = rows;
    for (ptrdiff_t p = 0; p < npix; p++, seg += nseg) {
        const ptrdiff_t x0 = j * s - pw, y0 = i * s - ph;
        /* the taps kj_lo .. kj_hi - 1 of every window row fall inside the image's columns */
        const ptrdiff_t kj_lo = x0 < 0 ? (-x0 < k ? -x0 : k) : 0;
        const ptrdiff_t kj_hi = w - x0 < k ? (w - x0 > kj_lo ? w - x0 : kj_lo) : k;
        const int whole = dense && kj_lo == 0 && kj_hi == k;
        const int inside = whole && y0 >= 0 && y0 + k <= h;
        if (inside && prev_inside) {
            const float *const *left = seg - nseg;
            const ptrdiff_t step = s * sw;
            for (ptrdiff_t t = 0; t < nseg; t++) seg[t] = left[t] + step;
        } else {
            const float *first = a + b * sn + y0 * sh + (x0 + kj_lo) * sw; /* row ki = 0, plane 0 */
            const float **out = seg;
            for (ptrdiff_t ki = 0; ki < k; ki++) {
                const ptrdiff_t y = y0 + ki;
                const float *src = first + ki * sh;
                if (y < 0 || y >= h || kj_hi == kj_lo) {
                    for (ptrdiff_t pl = 0; pl < planes; pl++) *out++ = zeros;
                } else if (whole) {
                    for (ptrdiff_t pl = 0; pl < planes; pl++, src += sc) *out++ = src;
                } else {
                    /* the row's segments, zero outside the image: one memset for them all, where
                     * each segment's few floats would take calls of their own */
                    memset(edge, 0, (size_t)(planes * seglen) * sizeof(float));
                    for (ptrdiff_t pl = 0; pl < planes; pl++, src += sc) {
                        float *d = edge + kj_lo * cc;
                        *out++ = edge;
                        edge += seglen;
                        for (ptrdiff_t kj = 0; kj < kj_hi - kj_lo; kj++)
                            for (ptrdiff_t ch = 0; ch < cc; ch++) d[kj * cc + ch] = src[kj * sw + ch * sc];
                    }
                }
            }
        }
        prev_inside = inside;
        if (++j == wo) {
            j = 0;
            prev_inside = 0;
            if (++i == ho) {
                i = 0;
                b++;
            }
        }
    }
}

/* ------------------------------------------------------------ Winograd F(2x2, 3x3)
 *
 * A 3x3 convolution of stride 1 computes each 2x2 block of outputs from a 4x4 tile d of
 * the (padded) input as  Y = A^T [(G g G^T) . (B^T d B)] A  with
 *
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],   A^T = [1 1 1 0; 0 1 -1 -1],
 *
 * so the 16 products of the middle are 16 matrix products over the channels: 16 multiply-
 * adds per channel pair and block where the direct form needs 36. The transforms are adds
 * only; these two kernels run them for one tile, over all its channels (c contiguous). */

/* Channels go NK_WB at a time through local blocks: the 16 rows of a tile lie anywhere in
 * memory, and copies into arrays of the function's own let the block arithmetic vectorize
 * without the compiler having to prove those rows never overlap the output. */
#define NK_WB 64

/* Tiles are numbered t = (b * th + ti) * tw + tj for image b, tile row ti and column tj. */
#define NK_TILE_POSITION(t, th, tw) \
    const ptrdiff_t tj = (t) % (tw), ti = (t) / (tw) % (th), b = (t) / (tw) / (th)

/* tile t = (b, ti, tj) of the NHWC image a (n, h, w, c): out[(4u + v) * ld + ch] = (B^T d B)[u][v]
 * for channel ch, d[i][j] = a[b, 2ti + i, 2tj + j, ch] and 0 outside the image. */
NK_CLONES static void nk_winograd_input_tile(const float *a, float *out, ptrdiff_t ld, ptrdiff_t t,
                                             ptrdiff_t th, ptrdiff_t tw, ptrdiff_t h, ptrdiff_t w,
                                             ptrdiff_t c)
{
    NK_TILE_POSITION(t, th, tw);
    float d[4][4][NK_WB], row[4][NK_WB];
    for (ptrdiff_t c0 = 0; c0 < c; c0 += NK_WB) {
        ptrdiff_t cb = c - c0 < NK_WB ? c - c0 : NK_WB;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                ptrdiff_t y = 2 * ti + i, x = 2 * tj + j;
                if (y < h && x < w) {
                    memcpy(d[i][j], a + ((b * h + y) * w + x) * c + c0, (size_t)cb * sizeof(float));
                    if (cb < NK_WB) memset(d[i][j] + cb, 0, (size_t)(NK_WB - cb) * sizeof(float));
                } else {
                    memset(d[i][j], 0, sizeof(d[i][j]));
                }
            }
        for (int j = 0; j < 4; j++) { /* B^T d, one column j at a time: rows of d[.][j] */
            for (ptrdiff_t k = 0; k < NK_WB; k++) {
                float d0 = d[0][j][k], d1 = d[1][j][k], d2 = d[2][j][k], d3 = d[3][j][k];
                d[0][j][k] = d0 - d2;
                d[1][j][k] = d1 + d2;
                d[2][j][k] = d2 - d1;
                d[3][j][k] = d1 - d3;
            }
        }
        for (int u = 0; u < 4; u++) { /* (B^T d) B: the columns of row u */
            for (ptrdiff_t k = 0; k < NK_WB; k++) {
                float t0 = d[u][0][k], t1 = d[u][1][k], t2 = d[u][2][k], t3 = d[u][3][k];
                row[0][k] = t0 - t2;
                row[1][k] = t1 + t2;
                row[2][k] = t2 - t1;
                row[3][k] = t1 - t3;
            }
            for (int v = 0; v < 4; v++) memcpy(out + (4 * u + v) * ld + c0, row[v], (size_t)cb * sizeof(float));
        }
    }
}

/* the 2x2 outputs of tile t = (b, ti, tj) from its 16 products m[(4u + v) * ld + ch]:
 * out[b, 2ti + i, 2tj + j, ch] = (A^T M A)[i][j], the pixels inside the (n, ho, wo, c) image. */
NK_CLONES static void nk_winograd_output_tile(const float *m, ptrdiff_t ld, float *out, ptrdiff_t t,
                                              ptrdiff_t th, ptrdiff_t tw, ptrdiff_t ho, ptrdiff_t wo,
                                              ptrdiff_t c)
{
    NK_TILE_POSITION(t, th, tw);
    float q[4][4][NK_WB], s[2][4][NK_WB], y[2][2][NK_WB];
    for (ptrdiff_t c0 = 0; c0 < c; c0 += NK_WB) {
        ptrdiff_t cb = c - c0 < NK_WB ? c - c0 : NK_WB;
        for (int u = 0; u < 4; u++)
            for (int v = 0; v < 4; v++) {
                memcpy(q[u][v], m + (4 * u + v) * ld + c0, (size_t)cb * sizeof(float));
                if (cb < NK_WB) memset(q[u][v] + cb, 0, (size_t)(NK_WB - cb) * sizeof(float));
            }
        for (int v = 0; v < 4; v++) /* A^T M */
            for (ptrdiff_t k = 0; k < NK_WB; k++) {
                s[0][v][k] = q[0][v][k] + q[1][v][k] + q[2][v][k];
                s[1][v][k] = q[1][v][k] - q[2][v][k] - q[3][v][k];
            }
        for (int i = 0; i < 2; i++) /* (A^T M) A */
            for (ptrdiff_t k = 0; k < NK_WB; k++) {
                y[i][0][k] = s[i][0][k] + s[i][1][k] + s[i][2][k];
                y[i][1][k] = s[i][1][k] - s[i][2][k] - s[i][3][k];
            }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                if (2 * ti + i < ho && 2 * tj + j < wo)
                    memcpy(out + ((b * ho + 2 * ti + i) * wo + 2 * tj + j) * c + c0, y[i][j],
                           (size_t)cb * sizeof(float));
    }
}

/* The weight gradient of the same convolution, dW = sum over tiles of A'^T [(G' e G'^T) . (B^T d B)] A'
 * (Winograd F(3x3, 2x2), the same points and so the same B^T): d the 4x4 input tile as above,
 * e the tile's 2x2 block of output gradients, and
 *
 *   G' = [1 0; 1/2 1/2; 1/2 -1/2; 0 -1],   A'^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1].
 *
 * tile t = (b, ti, tj) of the gradient g (n, ho, wo, c): out[(4u + v) * ld + ch] = (G' e G'^T)[u][v],
 * e[i][j] = g[b, 2ti + i, 2tj + j, ch] and 0 outside. */
NK_CLONES static void nk_winograd_grad_tile(const float *g, float *out, ptrdiff_t ld, ptrdiff_t t, ptrdiff_t th,
                                            ptrdiff_t tw, ptrdiff_t ho, ptrdiff_t wo, ptrdiff_t c)
{
    NK_TILE_POSITION(t, th, tw);
    float e[2][2][NK_WB], ge[4][2][NK_WB], r[4][NK_WB];
    for (ptrdiff_t c0 = 0; c0 < c; c0 += NK_WB) {
        ptrdiff_t cb = c - c0 < NK_WB ? c - c0 : NK_WB;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                ptrdiff_t y = 2 * ti + i, x = 2 * tj + j;
                if (y < ho && x < wo) {
                    memcpy(e[i][j], g + ((b * ho + y) * wo + x) * c + c0, (size_t)cb * sizeof(float));
                    if (cb < NK_WB) memset(e[i][j] + cb, 0, (size_t)(NK_WB - cb) * sizeof(float));
                } else {
                    memset(e[i][j], 0, sizeof(e[i][j]));
                }
            }
        for (int j = 0; j < 2; j++) /* G' e */
            for (ptrdiff_t k = 0; k < NK_WB; k++) {
                float e0 = e[0][j][k], e1 = e[1][j][k];
                ge[0][j][k] = e0;
                ge[1][j][k] = 0.5f * (e0 + e1);
                ge[2][j][k] = 0.5f * (e0 - e1);
                ge[3][j][k] = -e1;
            }
        for (int u = 0; u < 4; u++) { /* (G' e) G'^T */
            for (ptrdiff_t k = 0; k < NK_WB; k++) {
                float t0 = ge[u][0][k], t1 = ge[u][1][k];
                r[0][k] = t0;
                r[1][k] = 0.5f * (t0 + t1);
                r[2][k] = 0.5f * (t0 - t1);
                r[3][k] = -t1;
            }
            for (int v = 0; v < 4; v++) memcpy(out + (4 * u + v) * ld + c0, r[v], (size_t)cb * sizeof(float));
        }
    }
}

/* dW (3, 3, n) from the 16 summed products m[(4u + v) * n + i] of n channel pairs: A'^T M A'. */
NK_CLONES static void nk_winograd_weight_output(const float *m, float *dw, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        float s[3][4];
        for (int v = 0; v < 4; v++) {
            float m0 = m[v * n + i], m1 = m[(4 + v) * n + i], m2 = m[(8 + v) * n + i], m3 = m[(12 + v) * n + i];
            s[0][v] = m0 + m1 + m2;
            s[1][v] = m1 - m2;
            s[2][v] = m1 + m2 + m3;
        }
        for (int a = 0; a < 3; a++) {
            dw[(3 * a + 0) * n + i] = s[a][0] + s[a][1] + s[a][2];
            dw[(3 * a + 1) * n + i] = s[a][1] - s[a][2];
            dw[(3 * a + 2) * n + i] = s[a][1] + s[a][2] + s[a][3];
        }
    }
}

/* ------------------------------------------------------------ reductions */

/* Sixteen partial sums let the loop vectorize without -ffast-math (which
 * would allow reassociation everywhere) and also make the rounding error
 * grow more slowly than one running sum. */
#define NK_LANES 16

NK_CLONES static float nk_sum(const float *a, ptrdiff_t n)
{
    if (n < NK_LANES) { /* a short row (a 2x2 map's pixels): the same sum without the lanes'
                           set-up and final tree, which cost more than the row */
        float s = 0.0f;
        for (ptrdiff_t i = 0; i < n; i++) s += a[i];
        return s;
    }
    float acc[NK_LANES] = {0};
    ptrdiff_t i = 0;
    for (; i + NK_LANES <= n; i += NK_LANES) {
        NK_UNROLL
        for (int l = 0; l < NK_LANES; l++) acc[l] += a[i + l];
    }
    float s = 0.0f;
    for (; i < n; i++) s += a[i];
    for (int w = NK_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0] + s;
}

/* out[j] (+)= sum_r a[r * lda + j] for j < n: the rows are contiguous, so the
 * reduction over a leading axis is a sequence of vector adds into out. */
NK_CLONES static void nk_sum_rows(const float *restrict a, ptrdiff_t lda, ptrdiff_t rows, float *restrict out,
                                  ptrdiff_t n, int is_max)
{
    if (rows <= 0) return;
    memcpy(out, a, (size_t)n * sizeof(float));
    if (is_max) {
        for (ptrdiff_t r = 1; r < rows; r++) {
            const float *row = a + r * lda;
            for (ptrdiff_t j = 0; j < n; j++) out[j] = nk_maxf(out[j], row[j]);
        }
    } else {
        for (ptrdiff_t r = 1; r < rows; r++) {
            const float *row = a + r * lda;
            for (ptrdiff_t j = 0; j < n; j++) out[j] += row[j];
        }
    }
}

/* ------------------------------------------------------------ tiled matmul */

/* out_tile (+)= a_tile @ b_tile for T x T contiguous tiles (T = 8). */
NK_CLONES static void nk_tile_matmul8(const float *a, const float *b, float *out)
{
    for (int i = 0; i < 8; i++) {
        float acc[8];
        for (int j = 0; j < 8; j++) acc[j] = out[i * 8 + j];
        for (int k = 0; k < 8; k++) {
            float av = a[i * 8 + k];
            NK_UNROLL
            for (int j = 0; j < 8; j++) acc[j] += av * b[k * 8 + j];
        }
        for (int j = 0; j < 8; j++) out[i * 8 + j] = acc[j];
    }
}

/* ------------------------------------------------------------ exp, log, tanh, max */

/* One copy per instruction set (see ndarray_backend_cpu_vmath.h). */
#define NK_VSUF generic
#define NK_VATTR
#define NK_VW 4
#include "ndarray_backend_cpu_vmath.h"
#undef NK_VSUF
#undef NK_VATTR
#undef NK_VW

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define NK_VMATH_X86 1
#include <immintrin.h>
#define NK_VSUF avx2
#define NK_VATTR __attribute__((target("avx2,fma")))
#define NK_VW 8
#include "ndarray_backend_cpu_vmath.h"
#undef NK_VSUF
#undef NK_VATTR
#undef NK_VW
#define NK_VSUF avx512
#define NK_VATTR __attribute__((target("avx512f,avx2,fma")))
#define NK_VW 16
#include "ndarray_backend_cpu_vmath.h"
#undef NK_VSUF
#undef NK_VATTR
#undef NK_VW
#endif

typedef void (*nk_unary_fn)(int op, const float *a, float *out, ptrdiff_t n);
typedef float (*nk_max_fn)(const float *a, ptrdiff_t n);
typedef void (*nk_lstm_row_fn)(const float *z, const float *c0, float *h, float *c, ptrdiff_t H);
typedef void (*nk_lstm_row_backward_fn)(const float *z, const float *c0, const float *dh, const float *dc,
                                        float *dz, float *dc0, ptrdiff_t H);
static nk_unary_fn nk_unary_impl = nk_unary_generic;
static nk_max_fn nk_max_impl = nk_max_generic;
static nk_lstm_row_fn nk_lstm_row_impl = nk_lstm_row_generic;
static nk_lstm_row_backward_fn nk_lstm_row_backward_impl = nk_lstm_row_backward_generic;
typedef float (*nk_exp_sum_fn)(const float *a, float shift, ptrdiff_t n);
typedef void (*nk_exp_scale_fn)(const float *a, float shift, float scale, float *out, ptrdiff_t n);
static nk_exp_sum_fn nk_exp_sum_impl = nk_exp_sum_generic;
static nk_exp_scale_fn nk_exp_scale_impl = nk_exp_scale_generic;

/* Point exp/log/tanh/max at the copy for instruction set "avx512", "avx2" or
 * "generic"; returns 0 when this build or CPU lacks it. */
static int nk_vmath_select(const char *isa)
{
    if (strcmp(isa, "generic") == 0) {
        nk_unary_impl = nk_unary_generic;
        nk_max_impl = nk_max_generic;
        nk_lstm_row_impl = nk_lstm_row_generic;
        nk_lstm_row_backward_impl = nk_lstm_row_backward_generic;
        nk_exp_sum_impl = nk_exp_sum_generic;
        nk_exp_scale_impl = nk_exp_scale_generic;
        return 1;
    }
#ifdef NK_VMATH_X86
    __builtin_cpu_init();
    if (strcmp(isa, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        nk_unary_impl = nk_unary_avx2;
        nk_max_impl = nk_max_avx2;
        nk_lstm_row_impl = nk_lstm_row_avx2;
        nk_lstm_row_backward_impl = nk_lstm_row_backward_avx2;
        nk_exp_sum_impl = nk_exp_sum_avx2;
        nk_exp_scale_impl = nk_exp_scale_avx2;
        return 1;
    }
    if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512f")) {
        nk_unary_impl = nk_unary_avx512;
        nk_max_impl = nk_max_avx512;
        nk_lstm_row_impl = nk_lstm_row_avx512;
        nk_lstm_row_backward_impl = nk_lstm_row_backward_avx512;
        nk_exp_sum_impl = nk_exp_sum_avx512;
        nk_exp_scale_impl = nk_exp_scale_avx512;
        return 1;
    }
#endif
    return 0;
}

static inline void nk_unary(int op, const float *a, float *out, ptrdiff_t n) { nk_unary_impl(op, a, out, n); }
static inline float nk_max(const float *a, ptrdiff_t n) { return nk_max_impl(a, n); }
static inline void nk_lstm_row(const float *z, const float *c0, float *h, float *c, ptrdiff_t H)
{
    nk_lstm_row_impl(z, c0, h, c, H);
}
static inline void nk_lstm_row_backward(const float *z, const float *c0, const float *dh, const float *dc,
                                        float *dz, float *dc0, ptrdiff_t H)
{
    nk_lstm_row_backward_impl(z, c0, dh, dc, dz, dc0, H);
}

static inline float nk_exp_sum(const float *a, float shift, ptrdiff_t n) { return nk_exp_sum_impl(a, shift, n); }
static inline void nk_exp_scale(const float *a, float shift, float scale, float *out, ptrdiff_t n)
{
    nk_exp_scale_impl(a, shift, scale, out, n);
}

/* ------------------------------------------------------------ diagnostics */

/* Bit t is set when OpenMP thread t ran a chunk of the last kernel. */
static unsigned long long nk_thread_mask = 0;

static inline void nk_note_thread(int tid)
{
    /* Kernels note a thread per item of work, many thousands of times a call: an atomic OR
     * every time would bounce the mask's cache line between the cores (the write takes the
     * line from the others), so the bit is set only when a plain read finds it clear. */
    unsigned long long bit = 1ULL << (tid & 63);
    if (!(__atomic_load_n(&nk_thread_mask, __ATOMIC_RELAXED) & bit))
        __atomic_fetch_or(&nk_thread_mask, bit, __ATOMIC_RELAXED);
}

static inline void nk_reset_threads(void) { __atomic_store_n(&nk_thread_mask, 0ULL, __ATOMIC_RELAXED); }

static inline int nk_threads_used(void)
{
    return __builtin_popcountll(__atomic_load_n(&nk_thread_mask, __ATOMIC_RELAXED));
}

/* ------------------------------------------------------------ array buffers */

#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* A buffer for an Array: 64-byte aligned; from 2 MB on, aligned to 2 MB and marked for
 * transparent huge pages (where the kernel offers them only on request, as most
 * distributions configure it), so touching it for the first time costs one page fault
 * per 2 MB rather than per 4 KB, as numpy does for its large arrays. */
static void *nk_buffer_alloc(size_t bytes)
{
    void *p = NULL;
    const size_t huge = (size_t)1 << 21;
    if (bytes >= huge) {
        if (posix_memalign(&p, huge, bytes) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
        return p;
    }
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

#endif
