/* The register-blocked matmul micro-kernel of the Cython + OpenMP backend.
 *
 * C (mc x nc block, row-major, leading dimension ldc) += Ap @ Bp where
 *   Ap is an mc x kc block of A packed as MR-row panels, each kc x MR (k-major),
 *   Bp is a kc x nc block of B packed as NR-column panels, each kc x NR.
 * Panels are zero-padded to full MR / NR, so the micro-kernel always runs
 * the same constant-length loops and only its final store is masked.
 *
 * The micro-kernel keeps an MR x NR tile of C in registers: MR*NR/W vector
 * accumulators, NR/W vectors of B and one broadcast of A must fit the
 * register file (16 registers for SSE/AVX2, 32 for AVX-512), which sets MR
 * and NR per instruction set. It is compiled three times (baseline, AVX2+FMA,
 * AVX-512) and nk_gemm_select() picks one at run time, so a portable build
 * still runs the wide kernel where the CPU has it.
 *
 * Cache blocking is not part of a kernel: it depends on the caches of the CPU, not on
 * its registers, and cpu_tuning.py sets it per CPU family (set_gemm_blocking): KC so
 * that one kc x NR panel of B stays in L1 while the MR panels of A stream past it, MC
 * so the packed A block stays in L2.
 */
#ifndef NK_CPU_GEMM_H
#define NK_CPU_GEMM_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* add: C += the product (a later KC slice); else C = the product, plus bias[j] in column j
 * where bias is not NULL (a linear layer's bias, added as the tile is stored). */
typedef void (*nk_macro_fn)(ptrdiff_t mc, ptrdiff_t nc, ptrdiff_t kc, const float *Ap,
                            const float *Bp, float *C, ptrdiff_t ldc, int add, const float *bias);

typedef void (*nk_direct_fn)(ptrdiff_t m, ptrdiff_t n, ptrdiff_t p, const float *A, ptrdiff_t ars,
                             ptrdiff_t acs, const float *B, const float *Bp, ptrdiff_t kd, float *C,
                             float *work);

typedef void (*nk_conv_fn)(ptrdiff_t nseg, ptrdiff_t seglen, const float *const *rows, const float *B,
                           ptrdiff_t ldb, float *C, ptrdiff_t ldc, ptrdiff_t mr, ptrdiff_t nr);

typedef void (*nk_convw_fn)(ptrdiff_t npix, const float *const *rows, ptrdiff_t nseg, ptrdiff_t off,
                            const float *G, ptrdiff_t ldg, float *S, ptrdiff_t lds, ptrdiff_t mr, ptrdiff_t nr);

typedef struct {
    const char *name;
    int mr, nr;
    nk_macro_fn macro;
    int dmr, dnr;       /* the direct kernel's tile */
    nk_direct_fn direct;
    int cmr, cnr;       /* the convolution kernels' tile: cmr pixels (or taps) x cnr (two vectors) */
    nk_conv_fn conv, conv1;     /* (conv1, convw1: a last strip at most one vector wide) */
    nk_convw_fn convw, convw1;
} nk_gemm_kernel;

#ifndef NK_CAT
#define NK_CAT_(a, b) a##b
#define NK_CAT(a, b) NK_CAT_(a, b)
#endif

/* A micro-kernel computing MR rows of C from A panels of AS floats per k (AS >= MR: an
 * edge kernel reads the first rows of a full-height panel). */
#define NK_DEFINE_MICRO(NAME, ATTR, W, MR, AS, NV)                                              \
    ATTR static inline void NK_CAT(nk_micro_, NAME)(ptrdiff_t kc, const float *restrict A,     \
                                                    const float *restrict B, float *restrict C, \
                                                    ptrdiff_t ldc, ptrdiff_t mr, ptrdiff_t nr,  \
                                                    int add, const float *restrict bias)        \
    {                                                                                           \
        typedef float vec __attribute__((vector_size(4 * (W))));                                \
        vec acc[MR][NV];                                                                        \
        _Pragma("GCC unroll 32") for (int i = 0; i < (MR); i++)                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++) acc[i][j] = (vec){0};        \
        for (ptrdiff_t k = 0; k < kc; k++) {                                                    \
            vec b[NV];                                                                          \
            _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++)                              \
                memcpy(&b[j], B + j * (W), sizeof(vec));                                        \
            /* scalar * vector splats A[i] (a broadcast load, no arithmetic) */                 \
            _Pragma("GCC unroll 32") for (int i = 0; i < (MR); i++) {                           \
                const float a = A[i];                                                           \
                _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++) acc[i][j] += a * b[j];   \
            }                                                                                   \
            A += (AS);                                                                          \
            B += (NV) * (W);                                                                    \
        }                                                                                       \
        if (mr == (MR) && nr == (NV) * (W)) {                                                   \
            _Pragma("GCC unroll 32") for (int i = 0; i < (MR); i++)                             \
                _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++) {                        \
                float *c = C + i * ldc + j * (W);                                               \
                vec v = acc[i][j];                                                              \
                vec old;                                                                        \
                if (add) {                                                                      \
                    memcpy(&old, c, sizeof(vec));                                               \
                    v += old;                                                                   \
                } else if (bias) {                                                              \
                    memcpy(&old, bias + j * (W), sizeof(vec));                                  \
                    v += old;                                                                   \
                }                                                                               \
                memcpy(c, &v, sizeof(vec));                                                     \
            }                                                                                   \
        } else {                                                                                \
            float tile[(MR) * (NV) * (W)];                                                      \
            memcpy(tile, acc, sizeof(tile));                                                    \
            for (ptrdiff_t i = 0; i < mr; i++)                                                  \
                for (ptrdiff_t j = 0; j < nr; j++)                                              \
                    C[i * ldc + j] = (add ? C[i * ldc + j] : bias ? bias[j] : 0.0f)             \
                                     + tile[i * (NV) * (W) + j];                                \
        }                                                                                       \
    }

