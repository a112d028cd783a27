/* What one thread does on its chunk, for the Cython + OpenMP backend.
 *
 * ndarray_backend_cpu.pyx decides how work is split across OpenMP threads;
 * the loops here run on one contiguous chunk each. They are plain C loops
 * that gcc/clang vectorize at -O3, compiled several times for different
 * instruction sets (NK_CLONES: AVX-512, AVX2+FMA, baseline) and picked at
 * load time, so a portable build still uses the wide registers of the CPU
 * it runs on.
 *
 * exp/log/tanh are written out (Cephes-style range reduction + polynomial,
 * about 1-2 ulp) instead of calling libm, because a libm call inside the
 * loop stops it from being vectorized.
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

#if defined(__GNUC__)
#define NK_UNROLL _Pragma("GCC unroll 16")
#else
#define NK_UNROLL
#endif

/* ------------------------------------------------------------ scalar math */

static inline float nk_bits_to_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline int32_t nk_float_to_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n
 * built from exponent bits as 2^(n/2) * 2^(n - n/2) so that n = 128 (results
 * near FLT_MAX) and n < -126 (denormal results) need no special case. */
static inline float nk_expf(float x)
{
    float xc = x > 88.7228391116729996f ? 88.7228391116729996f : x;
    xc = xc < -103.9720840454f ? -103.9720840454f : xc;
    float fn = xc * 1.44269504088896341f;
    fn = fn + (fn >= 0.0f ? 0.5f : -0.5f);
    int32_t n = (int32_t)fn; /* rounds half away from zero */
    float nf = (float)n;
    float r = xc - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * z + r + 1.0f;
    int32_t n1 = n >> 1, n2 = n - n1;
    float y = p * nk_bits_to_float((n1 + 127) << 23) * nk_bits_to_float((n2 + 127) << 23);
    y = x > 88.7228391116729996f ? INFINITY : y;
    y = x < -103.9720840454f ? 0.0f : y;
    return x != x ? x : y;
}

/* log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a polynomial in m-1. */
static inline float nk_logf(float x)
{
    int denorm = x < 1.17549435e-38f;
    float xs = denorm ? x * 8388608.0f : x; /* scale denormals up by 2^23 */
    int32_t bits = nk_float_to_bits(xs);
    int32_t e = ((bits >> 23) & 0xff) - 126;
    float m = nk_bits_to_float((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
    e = denorm ? e - 23 : e;
    int small = m < 0.707106781186547524f;
    e = small ? e - 1 : e;
    m = small ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float y = 7.0376836292E-2f;
    y = y * m - 1.1514610310E-1f;
    y = y * m + 1.1676998740E-1f;
    y = y * m - 1.2420140846E-1f;
    y = y * m + 1.4249322787E-1f;
    y = y * m - 1.6668057665E-1f;
    y = y * m + 2.0000714765E-1f;
    y = y * m - 2.4999993993E-1f;
    y = y * m + 3.3333331174E-1f;
    y = y * m * z;
    float fe = (float)e;
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    float r = m + y + fe * 0.693359375f;
    r = x == INFINITY ? INFINITY : r;
    r = x == 0.0f ? -INFINITY : r;
    r = x < 0.0f ? NAN : r;
    return x != x ? x : r;
}

/* tanh: odd polynomial near 0 (no cancellation), 1 - 2/(e^{2|x|}+1) beyond. */
static inline float nk_tanhf(float x)
{
    float ax = x < 0.0f ? -x : x;
    float z = x * x;
    float small = -5.70498872745E-3f;
    small = small * z + 2.06390887954E-2f;
    small = small * z - 5.37397155531E-2f;
    small = small * z + 1.33314422036E-1f;
    small = small * z - 3.33332819422E-1f;
    small = small * z * x + x;
    float e = nk_expf(2.0f * (ax > 9.0f ? 9.0f : ax));
    float big = 1.0f - 2.0f / (e + 1.0f);
    big = ax > 9.0f ? 1.0f : big;
    big = x < 0.0f ? -big : big;
    float r = ax < 0.625f ? small : big;
    r = x == 0.0f ? x : r; /* keeps the sign of -0 */
    return x != x ? x : r;
}

/* numpy's maximum propagates NaN from either side. */
static inline float nk_maxf(float a, float b) { return (a > b || a != a) ? a : b; }

/* ------------------------------------------------------------ element-wise */

enum { NK_ADD, NK_MUL, NK_DIV, NK_MAX, NK_EQ, NK_GE, NK_POW, NK_SQUARE };
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

NK_CLONES static void nk_unary(int op, const float *a, float *out, ptrdiff_t n)
{
    ptrdiff_t i;
    switch (op) {
    case NK_LOG:  for (i = 0; i < n; i++) out[i] = nk_logf(a[i]); break;
    case NK_EXP:  for (i = 0; i < n; i++) out[i] = nk_expf(a[i]); break;
    case NK_TANH: for (i = 0; i < n; i++) out[i] = nk_tanhf(a[i]); break;
    }
}

NK_CLONES static void nk_fill(float *out, float v, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) out[i] = v;
}

/* ------------------------------------------------------------ reductions */

/* Sixteen partial sums let the loop vectorize without -ffast-math (which
 * would allow reassociation everywhere) and also make the rounding error
 * grow more slowly than one running sum. */
#define NK_LANES 16

NK_CLONES static float nk_sum(const float *a, ptrdiff_t n)
{
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

NK_CLONES static float nk_max(const float *a, ptrdiff_t n)
{
    float acc[NK_LANES];
    for (int l = 0; l < NK_LANES; l++) acc[l] = a[0];
    ptrdiff_t i = 0;
    for (; i + NK_LANES <= n; i += NK_LANES) {
        NK_UNROLL
        for (int l = 0; l < NK_LANES; l++) acc[l] = nk_maxf(acc[l], a[i + l]);
    }
    float s = a[0];
    for (; i < n; i++) s = nk_maxf(s, a[i]);
    for (int l = 0; l < NK_LANES; l++) s = nk_maxf(s, acc[l]);
    return s;
}

/* out[j] (+)= sum_r a[r * lda + j] for j < n: the rows are contiguous, so the
 * reduction over a leading axis is a sequence of vector adds into out. */
NK_CLONES static void nk_sum_rows(const float *a, ptrdiff_t lda, ptrdiff_t rows, float *out, ptrdiff_t n, int is_max)
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

/* ------------------------------------------------------------ diagnostics */

/* Bit t is set when OpenMP thread t ran a chunk of the last kernel. */
static unsigned long long nk_thread_mask = 0;

static inline void nk_note_thread(int tid)
{
    __atomic_fetch_or(&nk_thread_mask, 1ULL << (tid & 63), __ATOMIC_RELAXED);
}

static inline void nk_reset_threads(void) { __atomic_store_n(&nk_thread_mask, 0ULL, __ATOMIC_RELAXED); }

static inline int nk_threads_used(void)
{
    return __builtin_popcountll(__atomic_load_n(&nk_thread_mask, __ATOMIC_RELAXED));
}

#endif
