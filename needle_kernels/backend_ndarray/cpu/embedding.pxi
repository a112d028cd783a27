# Embeddings: rows of a table picked by integer ids (held as floats, as every Array holds
# numbers), and the adjoint that sums rows back into the table.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.


cdef _embedding_args(str name, num_rows, rows, dim, Array table, Array ids, Array picked):
    """(num_rows, rows, dim) as C sizes, after the reference's size and id checks."""
    n, r, d = _int(name, "num_rows", num_rows), _int(name, "rows", rows), _int(name, "dim", dim)
    check_embedding(name, n, r, d, table, ids, picked)
    _labels_as_indices(name, ids, r, n)
    return n, r, d


def embedding_gather(weight, ids, out, num_rows, rows, dim):
    """out (rows, dim) = the rows of weight (num_rows, dim) that ids name (see the reference)."""
    cdef Array W = _arr("embedding_gather", "weight", weight)
    cdef Array I = _arr("embedding_gather", "ids", ids)
    cdef Array O = _arr("embedding_gather", "out", out)
    cdef Py_ssize_t cn, cr, cd, r
    cn, cr, cd = _embedding_args("embedding_gather", num_rows, rows, dim, W, I, O)
    cdef int nt = _team(cr * cd)
    with nogil:
        for r in prange(cr, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            memcpy(O.data + r * cd, W.data + (<Py_ssize_t>I.data[r]) * cd, cd * sizeof(float))


def embedding_scatter(g, ids, out, num_rows, rows, dim):
    """out (num_rows, dim) = one_hot(ids)^T @ g (see the reference). The threads split the
    columns, not the rows: two rows with one id then never meet in two threads, and each
    element is summed in the order of the rows, whatever the thread count."""
    cdef Array G = _arr("embedding_scatter", "g", g)
    cdef Array I = _arr("embedding_scatter", "ids", ids)
    cdef Array O = _arr("embedding_scatter", "out", out)
    cdef Py_ssize_t cn, cr, cd, r, c, c0, c1, step, t
    cn, cr, cd = _embedding_args("embedding_scatter", num_rows, rows, dim, O, I, G)
    cdef int nt = _team(cr * cd)
    step = _chunks(cd, nt, 16)  # whole cache lines of a row per thread
    cdef float *dst
    cdef const float *src
    with nogil:
        memset(O.data, 0, cn * cd * sizeof(float))
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            c0 = t * step
            c1 = min(c0 + step, cd)
            for r in range(cr):
                dst = O.data + (<Py_ssize_t>I.data[r]) * cd
                src = G.data + r * cd
                for c in range(c0, c1):
                    dst[c] += src[c]