/* One instantiation of the micro- and macro-kernel. MR is a multiple of 3: the last panel
 * of rows, when it is not full, runs a kernel of MR/3 or 2MR/3 rows (a product with 64 rows
 * and MR = 12 would otherwise compute 72 rows, an eighth of them on padding). */
#define NK_DEFINE_GEMM(NAME, ATTR, W, MR, NV)                                                   \
    NK_DEFINE_MICRO(NAME, ATTR, W, MR, MR, NV)                                                  \
    NK_DEFINE_MICRO(NK_CAT(NAME, _third), ATTR, W, (MR) / 3, MR, NV)                            \
    NK_DEFINE_MICRO(NK_CAT(NAME, _two_thirds), ATTR, W, 2 * (MR) / 3, MR, NV)                   \
    ATTR static void NK_CAT(nk_macro_, NAME)(ptrdiff_t mc, ptrdiff_t nc, ptrdiff_t kc,          \
                                             const float *Ap, const float *Bp, float *C,        \
                                             ptrdiff_t ldc, int add, const float *bias)         \
    {                                                                                           \
        _Static_assert((MR) % 3 == 0, "the edge kernels take a third of MR");                   \
        const ptrdiff_t NR = (NV) * (W);                                                        \
        for (ptrdiff_t jr = 0; jr < nc; jr += NR) {                                             \
            ptrdiff_t nr = nc - jr < NR ? nc - jr : NR;                                         \
            for (ptrdiff_t ir = 0; ir < mc; ir += (MR)) {                                       \
                ptrdiff_t mr = mc - ir < (MR) ? mc - ir : (MR);                                 \
                const float *a = Ap + ir * kc, *b = Bp + jr * kc, *bj = bias ? bias + jr : NULL;\
                float *c = C + ir * ldc + jr;                                                   \
                if (mr <= (MR) / 3)                                                             \
                    NK_CAT(nk_micro_, NK_CAT(NAME, _third))(kc, a, b, c, ldc, mr, nr, add, bj); \
                else if (mr <= 2 * (MR) / 3)                                                    \
                    NK_CAT(nk_micro_, NK_CAT(NAME, _two_thirds))(kc, a, b, c, ldc, mr, nr, add, \
                                                                 bj);                           \
                else                                                                            \
                    NK_CAT(nk_micro_, NAME)(kc, a, b, c, ldc, mr, nr, add, bj);                 \
            }                                                                                   \
        }                                                                                       \
    }

