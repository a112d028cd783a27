# Copies between strided views and the transfers to and from numpy built on them.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- strided copies
# One routine moves elements between two strided views of the same shape:
# compact (strided -> row-major), ewise_setitem (row-major -> strided) and
# scalar_setitem (a single value with all strides 0 -> strided).

cdef int _collapse(int nd, Py_ssize_t *shape, Py_ssize_t *s1, Py_ssize_t *s2) noexcept nogil:
    """Drop size-1 axes and merge neighbours that are contiguous in both views; returns the new ndim."""
    cdef int k, out = 0
    for k in range(nd):
        if shape[k] == 1:
            continue
        if out > 0 and s1[out - 1] == s1[k] * shape[k] and s2[out - 1] == s2[k] * shape[k]:
            shape[out - 1] *= shape[k]
            s1[out - 1] = s1[k]
            s2[out - 1] = s2[k]
        else:
            shape[out] = shape[k]
            s1[out] = s1[k]
            s2[out] = s2[k]
            out += 1
    if out == 0:
        shape[0] = 1
        s1[0] = 0
        s2[0] = 0
        out = 1
    return out


cdef inline Py_ssize_t _iabs(Py_ssize_t x) noexcept nogil:
    return -x if x < 0 else x


cdef inline void _run(const float *src, Py_ssize_t ss, float *dst, Py_ssize_t ds, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    if ss == 1 and ds == 1:
        memcpy(dst, src, n * sizeof(float))
    elif ss == 0 and ds == 1:
        nk_fill(dst, src[0], n)
    else:
        for j in range(n):
            dst[j * ds] = src[j * ss]


cdef void _copy_range(const float *src, float *dst, int nd, const Py_ssize_t *shape, const Py_ssize_t *ss,
                      const Py_ssize_t *ds, Py_ssize_t start, Py_ssize_t stop) noexcept nogil:
    """Copy the elements with row-major index in [start, stop), one run of the last axis at a time."""
    cdef Py_ssize_t idx[MAX_NDIM]
    cdef Py_ssize_t rem = start, so = 0, do = 0, n, last = shape[nd - 1]
    cdef int k
    for k in range(nd - 1, -1, -1):
        idx[k] = rem % shape[k]
        rem //= shape[k]
        so += idx[k] * ss[k]
        do += idx[k] * ds[k]
    while start < stop:
        n = last - idx[nd - 1]
        if n > stop - start:
            n = stop - start
        _run(src + so, ss[nd - 1], dst + do, ds[nd - 1], n)
        start += n
        so += n * ss[nd - 1]
        do += n * ds[nd - 1]
        idx[nd - 1] += n
        k = nd - 1
        while k > 0 and idx[k] == shape[k]:
            so -= shape[k] * ss[k]
            do -= shape[k] * ds[k]
            idx[k] = 0
            k -= 1
            idx[k] += 1
            so += ss[k]
            do += ds[k]


cdef void _copy_tiles(const float *src, float *dst, int nd, const Py_ssize_t *shape, const Py_ssize_t *ss,
                      const Py_ssize_t *ds, Py_ssize_t item) noexcept nogil:
    """Copy one band of COPY_TILE rows of the last two axes, tile by tile (a transpose-like copy)."""
    cdef Py_ssize_t rows = shape[nd - 2], cols = shape[nd - 1]
    cdef Py_ssize_t bands = (rows + COPY_TILE - 1) // COPY_TILE
    cdef Py_ssize_t outer = item // bands, r0 = (item % bands) * COPY_TILE
    cdef Py_ssize_t r1 = r0 + COPY_TILE if r0 + COPY_TILE < rows else rows
    cdef Py_ssize_t so = 0, do = 0, c0, c1, i, j
    cdef Py_ssize_t sr = ss[nd - 2], sc = ss[nd - 1], dr = ds[nd - 2], dc = ds[nd - 1]
    cdef int k
    for k in range(nd - 3, -1, -1):
        so += (outer % shape[k]) * ss[k]
        do += (outer % shape[k]) * ds[k]
        outer //= shape[k]
    c0 = 0
    while c0 < cols:
        c1 = c0 + COPY_TILE if c0 + COPY_TILE < cols else cols
        for i in range(r0, r1):
            for j in range(c0, c1):
                dst[do + i * dr + j * dc] = src[so + i * sr + j * sc]
        c0 += COPY_TILE


cdef int _innermost(int nd, const Py_ssize_t *strides) noexcept nogil:
    """The axis a view steps along most closely in memory (a broadcast axis, stride 0, reads
    one element and is no such axis); -1 when every axis is broadcast."""
    cdef int k, best = -1
    for k in range(nd - 1, -1, -1):
        if strides[k] != 0 and (best < 0 or _iabs(strides[k]) < _iabs(strides[best])):
            best = k
    return best


cdef void _move_to_end(int nd, Py_ssize_t *shape, Py_ssize_t *ss, Py_ssize_t *ds, int axis) noexcept nogil:
    """Make ``axis`` the last one of both views (the order of the others kept): the copy moves
    the same elements in whatever order it runs over the axes."""
    cdef Py_ssize_t n = shape[axis], s = ss[axis], d = ds[axis]
    cdef int k
    for k in range(axis, nd - 1):
        shape[k] = shape[k + 1]
        ss[k] = ss[k + 1]
        ds[k] = ds[k + 1]
    shape[nd - 1] = n
    ss[nd - 1] = s
    ds[nd - 1] = d


cdef void _strided_copy(const float *src, Py_ssize_t *ss, float *dst, Py_ssize_t *ds, Py_ssize_t *shape,
                        int nd, Py_ssize_t total) noexcept nogil:
    cdef int nt, c, read_axis, write_axis
    cdef Py_ssize_t chunk, items, it, k
    nt = _team(total)
    if total == 0:
        return
    nd = _collapse(nd, shape, ss, ds)
    read_axis, write_axis = _innermost(nd, ss), _innermost(nd, ds)
    if nd >= 2 and read_axis >= 0 and write_axis >= 0 and read_axis != write_axis \
            and ss[write_axis] != 0 and shape[write_axis] >= COPY_TILE // 4:
        # The two views step along different axes, the one written not short (the tiles' inner
        # loop) nor broadcast in the source (the runs below fill that): an NCHW batch written
        # into a padded NHWC one, say, where they are not the last two. Make them the last two.
        _move_to_end(nd, shape, ss, ds, read_axis)
        _move_to_end(nd, shape, ss, ds, write_axis - 1 if write_axis > read_axis else write_axis)
    if nd >= 2 and (_iabs(ss[nd - 2]) < _iabs(ss[nd - 1]) or _iabs(ds[nd - 2]) < _iabs(ds[nd - 1])):
        # The two views are contiguous along different axes: copy in tiles so
        # both the reads and the writes stay within a few cache lines.
        items = total // shape[nd - 1] // shape[nd - 2] * ((shape[nd - 2] + COPY_TILE - 1) // COPY_TILE)
        if nt == 1:
            nk_note_thread(0)
            for it in range(items):
                _copy_tiles(src, dst, nd, shape, ss, ds, it)
        else:
            for it in prange(items, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                _copy_tiles(src, dst, nd, shape, ss, ds, it)
        return
    if nt == 1:
        nk_note_thread(0)
        _copy_range(src, dst, nd, shape, ss, ds, 0, total)
        return
    chunk = _chunks(total, nt, 1)
    for c in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        _copy_range(src, dst, nd, shape, ss, ds, c * chunk,
                    (c + 1) * chunk if (c + 1) * chunk < total else total)


cdef inline void _row_major(int nd, const Py_ssize_t *shape, Py_ssize_t *strides) noexcept nogil:
    cdef Py_ssize_t s = 1
    cdef int k
    for k in range(nd - 1, -1, -1):
        strides[k] = s
        s *= shape[k]


# ---------------------------------------------------------------- transfers

def to_numpy(a, shape, strides, offset):
    """A new numpy float32 array with the elements of the strided view."""
    cdef Array A = _arr("to_numpy", "a", a)
    cdef Py_ssize_t cshape[MAX_NDIM]
    cdef Py_ssize_t cstrides[MAX_NDIM]
    cdef Py_ssize_t dstrides[MAX_NDIM]
    cdef Py_ssize_t n_view
    shape, strides, offset = _read_view("to_numpy", shape, strides, offset)
    if not _view_fits(A.size, shape, strides, offset, &n_view):
        check_view(A.size, shape, strides, offset)
    cdef int nd = _c_view(shape, strides, cshape, cstrides)
    cdef Py_ssize_t off = offset
    res = np.empty(shape, dtype=np.float32)
    cdef Py_ssize_t total = res.size
    if total == 0:
        return res
    cdef float[::1] flat = res.reshape(-1)
    _row_major(nd, cshape, dstrides)
    with nogil:
        _strided_copy(A.data + off, cstrides, &flat[0], dstrides, cshape, nd, total)
    return res


def from_numpy(arr, out):
    """Copy a numpy array (any float dtype, any layout) into out in row-major order."""
    cdef Array O = _arr("from_numpy", "out", out)
    check_size("from_numpy", O, np.size(arr), "out")
    src = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1)
    if O.size == 0:
        return
    cdef const float[::1] view = src
    with nogil:
        memcpy(O.data, &view[0], O.size * sizeof(float))


def fill(out, val):
    """out[:] = val."""
    cdef Array O = _arr("fill", "out", out)
    cdef float v = check_scalar("fill", val)
    cdef Py_ssize_t n = O.size, chunk
    cdef int nt = _team(n), c
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            nk_fill(O.data, v, n)
        else:
            chunk = _chunks(n, nt, 16)
            for c in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                if c * chunk < n:
                    nk_fill(O.data + c * chunk, v, min(chunk, n - c * chunk))


def compact(a, out, shape, strides, offset):
    """out[i] = a[offset + sum_k idx_k(i) * strides[k]], i running row-major over shape."""
    cdef Array A = _arr("compact", "a", a)
    cdef Array O = _arr("compact", "out", out)
    cdef Py_ssize_t cshape[MAX_NDIM]
    cdef Py_ssize_t cstrides[MAX_NDIM]
    cdef Py_ssize_t dstrides[MAX_NDIM]
    cdef Py_ssize_t n_view
    shape, strides, offset = _read_view("compact", shape, strides, offset)
    if not _view_fits(A.size, shape, strides, offset, &n_view) or n_view != O.size:
        check_size("compact", O, prod(shape), "out")
        check_view(A.size, shape, strides, offset)
    cdef int nd = _c_view(shape, strides, cshape, cstrides)
    cdef Py_ssize_t off = offset
    _row_major(nd, cshape, dstrides)
    with nogil:
        _strided_copy(A.data + off, cstrides, O.data, dstrides, cshape, nd, O.size)


def ewise_setitem(a, out, shape, strides, offset):
    """Write the compact a into the strided view (shape, strides, offset) of out."""
    cdef Array A = _arr("ewise_setitem", "a", a)
    cdef Array O = _arr("ewise_setitem", "out", out)
    cdef Py_ssize_t cshape[MAX_NDIM]
    cdef Py_ssize_t cstrides[MAX_NDIM]
    cdef Py_ssize_t sstrides[MAX_NDIM]
    cdef Py_ssize_t n_view
    shape, strides, offset = _read_view("ewise_setitem", shape, strides, offset)
    if not _view_fits(O.size, shape, strides, offset, &n_view) or n_view != A.size:
        check_size("ewise_setitem", A, prod(shape), "a")
        check_view(O.size, shape, strides, offset, "out")
    cdef int nd = _c_view(shape, strides, cshape, cstrides)
    cdef Py_ssize_t off = offset
    _row_major(nd, cshape, sstrides)
    with nogil:
        _strided_copy(A.data, sstrides, O.data + off, cstrides, cshape, nd, A.size)


def scalar_setitem(size, val, out, shape, strides, offset):
    """Set every element of the strided view of out to val; size == prod(shape)."""
    cdef Array O = _arr("scalar_setitem", "out", out)
    cdef Py_ssize_t cshape[MAX_NDIM]
    cdef Py_ssize_t cstrides[MAX_NDIM]
    cdef Py_ssize_t sstrides[MAX_NDIM]
    shape, strides, offset = _read_view("scalar_setitem", shape, strides, offset)
    cdef Py_ssize_t total = _int("scalar_setitem", "size", size), n_view
    cdef bint fits = _view_fits(O.size, shape, strides, offset, &n_view)
    if not fits or total != n_view:
        if total != prod(shape):
            raise ValueError(f"scalar_setitem: size {size} != prod(shape {tuple(shape)})")
    cdef float v = _scalar_arg("scalar_setitem", val)
    if not fits:
        check_view(O.size, shape, strides, offset, "out")
    cdef int nd = _c_view(shape, strides, cshape, cstrides)
    cdef Py_ssize_t off = offset
    memset(sstrides, 0, sizeof(sstrides))
    with nogil:
        _strided_copy(&v, sstrides, O.data + off, cstrides, cshape, nd, total)
