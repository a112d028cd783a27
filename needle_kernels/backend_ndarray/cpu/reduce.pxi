# Row reductions, and the softmax and cross-entropy kernels that reduce a row at a time.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- reductions

cdef void _reduce_blocks(const float *a, float *out, Py_ssize_t nout, Py_ssize_t rs, int is_max) noexcept nogil:
    """out[i] = sum/max of a[i*rs:(i+1)*rs]."""
    cdef int nt = _team(nout * rs), c
    cdef Py_ssize_t i, it, parts, seg, lo, hi, items
    cdef float *partial
    if nt == 1:
        nk_note_thread(0)
        for i in range(nout):
            out[i] = nk_max(a + i * rs, rs) if is_max else nk_sum(a + i * rs, rs)
        return
    if nout >= 4 * nt:
        for i in prange(nout, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            out[i] = nk_max(a + i * rs, rs) if is_max else nk_sum(a + i * rs, rs)
        return
    # Few long rows (a full sum): cut every row into parts reduced in parallel.
    parts = nt * 4
    seg = _chunks(rs, parts, 16)
    parts = (rs + seg - 1) // seg
    items = nout * parts
    partial = <float *>nk_scratch_alloc(items * sizeof(float))
    if partial == NULL:  # fall back to one thread rather than fail
        for i in range(nout):
            out[i] = nk_max(a + i * rs, rs) if is_max else nk_sum(a + i * rs, rs)
        return
    for it in prange(items, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        i = it // parts
        lo = (it % parts) * seg
        hi = lo + seg if lo + seg < rs else rs
        partial[it] = nk_max(a + i * rs + lo, hi - lo) if is_max else nk_sum(a + i * rs + lo, hi - lo)
    for i in range(nout):
        out[i] = nk_max(partial + i * parts, parts) if is_max else nk_sum(partial + i * parts, parts)
    nk_scratch_free(partial)


def reduce_max(a, out, reduce_size):
    """out[i] = max of the contiguous block a[i*reduce_size:(i+1)*reduce_size]."""
    cdef Array A = _arr("reduce_max", "a", a)
    cdef Array O = _arr("reduce_max", "out", out)
    cdef Py_ssize_t rs = _int("reduce_max", "reduce_size", reduce_size)
    _check_reduce("reduce_max", A, O, rs)
    with nogil:
        _reduce_blocks(A.data, O.data, O.size, rs, 1)


def reduce_sum(a, out, reduce_size):
    """out[i] = sum of the contiguous block a[i*reduce_size:(i+1)*reduce_size]."""
    cdef Array A = _arr("reduce_sum", "a", a)
    cdef Array O = _arr("reduce_sum", "out", out)
    cdef Py_ssize_t rs = _int("reduce_sum", "reduce_size", reduce_size)
    _check_reduce("reduce_sum", A, O, rs)
    with nogil:
        _reduce_blocks(A.data, O.data, O.size, rs, 0)


cdef void _reduce_axis(const float *a, float *out, Py_ssize_t outer, Py_ssize_t rs, Py_ssize_t inner,
                       int is_max) noexcept nogil:
    """a seen as (outer, rs, inner): each work item reduces a column strip of one outer slice."""
    cdef int nt
    cdef Py_ssize_t strip, nstrips, it, o, j0, n
    if inner == 1:
        _reduce_blocks(a, out, outer, rs, is_max)
        return
    nt = _team(outer * rs * inner)
    if outer == 0 or inner == 0:
        return
    # Strips of at most 2048 columns keep the running result in L1.
    strip = _chunks(inner, nt, 16)
    if strip > 2048:
        strip = 2048
    nstrips = (inner + strip - 1) // strip
    if nt == 1:
        nk_note_thread(0)
        for it in range(outer * nstrips):
            o = it // nstrips
            j0 = (it % nstrips) * strip
            n = strip if strip < inner - j0 else inner - j0
            nk_sum_rows(a + o * rs * inner + j0, inner, rs, out + o * inner + j0, n, is_max)
        return
    for it in prange(outer * nstrips, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        o = it // nstrips
        j0 = (it % nstrips) * strip
        n = strip if strip < inner - j0 else inner - j0
        nk_sum_rows(a + o * rs * inner + j0, inner, rs, out + o * inner + j0, n, is_max)


def reduce_sum_axis(a, out, outer, reduce_size, inner):
    """Compact a seen as (outer, reduce_size, inner); out (outer, inner) is the sum over the middle axis."""
    cdef Array A = _arr("reduce_sum_axis", "a", a)
    cdef Array O = _arr("reduce_sum_axis", "out", out)
    cdef Py_ssize_t co = _int("reduce_sum_axis", "outer", outer)
    cdef Py_ssize_t cr = _int("reduce_sum_axis", "reduce_size", reduce_size)
    cdef Py_ssize_t ci = _int("reduce_sum_axis", "inner", inner)
    _check_reduce_axis("reduce_sum_axis", A, O, co, cr, ci)
    with nogil:
        _reduce_axis(A.data, O.data, co, cr, ci, 0)


def reduce_max_axis(a, out, outer, reduce_size, inner):
    """Like reduce_sum_axis with max."""
    cdef Array A = _arr("reduce_max_axis", "a", a)
    cdef Array O = _arr("reduce_max_axis", "out", out)
    cdef Py_ssize_t co = _int("reduce_max_axis", "outer", outer)
    cdef Py_ssize_t cr = _int("reduce_max_axis", "reduce_size", reduce_size)
    cdef Py_ssize_t ci = _int("reduce_max_axis", "inner", inner)
    _check_reduce_axis("reduce_max_axis", A, O, co, cr, ci)
    with nogil:
        _reduce_axis(A.data, O.data, co, cr, ci, 1)


# ---------------------------------------------------------------- softmax cross-entropy

cdef int _labels_as_indices(str name, Array L, Py_ssize_t rows, Py_ssize_t cols) except -1:
    """Check every label is an integer in [0, cols): the kernels index rows with them."""
    cdef Py_ssize_t i
    cdef float v
    for i in range(rows):
        v = L.data[i]
        if not (v >= 0 and v < cols and v == <float>(<Py_ssize_t>v)):
            raise label_error(name, float(v), cols)
    return 0


cdef inline void _xent_row(const float *z, Py_ssize_t cols, Py_ssize_t y, float *lse, float *loss) noexcept nogil:
    # the reference's formula: max, then max + log(sum of exp(z - max)); the exps are summed
    # as they are made, in one pass, never stored
    cdef float m = nk_max(z, cols), l
    l = m + logf(nk_exp_sum(z, m, cols))
    lse[0] = l
    loss[0] = l - z[y]


cdef inline void _xent_grad_row(const float *z, float *out, Py_ssize_t cols, Py_ssize_t y, float lse,
                                float g) noexcept nogil:
    nk_exp_scale(z, lse, g, out, cols)  # exp(z - lse) * g in one pass
    out[y] -= g


def softmax_xent(z, labels, lse, loss, rows, cols):
    """Row-wise log-sum-exp and cross-entropy against integer labels (see the reference).

    Each row is one task: its max, exp and sum run over the row while it is in cache."""
    cdef Array Z = _arr("softmax_xent", "z", z)
    cdef Array L = _arr("softmax_xent", "labels", labels)
    cdef Array S = _arr("softmax_xent", "lse", lse)
    cdef Array O = _arr("softmax_xent", "loss", loss)
    rows, cols = _check_dims("softmax_xent", (("rows", rows), ("cols", cols)))
    check_softmax_xent("softmax_xent", Z, L, rows, cols, lse=S, loss=O)
    cdef Py_ssize_t cr = rows, cc = cols, i
    _labels_as_indices("softmax_xent", L, cr, cc)
    cdef int nt = _team(cr * cc * 4)
    if nt > cr:
        nt = <int>cr if cr > 0 else 1
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for i in range(cr):
                _xent_row(Z.data + i * cc, cc, <Py_ssize_t>L.data[i], S.data + i, O.data + i)
        else:
            for i in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                _xent_row(Z.data + i * cc, cc, <Py_ssize_t>L.data[i], S.data + i, O.data + i)


def softmax_xent_grad(z, labels, lse, g, out, rows, cols):
    """out = g * (softmax(z) - one_hot(labels)) row by row (see the reference)."""
    cdef Array Z = _arr("softmax_xent_grad", "z", z)
    cdef Array L = _arr("softmax_xent_grad", "labels", labels)
    cdef Array S = _arr("softmax_xent_grad", "lse", lse)
    cdef Array G = _arr("softmax_xent_grad", "g", g)
    cdef Array O = _arr("softmax_xent_grad", "out", out)
    rows, cols = _check_dims("softmax_xent_grad", (("rows", rows), ("cols", cols)))
    check_softmax_xent("softmax_xent_grad", Z, L, rows, cols, lse=S, g=G, out=O)
    cdef Py_ssize_t cr = rows, cc = cols, i
    _labels_as_indices("softmax_xent_grad", L, cr, cc)
    cdef int nt = _team(cr * cc * 3)
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for i in range(cr):
                _xent_grad_row(Z.data + i * cc, O.data + i * cc, cc, <Py_ssize_t>L.data[i], S.data[i], G.data[i])
        else:
            for i in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                _xent_grad_row(Z.data + i * cc, O.data + i * cc, cc, <Py_ssize_t>L.data[i], S.data[i], G.data[i])


# ---------------------------------------------------------------- softmax
# A row per task (see the reference), as the cross-entropy's: the row's max, then its exps
# written and summed, then scaled, while the row is in cache.

cdef inline void _softmax_row(const float *x, float *out, Py_ssize_t cols) noexcept nogil:
    cdef float m = nk_max(x, cols)
    nk_exp_scale(x, m, 1.0, out, cols)
    nk_scalar(NK_MUL, out, 1.0 / nk_sum(out, cols), out, cols)


def softmax(x, out, rows, cols):
    """Row-wise softmax of compact x (rows, cols) (see the reference); out may be x."""
    cdef Array X = _arr("softmax", "x", x)
    cdef Array O = _arr("softmax", "out", out)
    rows, cols = _check_dims("softmax", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, r
    if not (cr >= 0 and cc >= 1 and X.size == cr * cc and O.size == cr * cc):
        check_softmax("softmax", rows, cols, x=X, out=O)
    cdef int nt = _team(cr * cc * 4)
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                _softmax_row(X.data + r * cc, O.data + r * cc, cc)
        else:
            for r in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                _softmax_row(X.data + r * cc, O.data + r * cc, cc)


def softmax_backward(y, g, out, rows, cols):
    """Softmax's adjoint y * (g - sum(g * y)) row by row (see the reference); out may be y or g."""
    cdef Array Y = _arr("softmax_backward", "y", y)
    cdef Array G = _arr("softmax_backward", "g", g)
    cdef Array O = _arr("softmax_backward", "out", out)
    rows, cols = _check_dims("softmax_backward", (("rows", rows), ("cols", cols)))
    cdef Py_ssize_t cr = rows, cc = cols, r
    if not (cr >= 0 and cc >= 1 and Y.size == cr * cc and G.size == cr * cc and O.size == cr * cc):
        check_softmax("softmax_backward", rows, cols, y=Y, g=G, out=O)
    cdef int nt = _team(cr * cc * 2)
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                nk_softmax_grad_row(Y.data + r * cc, G.data + r * cc, O.data + r * cc, cc)
        else:
            for r in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                nk_softmax_grad_row(Y.data + r * cc, G.data + r * cc, O.data + r * cc, cc)
