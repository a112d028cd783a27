/* Vectorized exp/log/tanh and max for one instruction set; included once per
 * instruction set by ndarray_backend_cpu_kernels.h with
 *   NK_VSUF  a name suffix (generic, avx2, avx512),
 *   NK_VATTR the function attribute that enables it,
 *   NK_VW    the number of floats in one vector register.
 *
 * Written with GCC/Clang vector types instead of relying on the
 * auto-vectorizer: the selects that handle overflow, NaN and the sign of
 * zero keep gcc from vectorizing plain scalar loops. exp and log use Cephes'
 * range reduction and polynomials (about 1 ulp), tanh a rational function
 * (a few ulp); all keep numpy's results for 0, -0, +-inf, NaN and
 * denormals.
 */
#define VF NK_CAT(nk_vf_, NK_VSUF)
#define VI NK_CAT(nk_vi_, NK_VSUF)
#define FN(name) NK_CAT(name, NK_CAT(_, NK_VSUF))

typedef float VF __attribute__((vector_size(4 * NK_VW)));
typedef int32_t VI __attribute__((vector_size(4 * NK_VW)));

/* m ? a : b lane by lane (m is all-ones or all-zeros per lane). */
NK_VATTR static inline VF FN(nk_vsel)(VI m, VF a, VF b) { return (VF)((m & (VI)a) | (~m & (VI)b)); }

#define SPLAT(c) ((VF){0} + (c))

/* exp(r) for the reduced argument |r| <= ln(2) / 2 (Cephes' polynomial), which
 * both copies of nk_vexp below scale by 2^n. */
NK_VATTR static inline VF FN(nk_vexp_reduced)(VF r)
{
    VF z = r * r;
    VF p = SPLAT(1.9875691500E-4f);
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    return p * z + r + 1.0f;
}

#if NK_VW == 16
/* AVX-512's vscalefps multiplies by 2^n with IEEE overflow to inf and gradual
 * underflow in one rounding, so this copy needs neither the bounds' selects
 * nor the power of two split in halves below. Clamping x keeps n finite;
 * beyond the clamps the result is inf or 0 either way. max/min return their
 * second operand for a NaN, so a NaN is put back at the end. */
NK_VATTR static inline VF FN(nk_vexp)(VF x)
{
    __m512 xc = _mm512_min_ps(_mm512_max_ps((__m512)x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    VF r = (VF)_mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = (VF)_mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), (__m512)r);
    VF p = FN(nk_vexp_reduced)(r);
    return FN(nk_vsel)(x != x, x, (VF)_mm512_scalef_ps((__m512)p, n));
}
#else
NK_VATTR static inline VF FN(nk_vexp)(VF x)
{
    VF xc = FN(nk_vsel)(x > 88.7228391116729996f, SPLAT(88.7228391116729996f), x);
    xc = FN(nk_vsel)(xc < -103.9720840454f, SPLAT(-103.9720840454f), xc);
    VF fn = xc * 1.44269504088896341f;
    fn = fn + FN(nk_vsel)(fn >= 0.0f, SPLAT(0.5f), SPLAT(-0.5f));
    VI n = __builtin_convertvector(fn, VI);
    VF nf = __builtin_convertvector(n, VF);
    VF r = xc - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    VF p = FN(nk_vexp_reduced)(r);
    VI n1 = n >> 1, n2 = n - n1;
    VF y = p * (VF)((n1 + 127) << 23) * (VF)((n2 + 127) << 23);
    y = FN(nk_vsel)(x > 88.7228391116729996f, SPLAT(INFINITY), y);
    y = FN(nk_vsel)(x < -103.9720840454f, SPLAT(0.0f), y);
    return FN(nk_vsel)(x != x, x, y);
}
#endif

