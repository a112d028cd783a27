# Batch and layer normalization.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- batch normalization
# Rows are split into one chunk per thread; each chunk's column sums land in a
# private float64 row of ``acc`` and are added up after the parallel loop, so
# threads never share an accumulator.

cdef inline void _col_sums(const float *x, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t cols, const double *center,
                           double *acc) noexcept nogil:
    """acc[c] += sum of x[r, c] over rows r0..r1 (or of (x - center)**2 when center is not NULL)."""
    if r1 > r0:
        nk_bn_col_sums(x + r0 * cols, r1 - r0, cols, center, acc)


cdef inline void _grad_sums(const float *x, const float *dy, const float *y, Py_ssize_t r0, Py_ssize_t r1,
                            Py_ssize_t cols, const double *mean, const double *s, double *acc) noexcept nogil:
    """acc[c] += dy, acc[cols + c] += dy * xhat over rows r0..r1 (dy masked by y > 0 unless y is NULL)."""
    if r1 > r0:
        nk_bn_grad_sums(x + r0 * cols, dy + r0 * cols, y + r0 * cols if y != NULL else NULL, r1 - r0, cols, mean,
                        s, acc, acc + cols)


cdef class _ColumnScratch:
    """nt rows of ``width`` float64 accumulators plus a few per-column float64 vectors."""
    cdef double *acc
    cdef double *vec
    cdef Py_ssize_t nt, width

    def __cinit__(self, Py_ssize_t nt, Py_ssize_t width, Py_ssize_t nvec):
        self.nt, self.width = nt, width
        self.acc = <double *>malloc(nt * width * sizeof(double) + 8)
        self.vec = <double *>malloc(nvec * width * sizeof(double) + 8)
        if self.acc == NULL or self.vec == NULL:
            raise MemoryError("batch norm: cannot allocate column accumulators")
        memset(self.acc, 0, nt * width * sizeof(double))

    def __dealloc__(self):
        free(self.acc)
        free(self.vec)

    cdef void total(self, double *out) noexcept nogil:
        """out[c] = sum over threads of acc[t, c]; clears acc for the next pass."""
        cdef Py_ssize_t t, c
        for c in range(self.width):
            out[c] = 0.0
        for t in range(self.nt):
            for c in range(self.width):
                out[c] += self.acc[t * self.width + c]
                self.acc[t * self.width + c] = 0.0


