# The element-wise kernels' thread split; their Python wrappers are generated from
# elementwise_table.py into ndarray_backend_cpu_elementwise.pxi, included after this file.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- element-wise

cdef void _binary_kernel(int op, const float *a, const float *b, float *out, Py_ssize_t n) noexcept nogil:
    cdef int nt = _team(n), c
    cdef Py_ssize_t chunk, lo
    if nt == 1:
        nk_note_thread(0)
        nk_binary(op, a, b, out, n)
        return
    chunk = _chunks(n, nt, 16)
    for c in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        lo = c * chunk
        if lo < n:
            nk_binary(op, a + lo, b + lo, out + lo, min(chunk, n - lo))


cdef void _scalar_kernel(int op, const float *a, float v, float *out, Py_ssize_t n) noexcept nogil:
    cdef int nt = _team(n), c
    cdef Py_ssize_t chunk, lo
    if nt == 1:
        nk_note_thread(0)
        nk_scalar(op, a, v, out, n)
        return
    chunk = _chunks(n, nt, 16)
    for c in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        lo = c * chunk
        if lo < n:
            nk_scalar(op, a + lo, v, out + lo, min(chunk, n - lo))


cdef void _unary_kernel(int op, const float *a, float *out, Py_ssize_t n) noexcept nogil:
    cdef int nt = _team(n * 4), c  # exp/log/tanh cost a few times a load
    cdef Py_ssize_t chunk, lo
    if nt == 1:
        nk_note_thread(0)
        nk_unary(op, a, out, n)
        return
    chunk = _chunks(n, nt, 16)
    for c in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        lo = c * chunk
        if lo < n:
            nk_unary(op, a + lo, out + lo, min(chunk, n - lo))


# The reference's check_same_size builds dicts; compare sizes in C and call it
# only to raise its message.

cdef _ewise(str name, int op, a, b, out):
    cdef Array A = _arr(name, "a", a)
    cdef Array B = _arr(name, "b", b)
    cdef Array O = _arr(name, "out", out)
    if A.size != O.size or B.size != O.size:
        check_same_size(name, a=A, b=B, out=O)
    with nogil:
        _binary_kernel(op, A.data, B.data, O.data, O.size)


cdef _scalar(str name, int op, a, val, out):
    cdef Array A = _arr(name, "a", a)
    cdef Array O = _arr(name, "out", out)
    if A.size != O.size:
        check_same_size(name, a=A, out=O)
    cdef float v = _scalar_arg(name, val)
    with nogil:
        _scalar_kernel(op, A.data, v, O.data, O.size)


cdef _unary(str name, int op, a, out):
    cdef Array A = _arr(name, "a", a)
    cdef Array O = _arr(name, "out", out)
    if A.size != O.size:
        check_same_size(name, a=A, out=O)
    with nogil:
        _unary_kernel(op, A.data, O.data, O.size)