NK_VATTR static inline VF FN(nk_vlog)(VF x)
{
    VI denorm = x < 1.17549435e-38f;
    VF xs = FN(nk_vsel)(denorm, x * 8388608.0f, x);
    VI bits = (VI)xs;
    VI e = ((bits >> 23) & 0xff) - 126;
    VF m = (VF)((bits & 0x007fffff) | 0x3f000000);
    e = e + (denorm & -23);
    VI small = m < 0.707106781186547524f;
    e = e + small; /* small is -1 where true */
    m = FN(nk_vsel)(small, m + m - 1.0f, m - 1.0f);
    VF z = m * m;
    VF y = SPLAT(7.0376836292E-2f);
    y = y * m - 1.1514610310E-1f;
    y = y * m + 1.1676998740E-1f;
    y = y * m - 1.2420140846E-1f;
    y = y * m + 1.4249322787E-1f;
    y = y * m - 1.6668057665E-1f;
    y = y * m + 2.0000714765E-1f;
    y = y * m - 2.4999993993E-1f;
    y = y * m + 3.3333331174E-1f;
    y = y * m * z;
    VF fe = __builtin_convertvector(e, VF);
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    VF r = m + y + fe * 0.693359375f;
    r = FN(nk_vsel)(x == INFINITY, SPLAT(INFINITY), r);
    r = FN(nk_vsel)(x == 0.0f, SPLAT(-INFINITY), r);
    r = FN(nk_vsel)(x < 0.0f, SPLAT(NAN), r);
    return FN(nk_vsel)(x != x, x, r);
}

/* Whether any lane of the mask m is set: one test of the register where the
 * instruction set has it (read through memory lane by lane, it was the slowest
 * step of tanh). */
NK_VATTR static inline int FN(nk_vany)(VI m)
{
#if NK_VW == 16
    return _mm512_test_epi32_mask((__m512i)m, (__m512i)m) != 0;
#elif NK_VW == 8
    return _mm256_movemask_ps((__m256)m) != 0;
#else
    int32_t lanes[NK_VW], any = 0;
    memcpy(lanes, &m, sizeof(lanes));
    for (int l = 0; l < NK_VW; l++) any |= lanes[l];
    return any != 0;
#endif
}

/* tanh as an odd rational function p(x)/q(x) on [-7.9, 7.9]; the coefficients
 * are Eigen's. Below 4e-4 tanh(x) rounds to x. Beyond 7.9, where the rational
 * function stops improving but tanh is still a few ulp short of 1 (up to
 * |x| = 9.01, where it rounds to 1), it is 1 - 2 e^(-2|x|) to float32
 * precision: exactly +-1 where numpy gives +-1, so a saturated sigmoid gate
 * multiplies by exactly 0 or 1. */
NK_VATTR static inline VF FN(nk_vtanh)(VF x)
{
    const float clamp = 7.90531110763549805f;
    VF xc = FN(nk_vsel)(x > clamp, SPLAT(clamp), x);
    xc = FN(nk_vsel)(xc < -clamp, SPLAT(-clamp), xc);
    VF x2 = xc * xc;
    VF p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * xc;
    VF q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    VF r = p / q;
    VI tiny = (x < 0.0004f) & (x > -0.0004f);
    r = FN(nk_vsel)(tiny, x, r);
    VI big = (x > clamp) | (x < -clamp);
    if (FN(nk_vany)(big)) {
        VF ax = FN(nk_vsel)(x < 0.0f, -x, x);
        VF t = 1.0f - 2.0f * FN(nk_vexp)(-2.0f * ax);
        r = FN(nk_vsel)(big, FN(nk_vsel)(x < 0.0f, -t, t), r);
    }
    return FN(nk_vsel)(x != x, x, r);
}

NK_VATTR static inline VF FN(nk_vmax)(VF a, VF b) { return FN(nk_vsel)((a > b) | (a != a), a, b); }