def batchnorm_stats(x, mean, var, rows, cols):
    """Column mean and biased variance of compact x (rows, cols) (see the reference)."""
    cdef Array X = _arr("batchnorm_stats", "x", x)
    cdef Array M = _arr("batchnorm_stats", "mean", mean)
    cdef Array V = _arr("batchnorm_stats", "var", var)
    rows, cols = _check_dims("batchnorm_stats", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, c, step, t
    if not (cr >= 1 and cc >= 1 and X.size == cr * cc and M.size == cc and V.size == cc):
        check_batchnorm("batchnorm_stats", rows, cols, dict(x=X), dict(mean=M, var=V))
    cdef int nt = _threads_for(cr * cc * 2)
    cdef _ColumnScratch sc = _ColumnScratch(nt, cc, 2)
    cdef double *m = sc.vec
    cdef double *v = sc.vec + cc
    step = _chunks(cr, nt, 1)
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            _col_sums(X.data, t * step, min((t + 1) * step, cr), cc, NULL, sc.acc + t * cc)
        sc.total(m)
        for c in range(cc):
            m[c] = m[c] / cr
        for t in prange(nt, num_threads=nt, schedule="static"):
            _col_sums(X.data, t * step, min((t + 1) * step, cr), cc, m, sc.acc + t * cc)
        sc.total(v)
        for c in range(cc):
            M.data[c] = <float>m[c]
            V.data[c] = <float>(v[c] / cr)


def batchnorm_fold(mean, var, weight, bias, running_mean, running_var, invstd, scale, shift, new_mean, new_var,
                   cols, eps, momentum):
    """A training-mode batch norm's per-channel values in one loop (see the reference)."""
    arrays = dict(mean=mean, var=var, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var,
                  invstd=invstd, scale=scale, shift=shift, new_mean=new_mean, new_var=new_var)
    for what, a in arrays.items():
        _arr("batchnorm_fold", what, a)
    cols = _int("batchnorm_fold", "cols", cols)
    sizes_fit = cols >= 1
    for a in arrays.values():
        sizes_fit = sizes_fit and (<Array>a).size == cols
    if not sizes_fit:
        check_batchnorm("batchnorm_fold", 1, cols, {}, arrays)
    cdef double e = check_scalar("batchnorm_fold", eps), mom = check_scalar("batchnorm_fold", momentum)
    cdef float take = mom, keep = 1.0 - mom  # each formed in double, rounded once (as the reference)
    cdef float *M = (<Array>mean).data
    cdef float *V = (<Array>var).data
    cdef float *W = (<Array>weight).data
    cdef float *B = (<Array>bias).data
    cdef float *RM = (<Array>running_mean).data
    cdef float *RV = (<Array>running_var).data
    cdef float *INV = (<Array>invstd).data
    cdef float *S = (<Array>scale).data
    cdef float *SH = (<Array>shift).data
    cdef float *NM = (<Array>new_mean).data
    cdef float *NV = (<Array>new_var).data
    cdef Py_ssize_t c, cc = cols
    cdef float inv, sc
    with nogil:
        for c in range(cc):
            inv = <float>(1.0 / sqrt(<double>V[c] + e))
            sc = W[c] * inv
            INV[c] = inv
            S[c] = sc
            SH[c] = B[c] - M[c] * sc
            NM[c] = RM[c] * keep + M[c] * take
            NV[c] = RV[c] * keep + V[c] * take


def bias_add(a, bias, out, rows, cols):
    """out[r, c] = a[r, c] + bias[c] (see the reference); out may be a."""
    cdef Array A = _arr("bias_add", "a", a)
    cdef Array Bs = _arr("bias_add", "bias", bias)
    cdef Array O = _arr("bias_add", "out", out)
    rows, cols = _check_dims("bias_add", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols
    if not (cc >= 1 and A.size == cr * cc and O.size == cr * cc and Bs.size == cc):
        check_bias_add("bias_add", rows, cols, A, Bs, O)
    cdef int nt = _team(cr * cc)
    with nogil:
        _bias_rows(A.data, Bs.data, O.data, cr, cc, nt)


def batchnorm_apply(x, scale, shift, out, rows, cols, relu=False):
    """out[r, c] = x[r, c] * scale[c] + shift[c], with ``relu`` max(that, 0) (see the reference)."""
    cdef Array X = _arr("batchnorm_apply", "x", x)
    cdef Array S = _arr("batchnorm_apply", "scale", scale)
    cdef Array B = _arr("batchnorm_apply", "shift", shift)
    cdef Array O = _arr("batchnorm_apply", "out", out)
    rows, cols = _check_dims("batchnorm_apply", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, t, step
    if not (cr >= 1 and cc >= 1 and X.size == cr * cc and O.size == cr * cc and S.size == cc and B.size == cc):
        check_batchnorm("batchnorm_apply", rows, cols, dict(x=X, out=O), dict(scale=S, shift=B))
    cdef int nt = _team(cr * cc), with_relu = bool(relu)
    step = _chunks(cr, nt, 1)
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            if t * step < cr:
                nk_bn_apply_rows(X.data + t * step * cc, S.data, B.data, O.data + t * step * cc,
                                 min(step, cr - t * step), cc, with_relu)


def batchnorm_backward(x, dy, mean, invstd, weight, dx, dweight, dbias, rows, cols, batch_stats, relu_out=None):
    """dbias, dweight and dx of the batch norm (see the reference): one pass for the column sums,
    one for dx, both reading dy through the ReLU's mask where relu_out is given."""
    cdef Array X = _arr("batchnorm_backward", "x", x)
    cdef Array G = _arr("batchnorm_backward", "dy", dy)
    cdef Array M = _arr("batchnorm_backward", "mean", mean)
    cdef Array S = _arr("batchnorm_backward", "invstd", invstd)
    cdef Array W = _arr("batchnorm_backward", "weight", weight)
    cdef Array DX = _arr("batchnorm_backward", "dx", dx)
    cdef Array DW = _arr("batchnorm_backward", "dweight", dweight)
    cdef Array DB = _arr("batchnorm_backward", "dbias", dbias)
    cdef Array Y = None if relu_out is None else _arr("batchnorm_backward", "relu_out", relu_out)
    rows, cols = _check_dims("batchnorm_backward", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, c, r, step, t
    if not (cr >= 1 and cc >= 1 and X.size == cr * cc and G.size == cr * cc and DX.size == cr * cc
            and M.size == cc and S.size == cc and W.size == cc and DW.size == cc and DB.size == cc
            and (Y is None or Y.size == cr * cc)):
        full = dict(x=X, dy=G, dx=DX) if Y is None else dict(x=X, dy=G, dx=DX, relu_out=Y)
        check_batchnorm("batchnorm_backward", rows, cols, full, dict(mean=M, invstd=S, weight=W, dweight=DW, dbias=DB))
    cdef const float *y = NULL if Y is None else Y.data
    cdef int stats = bool(batch_stats)
    cdef int nt = _threads_for(cr * cc * 3)
    cdef _ColumnScratch sc = _ColumnScratch(nt, 2 * cc, 5)
    cdef double *m = sc.vec             # mean, invstd, then (db, dw) side by side
    cdef double *s = sc.vec + 2 * cc
    cdef double *sums = sc.vec + 4 * cc
    # dx = k * ((dy - gm) - (x - mean) * xd) per column, with k, gm = db / rows and
    # xd = invstd * dw / rows worked out in float64 once per column: the pass over the elements
    # is float32 arithmetic that vectorises, and its differences cancel exactly where the
    # float64 formula gives 0 (a single row)
    cdef float *kg = <float *>(sc.vec + 6 * cc)
    cdef float *xd = kg + cc
    cdef float *gm = kg + 2 * cc
    cdef float *mf = kg + 3 * cc
    for c in range(cc):
        m[c] = M.data[c]
        s[c] = S.data[c]
    step = _chunks(cr, nt, 1)
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            _grad_sums(X.data, G.data, y, t * step, min((t + 1) * step, cr), cc, m, s, sc.acc + t * 2 * cc)
        sc.total(sums)
        for c in range(cc):
            DB.data[c] = <float>sums[c]
            DW.data[c] = <float>sums[cc + c]
            kg[c] = <float>(W.data[c] * s[c])
            mf[c] = M.data[c]
            xd[c] = <float>(s[c] * sums[cc + c] / cr) if stats else 0.0
            gm[c] = <float>(sums[c] / cr) if stats else 0.0
        for t in prange(nt, num_threads=nt, schedule="static"):
            if t * step < cr:
                nk_bn_dx_rows(X.data + t * step * cc, G.data + t * step * cc, y + t * step * cc if y != NULL else NULL,
                              kg, gm, mf, xd, DX.data + t * step * cc, min(step, cr - t * step), cc)


# ---------------------------------------------------------------- layer normalization
# A row per task (see the reference): a row's statistics and its normalisation run while
# the row is in cache. The backward pass gives each thread a block of rows and float64
# column accumulators of its own for dweight and dbias, added up after the parallel loop.

def layernorm(x, weight, bias, out, mean, invstd, rows, cols, eps):
    """Row means, inverse stds and the normalised, scaled and shifted rows of compact x (see the reference)."""
    cdef Array X = _arr("layernorm", "x", x)
    cdef Array W = _arr("layernorm", "weight", weight)
    cdef Array B = _arr("layernorm", "bias", bias)
    cdef Array O = _arr("layernorm", "out", out)
    cdef Array M = _arr("layernorm", "mean", mean)
    cdef Array S = _arr("layernorm", "invstd", invstd)
    rows, cols = _check_dims("layernorm", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, r
    if not (cr >= 0 and cc >= 1 and X.size == cr * cc and O.size == cr * cc and M.size == cr and S.size == cr
            and W.size == cc and B.size == cc):
        check_layernorm("layernorm", rows, cols, dict(x=X, out=O), dict(mean=M, invstd=S), dict(weight=W, bias=B))
    cdef double e = <double>eps if type(eps) is float else check_scalar("layernorm", eps)
    cdef int nt = _team(cr * cc * 3)
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                nk_ln_row(X.data + r * cc, W.data, B.data, O.data + r * cc, cc, e, M.data + r, S.data + r)
        else:
            for r in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                nk_ln_row(X.data + r * cc, W.data, B.data, O.data + r * cc, cc, e, M.data + r, S.data + r)


def layernorm_backward(x, dy, mean, invstd, weight, dx, dweight, dbias, rows, cols):
    """dx, dweight and dbias of the layer norm in one pass over the rows (see the reference)."""
    cdef Array X = _arr("layernorm_backward", "x", x)
    cdef Array G = _arr("layernorm_backward", "dy", dy)
    cdef Array M = _arr("layernorm_backward", "mean", mean)
    cdef Array S = _arr("layernorm_backward", "invstd", invstd)
    cdef Array W = _arr("layernorm_backward", "weight", weight)
    cdef Array DX = _arr("layernorm_backward", "dx", dx)
    cdef Array DW = _arr("layernorm_backward", "dweight", dweight)
    cdef Array DB = _arr("layernorm_backward", "dbias", dbias)
    rows, cols = _check_dims("layernorm_backward", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, c, r, step, t
    if not (cr >= 0 and cc >= 1 and X.size == cr * cc and G.size == cr * cc and DX.size == cr * cc
            and M.size == cr and S.size == cr and W.size == cc and DW.size == cc and DB.size == cc):
        check_layernorm("layernorm_backward", rows, cols, dict(x=X, dy=G, dx=DX), dict(mean=M, invstd=S),
                        dict(weight=W, dweight=DW, dbias=DB))
    cdef int nt = _threads_for(cr * cc * 3)
    if nt > cr:
        nt = <int>cr if cr > 0 else 1
    cdef _ColumnScratch sc = _ColumnScratch(nt, 2 * cc, 2)
    cdef double *sums = sc.vec  # (dw, db) side by side
    step = _chunks(cr, nt, 1)
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                nk_ln_grad_row(X.data + r * cc, G.data + r * cc, W.data, M.data[r], S.data[r], DX.data + r * cc, cc,
                               sc.acc, sc.acc + cc)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                for r in range(t * step, min((t + 1) * step, cr)):
                    nk_ln_grad_row(X.data + r * cc, G.data + r * cc, W.data, M.data[r], S.data[r], DX.data + r * cc,
                                   cc, sc.acc + t * 2 * cc, sc.acc + t * 2 * cc + cc)
        sc.total(sums)
        for c in range(cc):
            DW.data[c] = <float>sums[c]
            DB.data[c] = <float>sums[cc + c]


# ---------------------------------------------------------------- RMS normalization
# As the layer norm: a row per task forward; backward a block of rows per thread, each with
# float64 column accumulators of its own for dweight, added up after the parallel loop.

def rmsnorm(x, weight, out, invrms, rows, cols, eps):
    """Row inverse root mean squares and the scaled rows of compact x (see the reference)."""
    cdef Array X = _arr("rmsnorm", "x", x)
    cdef Array W = _arr("rmsnorm", "weight", weight)
    cdef Array O = _arr("rmsnorm", "out", out)
    cdef Array S = _arr("rmsnorm", "invrms", invrms)
    rows, cols = _check_dims("rmsnorm", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, r
    if not (cr >= 0 and cc >= 1 and X.size == cr * cc and O.size == cr * cc and S.size == cr and W.size == cc):
        check_layernorm("rmsnorm", rows, cols, dict(x=X, out=O), dict(invrms=S), dict(weight=W))
    cdef double e = <double>eps if type(eps) is float else check_scalar("rmsnorm", eps)
    cdef int nt = _team(cr * cc * 2)
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                nk_rms_row(X.data + r * cc, W.data, O.data + r * cc, cc, e, S.data + r)
        else:
            for r in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                nk_rms_row(X.data + r * cc, W.data, O.data + r * cc, cc, e, S.data + r)


def rmsnorm_backward(x, dy, invrms, weight, dx, dweight, rows, cols):
    """dx and dweight of the RMS norm in one pass over the rows (see the reference)."""
    cdef Array X = _arr("rmsnorm_backward", "x", x)
    cdef Array G = _arr("rmsnorm_backward", "dy", dy)
    cdef Array S = _arr("rmsnorm_backward", "invrms", invrms)
    cdef Array W = _arr("rmsnorm_backward", "weight", weight)
    cdef Array DX = _arr("rmsnorm_backward", "dx", dx)
    cdef Array DW = _arr("rmsnorm_backward", "dweight", dweight)
    rows, cols = _check_dims("rmsnorm_backward", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, c, r, step, t
    if not (cr >= 0 and cc >= 1 and X.size == cr * cc and G.size == cr * cc and DX.size == cr * cc
            and S.size == cr and W.size == cc and DW.size == cc):
        check_layernorm("rmsnorm_backward", rows, cols, dict(x=X, dy=G, dx=DX), dict(invrms=S),
                        dict(weight=W, dweight=DW))
    cdef int nt = _threads_for(cr * cc * 3)
    if nt > cr:
        nt = <int>cr if cr > 0 else 1
    cdef _ColumnScratch sc = _ColumnScratch(nt, cc, 1)
    step = _chunks(cr, nt, 1)
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                nk_rms_grad_row(X.data + r * cc, G.data + r * cc, W.data, S.data[r], DX.data + r * cc, cc, sc.acc)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                for r in range(t * step, min((t + 1) * step, cr)):
                    nk_rms_grad_row(X.data + r * cc, G.data + r * cc, W.data, S.data[r], DX.data + r * cc, cc,
                                    sc.acc + t * cc)
        sc.total(sc.vec)
        for c in range(cc):
            DW.data[c] = <float>sc.vec[c]