/* The direct kernel, for products too small to repay packing (see NK_GEMM_DIRECT in the
 * .pyx): C (m x p) = A (m x n) @ B (n x p), all row-major, read in place. A DMR x NR tile
 * of C stays in registers while k runs over the whole of n (or over a block of kd of it, the
 * tile then summed into C from the second block on), its NR columns of B loaded
 * straight from B's rows and its DMR entries of A broadcast from A's rows. The tile is
 * short (DMR = 4 rows), so a batch of 16 or a width of 100 wastes little of it; with the
 * operands in L1/L2 the kernel is bound by its FMAs, not by the broadcasts. Only the last,
 * partial strip of columns and the last, partial block of rows are copied (zero-padded)
 * into ``work``, which holds n * (NR + DMR + NK_DIRECT_GROUP) floats. A B too big for L2 comes as ``Bp``, its
 * NR-column strips packed whole by nk_pack_b (strip j0 at Bp + j0 * n): the strips are then
 * read sequentially and aligned whatever B's row length (NULL: B is read in place). A's
 * element (i, k) is at A[i * ars + k * acs]: (n, 1) for a row-major A, (1, m) for the
 * transpose of a row-major (n, m) array; the rows of such an A are gathered
 * NK_DIRECT_GROUP at a time, k-major (a whole cache line per k, read and written in
 * order: rows of a row-major copy would lie a power of two apart for n = 16384). */