/* out[i] = f(a[i]); the tail runs through a zero-padded vector. */
#define NK_VLOOP(fname)                                                  \
    NK_VATTR static void FN(fname##_loop)(const float *a, float *out, ptrdiff_t n) \
    {                                                                    \
        ptrdiff_t i = 0;                                                 \
        VF x, y;                                                         \
        for (; i + NK_VW <= n; i += NK_VW) {                             \
            memcpy(&x, a + i, sizeof(VF));                               \
            y = FN(fname)(x);                                            \
            memcpy(out + i, &y, sizeof(VF));                             \
        }                                                                \
        if (i < n) {                                                     \
            x = SPLAT(1.0f);                                             \
            memcpy(&x, a + i, (size_t)(n - i) * sizeof(float));          \
            y = FN(fname)(x);                                            \
            memcpy(out + i, &y, (size_t)(n - i) * sizeof(float));        \
        }                                                                \
    }
NK_VLOOP(nk_vexp)
NK_VLOOP(nk_vlog)
NK_VLOOP(nk_vtanh)
#undef NK_VLOOP

NK_VATTR static void FN(nk_unary)(int op, const float *a, float *out, ptrdiff_t n)
{
    switch (op) {
    case NK_LOG:  FN(nk_vlog_loop)(a, out, n); break;
    case NK_EXP:  FN(nk_vexp_loop)(a, out, n); break;
    case NK_TANH: FN(nk_vtanh_loop)(a, out, n); break;
    }
}

/* sigmoid(x) = (tanh(x / 2) + 1) / 2, as the Sigmoid op computes it (never overflows). */
NK_VATTR static inline VF FN(nk_vsig)(VF x) { return (FN(nk_vtanh)(x * 0.5f) + 1.0f) * 0.5f; }

/* w <= NK_VW floats of a into a vector (the other lanes zero), and back. A whole
 * vector takes a fixed-size copy, which compiles to one load or store; a copy of
 * a size known only at run time is a call to memcpy. */
NK_VATTR static inline VF FN(nk_vload)(const float *a, ptrdiff_t w)
{
    VF x = SPLAT(0.0f);
    if (w == NK_VW)
        memcpy(&x, a, sizeof(VF));
    else
        memcpy(&x, a, (size_t)w * sizeof(float));
    return x;
}
NK_VATTR static inline void FN(nk_vstore)(float *out, VF x, ptrdiff_t w)
{
    if (w == NK_VW)
        memcpy(out, &x, sizeof(VF));
    else
        memcpy(out, &x, (size_t)w * sizeof(float));
}

/* One row of an LSTM step (see lstm_cell in the numpy reference): z holds the
 * row's four gate pre-activations [i | f | g | o], each H wide. The scalar
 * tanhf of libm took ~10 ns a call, five calls per hidden unit. */
NK_VATTR static void FN(nk_lstm_row)(const float *z, const float *c0, float *h, float *c, ptrdiff_t H)
{
    for (ptrdiff_t j = 0; j < H; j += NK_VW) {
        ptrdiff_t w = H - j < NK_VW ? H - j : NK_VW;
        VF i = FN(nk_vsig)(FN(nk_vload)(z + j, w)), f = FN(nk_vsig)(FN(nk_vload)(z + H + j, w));
        VF g = FN(nk_vtanh)(FN(nk_vload)(z + 2 * H + j, w)), o = FN(nk_vsig)(FN(nk_vload)(z + 3 * H + j, w));
        VF cn = f * FN(nk_vload)(c0 + j, w) + i * g;
        FN(nk_vstore)(c + j, cn, w);
        FN(nk_vstore)(h + j, o * FN(nk_vtanh)(cn), w);
    }
}

/* The adjoints of one row (see lstm_cell_backward in the numpy reference). */
NK_VATTR static void FN(nk_lstm_row_backward)(const float *z, const float *c0, const float *dh, const float *dc,
                                              float *dz, float *dc0, ptrdiff_t H)
{
    for (ptrdiff_t j = 0; j < H; j += NK_VW) {
        ptrdiff_t w = H - j < NK_VW ? H - j : NK_VW;
        VF i = FN(nk_vsig)(FN(nk_vload)(z + j, w)), f = FN(nk_vsig)(FN(nk_vload)(z + H + j, w));
        VF g = FN(nk_vtanh)(FN(nk_vload)(z + 2 * H + j, w)), o = FN(nk_vsig)(FN(nk_vload)(z + 3 * H + j, w));
        VF C0 = FN(nk_vload)(c0 + j, w), DH = FN(nk_vload)(dh + j, w);
        VF t = FN(nk_vtanh)(f * C0 + i * g);
        VF d = FN(nk_vload)(dc + j, w) + DH * o * (1.0f - t * t);
        FN(nk_vstore)(dz + j, d * g * i * (1.0f - i), w);
        FN(nk_vstore)(dz + H + j, d * C0 * f * (1.0f - f), w);
        FN(nk_vstore)(dz + 2 * H + j, d * i * (1.0f - g * g), w);
        FN(nk_vstore)(dz + 3 * H + j, DH * t * o * (1.0f - o), w);
        FN(nk_vstore)(dc0 + j, d * f, w);
    }
}

/* sum_i exp(a[i] - shift): a softmax's denominator in one pass over the row, without
 * writing the exps anywhere (two vector accumulators; padded lanes read -inf, exp 0). */
NK_VATTR static float FN(nk_exp_sum)(const float *a, float shift, ptrdiff_t n)
{
    VF acc0 = SPLAT(0.0f), acc1 = acc0, x0, x1;
    ptrdiff_t i = 0;
    for (; i + 2 * NK_VW <= n; i += 2 * NK_VW) {
        memcpy(&x0, a + i, sizeof(VF));
        memcpy(&x1, a + i + NK_VW, sizeof(VF));
        acc0 += FN(nk_vexp)(x0 - shift);
        acc1 += FN(nk_vexp)(x1 - shift);
    }
    for (; i < n; i += NK_VW) {
        ptrdiff_t w = n - i < NK_VW ? n - i : NK_VW;
        x0 = SPLAT(-INFINITY);
        memcpy(&x0, a + i, (size_t)w * sizeof(float));
        acc0 += FN(nk_vexp)(x0 - shift);
    }
    acc0 += acc1;
    float s = 0.0f;
    for (int l = 0; l < NK_VW; l++) s += acc0[l];
    return s;
}

/* out[i] = exp(a[i] - shift) * scale in one pass (a softmax row times its weight). */
NK_VATTR static void FN(nk_exp_scale)(const float *a, float shift, float scale, float *out, ptrdiff_t n)
{
    VF x;
    ptrdiff_t i = 0;
    for (; i + NK_VW <= n; i += NK_VW) {  /* whole vectors: fixed-size copies are plain loads */
        memcpy(&x, a + i, sizeof(VF));
        x = FN(nk_vexp)(x - shift) * scale;
        memcpy(out + i, &x, sizeof(VF));
    }
    if (i < n) {
        x = SPLAT(0.0f);
        memcpy(&x, a + i, (size_t)(n - i) * sizeof(float));
        x = FN(nk_vexp)(x - shift) * scale;
        memcpy(out + i, &x, (size_t)(n - i) * sizeof(float));
    }
}

/* max of a[0:n], n >= 1, with four vector accumulators (NaN wins, as in numpy). */
NK_VATTR static float FN(nk_max)(const float *a, ptrdiff_t n)
{
    VF acc0 = SPLAT(a[0]), acc1 = acc0, acc2 = acc0, acc3 = acc0, x0, x1, x2, x3;
    ptrdiff_t i = 0;
    for (; i + 4 * NK_VW <= n; i += 4 * NK_VW) {
        memcpy(&x0, a + i, sizeof(VF));
        memcpy(&x1, a + i + NK_VW, sizeof(VF));
        memcpy(&x2, a + i + 2 * NK_VW, sizeof(VF));
        memcpy(&x3, a + i + 3 * NK_VW, sizeof(VF));
        acc0 = FN(nk_vmax)(acc0, x0);
        acc1 = FN(nk_vmax)(acc1, x1);
        acc2 = FN(nk_vmax)(acc2, x2);
        acc3 = FN(nk_vmax)(acc3, x3);
    }
    acc0 = FN(nk_vmax)(FN(nk_vmax)(acc0, acc1), FN(nk_vmax)(acc2, acc3));
    float s = a[0];
    for (int l = 0; l < NK_VW; l++) s = nk_maxf(s, acc0[l]);
    for (; i < n; i++) s = nk_maxf(s, a[i]);
    return s;
}

#undef SPLAT
#undef FN
#undef VI
#undef VF