#define NK_DIRECT_GROUP 16
/* A DMR x (NV * W) tile of the direct kernel: FN, on vectors VEC of W floats (see below). */
#define NK_DEFINE_DMICRO(FN, VEC, ATTR, W, DMR, NV)                                             \
    ATTR static inline void FN(ptrdiff_t n, const float *restrict A, ptrdiff_t ars, ptrdiff_t acs,    \
                               const float *restrict B, ptrdiff_t ldb, float *restrict C, ptrdiff_t ldc, \
                               ptrdiff_t mr, ptrdiff_t nr, int add)                             \
    {                                                                                           \
        typedef VEC vec;                                                                        \
        vec acc[DMR][NV];                                                                       \
        _Pragma("GCC unroll 8") for (int i = 0; i < (DMR); i++)                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++) acc[i][j] = (vec){0};        \
        /* the same loop twice, so the row-major case keeps its constant stride of 1 */         \
        if (acs == 1) {                                                                         \
            for (ptrdiff_t k = 0; k < n; k++) {                                                 \
                vec b[NV];                                                                      \
                _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++)                          \
                    memcpy(&b[j], B + k * ldb + j * (W), sizeof(vec));                          \
                _Pragma("GCC unroll 8") for (int i = 0; i < (DMR); i++) {                       \
                    const float a = A[i * ars + k];                                          \
                    _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++)                      \
                        acc[i][j] += a * b[j];                                                  \
                }                                                                               \
            }                                                                                   \
        } else {                                                                                \
            for (ptrdiff_t k = 0; k < n; k++) {                                                 \
                vec b[NV];                                                                      \
                _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++)                          \
                    memcpy(&b[j], B + k * ldb + j * (W), sizeof(vec));                          \
                _Pragma("GCC unroll 8") for (int i = 0; i < (DMR); i++) {                       \
                    const float a = A[i * ars + k * acs];                                          \
                    _Pragma("GCC unroll 8") for (int j = 0; j < (NV); j++)                      \
                        acc[i][j] += a * b[j];                                                  \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        float tile[(DMR) * (NV) * (W)];                                                         \
        memcpy(tile, acc, sizeof(tile));                                                        \
        for (ptrdiff_t i = 0; i < mr; i++) {                                                    \
            if (add)                                                                            \
                for (ptrdiff_t j = 0; j < nr; j++) C[i * ldc + j] += tile[i * (NV) * (W) + j];  \
            else                                                                                \
                memcpy(C + i * ldc, tile + i * (NV) * (W), (size_t)nr * sizeof(float));         \
        }                                                                                       \
    }

#define NK_DEFINE_GEMM_DIRECT(NAME, ATTR, W, DMR, NV)                                            \
    typedef float NK_CAT(nk_dvec_, NAME) __attribute__((vector_size(4 * (W))));               \
    NK_DEFINE_DMICRO(NK_CAT(nk_dmicro_, NAME), NK_CAT(nk_dvec_, NAME), ATTR, W, DMR, NV)       \
    /* a last strip at most one vector wide: the one-vector tile, not NV vectors of mostly zeros */ \
    NK_DEFINE_DMICRO(NK_CAT(nk_dmicro1_, NAME), NK_CAT(nk_dvec_, NAME), ATTR, W, DMR, 1)       \
    ATTR static void NK_CAT(nk_direct_, NAME)(ptrdiff_t m, ptrdiff_t n, ptrdiff_t p,           \
                                              const float *A, ptrdiff_t ars, ptrdiff_t acs,     \
                                              const float *B, const float *Bp, ptrdiff_t kd,    \
                                              float *C, float *work)                            \
    {                                                                                           \
        const ptrdiff_t NR = (NV) * (W);                                                        \
        float *Bw = work, *Aw = work + n * NR;                                                  \
        ptrdiff_t mfull = m / (DMR) * (DMR), mr = m - mfull;                                    \
        ptrdiff_t pfull = p / NR * NR, nr = p - pfull;                                          \
        if (nr && Bp == NULL) { /* the last columns, zero-padded to a whole strip */            \
            for (ptrdiff_t k = 0; k < n; k++) {                                                 \
                memcpy(Bw + k * NR, B + k * p + pfull, (size_t)nr * sizeof(float));              \
                memset(Bw + k * NR + nr, 0, (size_t)(NR - nr) * sizeof(float));                  \
            }                                                                                   \
        }                                                                                       \
        if (mr) { /* the last rows, zero-padded to a whole block, row-major */                  \
            memset(Aw, 0, (size_t)((DMR) * n) * sizeof(float));                                 \
            for (ptrdiff_t i = 0; i < mr; i++)                                                  \
                for (ptrdiff_t k = 0; k < n; k++) Aw[i * n + k] = A[(mfull + i) * ars + k * acs]; \
        }                                                                                       \
        /* depth blocks outside, then rows, then strips: each block of A is read from memory   \
         * once and reused across the strips, while the depth block of B (at most kd deep, an   \
         * L2's worth by the caller's choice) stays in L2 for every block of rows; C's tile is  \
         * summed over the depth blocks */                                                     \
        float *Ag = Aw + (DMR) * n;                                                             \
        if (kd <= 0 || kd > n) kd = n;                                                          \
        for (ptrdiff_t k0 = 0; k0 < n; k0 += kd) {                                              \
            ptrdiff_t kb = n - k0 < kd ? n - k0 : kd;                                           \
            int add = k0 > 0;                                                                   \
            for (ptrdiff_t ir = 0; ir < m; ir += (DMR)) {                                       \
                int full = ir < mfull;                                                          \
                const float *Ar = full ? A + ir * ars + k0 * acs : Aw + k0;                     \
                ptrdiff_t rs = full ? ars : n, cs = full ? acs : 1, rows = full ? (DMR) : mr;   \
                if (full && acs != 1) {                                                         \
                    ptrdiff_t g0 = ir / NK_DIRECT_GROUP * NK_DIRECT_GROUP, gi = ir - g0;        \
                    ptrdiff_t gr = mfull - g0 < NK_DIRECT_GROUP ? mfull - g0 : NK_DIRECT_GROUP; \
                    if (gi == 0) /* gather this group's rows over the depth block, k-major */   \
                        for (ptrdiff_t k = 0; k < kb; k++)                                      \
                            for (ptrdiff_t i = 0; i < gr; i++)                                  \
                                Ag[k * NK_DIRECT_GROUP + i] = A[(g0 + i) * ars + (k0 + k) * acs]; \
                    Ar = Ag + gi;                                                               \
                    rs = 1;                                                                     \
                    cs = NK_DIRECT_GROUP;                                                       \
                }                                                                               \
                for (ptrdiff_t jr = 0; jr < pfull; jr += NR)                                    \
                    NK_CAT(nk_dmicro_, NAME)(kb, Ar, rs, cs, Bp ? Bp + jr * n + k0 * NR : B + k0 * p + jr, \
                                             Bp ? NR : p, C + ir * p + jr, p, rows, NR, add);   \
                if (nr && ((NV) == 1 || nr > (W)))                                              \
                    NK_CAT(nk_dmicro_, NAME)(kb, Ar, rs, cs, (Bp ? Bp + pfull * n : Bw) + k0 * NR, NR, \
                                             C + ir * p + pfull, p, rows, nr, add);             \
                else if (nr)                                                                    \
                    NK_CAT(nk_dmicro1_, NAME)(kb, Ar, rs, cs, (Bp ? Bp + pfull * n : Bw) + k0 * NR, NR, \
                                              C + ir * p + pfull, p, rows, nr, add);            \
            }                                                                                   \
        }                                                                                       \
    }

/* The convolution kernels of conv_implicit: the direct kernel's product with A's rows read
 * where they lie. A pixel's row of the im2col matrix is its k x k window: nseg segments of
 * seglen contiguous floats each, lying apart in the image (the window's k rows of k * c floats
 * in an NHWC image; in an NCHW one, each row's k floats per channel). A table gives them:
 * rows[p * nseg + seg] points at segment seg of pixel p's window (in the image, or at zeros or
 * a gathered copy where the window leaves the image), so no im2col matrix is built.
 *
 * conv (the forward product): C (mr x nr, ldc) = the windows of the mr <= CMR pixels of
 * rows[0 .. mr * nseg) @ B, B a strip of nr <= NV * W columns of the (nseg * seglen) x c_out
 * weight, its rows in the segments' order, packed (nk_pack_b: its rows ldb floats apart).
 * CMR x NV vector accumulators.
 *
 * convw (the weight gradient): S (mr x nr, lds) += the sum over npix pixels p of
 * rows[p * nseg][off + i] * G[p * ldg + j]: the floats off .. off + mr of one segment of the
 * windows (rows already offset to that segment) times a strip of nr <= NV * W columns of g
 * (packed).
 *
 * Each comes with NV = 2 (wide strips) and NV = 1 (a last strip at most one vector wide). */
/* convw's loop over the pixels: acc[i] += (tap TAP of the pixel's segment) * its strip of g. */
#define NK_CONVW_PIXELS(W, CMR, NV, TAP)                                                        \
    for (ptrdiff_t p = 0; p < npix; p++) {                                                      \
        const float *a = rows[p * nseg] + off;                                                  \
        vec b[NV];                                                                              \
        _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                                  \
            memcpy(&b[v], G + p * ldg + v * (W), sizeof(vec));                                  \
        _Pragma("GCC unroll 16") for (int i = 0; i < (CMR); i++) {                              \
            const float x = a[TAP];                                                             \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[i][v] += x * b[v];       \
        }                                                                                       \
    }

#define NK_DEFINE_CONV_NV(SUFFIX, NAME, ATTR, W, CMR, NV)                                       \
    ATTR static void NK_CAT(NK_CAT(nk_conv_, NAME), SUFFIX)(                                    \
        ptrdiff_t nseg, ptrdiff_t seglen, const float *const *rows, const float *restrict B,    \
        ptrdiff_t ldb, float *restrict C, ptrdiff_t ldc, ptrdiff_t mr, ptrdiff_t nr)            \
    {                                                                                           \
        typedef NK_CAT(nk_dvec_, NAME) vec;                                                     \
        vec acc[CMR][NV];                                                                       \
        _Pragma("GCC unroll 16") for (int i = 0; i < (CMR); i++)                                \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[i][v] = (vec){0};        \
        for (ptrdiff_t ki = 0; ki < nseg; ki++) {                                               \
            const float *a[CMR];                                                                \
            /* rows past mr repeat the first pixel's: read, multiplied, never stored */        \
            _Pragma("GCC unroll 16") for (int i = 0; i < (CMR); i++)                            \
                a[i] = rows[(i < mr ? i : 0) * nseg + ki];                                      \
            for (ptrdiff_t t = 0; t < seglen; t++) {                                            \
                vec b[NV];                                                                      \
                _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                          \
                    memcpy(&b[v], B + v * (W), sizeof(vec));                                    \
                B += ldb;                                                                       \
                _Pragma("GCC unroll 16") for (int i = 0; i < (CMR); i++) {                      \
                    const float x = a[i][t];                                                    \
                    _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[i][v] += x * b[v]; \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        float tile[(CMR) * (NV) * (W)];                                                         \
        memcpy(tile, acc, sizeof(tile));                                                        \
        for (ptrdiff_t i = 0; i < mr; i++)                                                      \
            memcpy(C + i * ldc, tile + i * (NV) * (W), (size_t)nr * sizeof(float));            \
    }                                                                                           \
    ATTR static void NK_CAT(NK_CAT(nk_convw_, NAME), SUFFIX)(                                   \
        ptrdiff_t npix, const float *const *rows, ptrdiff_t nseg, ptrdiff_t off,                \
        const float *restrict G, ptrdiff_t ldg, float *restrict S, ptrdiff_t lds, ptrdiff_t mr, \
        ptrdiff_t nr)                                                                           \
    {                                                                                           \
        typedef NK_CAT(nk_dvec_, NAME) vec;                                                     \
        vec acc[CMR][NV];                                                                       \
        _Pragma("GCC unroll 16") for (int i = 0; i < (CMR); i++)                                \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[i][v] = (vec){0};        \
        /* the pixel loop twice, so a whole tile reads its taps at constant offsets; in the    \
         * last, partial one the taps past mr repeat the first (inside the row, never stored) */ \
        if (mr == (CMR))                                                                        \
            NK_CONVW_PIXELS(W, CMR, NV, i)                                                      \
        else                                                                                    \
            NK_CONVW_PIXELS(W, CMR, NV, i < mr ? i : 0)                                         \
        float tile[(CMR) * (NV) * (W)];                                                         \
        memcpy(tile, acc, sizeof(tile));                                                        \
        for (ptrdiff_t i = 0; i < mr; i++)                                                      \
            for (ptrdiff_t j = 0; j < nr; j++) S[i * lds + j] += tile[i * (NV) * (W) + j];      \
    }

#define NK_DEFINE_CONV(NAME, ATTR, W, CMR)                                                      \
    NK_DEFINE_CONV_NV(2, NAME, ATTR, W, CMR, 2)                                                 \
    NK_DEFINE_CONV_NV(1, NAME, ATTR, W, CMR, 1)

/* Baseline: 4-wide vectors, 6 x 8 tile = 12 accumulators + 2 + 1 <= 16 xmm. */
NK_DEFINE_GEMM(generic, , 4, 6, 2)
NK_DEFINE_GEMM_DIRECT(generic, , 4, 4, 2)
NK_DEFINE_CONV(generic, , 4, 4)

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define NK_GEMM_X86 1
/* AVX2+FMA: 8-wide, 6 x 16 tile = 12 accumulators + 2 + 1 <= 16 ymm. */
NK_DEFINE_GEMM(avx2, __attribute__((target("avx2,fma"))), 8, 6, 2)
NK_DEFINE_GEMM_DIRECT(avx2, __attribute__((target("avx2,fma"))), 8, 4, 2)
NK_DEFINE_CONV(avx2, __attribute__((target("avx2,fma"))), 8, 4)
/* AVX-512: 16-wide, 12 x 32 tile = 24 accumulators + 2 + 1 <= 32 zmm. */
NK_DEFINE_GEMM(avx512, __attribute__((target("avx512f,avx2,fma"))), 16, 12, 2)
NK_DEFINE_GEMM_DIRECT(avx512, __attribute__((target("avx512f,avx2,fma"))), 16, 4, 2)
NK_DEFINE_CONV(avx512, __attribute__((target("avx512f,avx2,fma"))), 16, 8)
#endif

static const nk_gemm_kernel nk_gemm_kernels[] = {
#ifdef NK_GEMM_X86
    {"avx512", 12, 32, nk_macro_avx512, 4, 32, nk_direct_avx512, 8, 32, nk_conv_avx5122,
     nk_conv_avx5121, nk_convw_avx5122, nk_convw_avx5121},
    {"avx2", 6, 16, nk_macro_avx2, 4, 16, nk_direct_avx2, 4, 16, nk_conv_avx22, nk_conv_avx21,
     nk_convw_avx22, nk_convw_avx21},
#endif
    {"generic", 6, 8, nk_macro_generic, 4, 8, nk_direct_generic, 4, 8, nk_conv_generic2,
     nk_conv_generic1, nk_convw_generic2, nk_convw_generic1},
};
static const int nk_gemm_nkernels = sizeof(nk_gemm_kernels) / sizeof(nk_gemm_kernels[0]);

/* Whether kernel i can run on this CPU. */
static int nk_gemm_supported(int i)
{
#ifdef NK_GEMM_X86
    const char *name = nk_gemm_kernels[i].name;
    __builtin_cpu_init();
    if (strcmp(name, "avx512") == 0) return __builtin_cpu_supports("avx512f") != 0;
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    (void)i;
    return 1;
}

/* The widest supported kernel. */
static int nk_gemm_best(void)
{
    for (int i = 0; i < nk_gemm_nkernels; i++)
        if (nk_gemm_supported(i)) return i;
    return nk_gemm_nkernels - 1;
}

/* Pack rows [0, mc) x cols [0, kc) of A (leading dim lda) into MR-row panels. */
static void nk_pack_a(const float *A, ptrdiff_t lda, ptrdiff_t mc, ptrdiff_t kc, int MR, float *Ap)
{
    for (ptrdiff_t ir = 0; ir < mc; ir += MR) {
        ptrdiff_t mr = mc - ir < MR ? mc - ir : MR;
        float *dst = Ap + ir * kc;
        if (mr == MR) {
            for (ptrdiff_t k = 0; k < kc; k++)
                for (int i = 0; i < MR; i++) dst[k * MR + i] = A[(ir + i) * lda + k];
        } else {
            for (ptrdiff_t k = 0; k < kc; k++)
                for (int i = 0; i < MR; i++) dst[k * MR + i] = i < mr ? A[(ir + i) * lda + k] : 0.0f;
        }
    }
}

/* Pack rows [0, kc) x cols [j0, j1) of B (leading dim ldb) into NR-column
 * panels; the panel of column j0 lands at Bp + j0 * kc (j0 a multiple of NR).
 * A row of B at a time, all its panels' pieces: B is read in order along its rows,
 * which the hardware prefetcher follows; a panel at a time would read NR columns of
 * every row, a row length apart, a new page per row once B's rows are longer than a page. */
static void nk_pack_b(const float *B, ptrdiff_t ldb, ptrdiff_t kc, ptrdiff_t j0, ptrdiff_t j1, int NR,
                      float *Bp)
{
    ptrdiff_t full = j0 + (j1 - j0) / NR * NR;  /* the columns of whole panels */
    for (ptrdiff_t k = 0; k < kc; k++) {
        const float *src = B + k * ldb;
        for (ptrdiff_t jr = j0; jr < full; jr += NR)
            memcpy(Bp + jr * kc + k * NR, src + jr, (size_t)NR * sizeof(float));
        if (full < j1) {
            float *dst = Bp + full * kc + k * NR;
            ptrdiff_t nr = j1 - full;
            memcpy(dst, src + full, (size_t)nr * sizeof(float));
            for (ptrdiff_t j = nr; j < NR; j++) dst[j] = 0.0f;
        }
    }
}

#endif
