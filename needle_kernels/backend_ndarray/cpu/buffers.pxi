# The Array buffer, its pool of spare buffers, and the argument checks every kernel starts with.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- Array

# Bytes held by live Arrays, counted where buffers are allocated and freed (the
# allocator's view of memory, which is what activation checkpointing saves). Arrays are
# made and freed with the GIL held, so plain counters are safe.
cdef Py_ssize_t _live_bytes = 0
cdef Py_ssize_t _peak_bytes = 0


# Spare buffers: a freed buffer of SPARE_MIN bytes or more is kept, by size, for the next
# Array of exactly that size. A training step allocates the same sizes every time, and a
# fresh buffer costs the kernel a page fault (and a page of zeros) per page on first
# touch, which for a large im2col matrix took longer than the kernel filling it. At most
# NK_SPARE_MB megabytes (default 1024; 0 turns this off) are kept; past that the cache
# is emptied and refills with what the next step frees.
cdef enum:
    SPARE_MIN = 65536
    # The largest scratch buffer kept: a 2048 x 2048 product's packed B is 16 MB.
    SCRATCH_CAP = 32 << 20
cdef dict _spare = {}  # nbytes -> addresses of free buffers of that size
cdef Py_ssize_t _spare_bytes = 0
cdef Py_ssize_t _spare_limit = 1024 << 20


def _read_spare_limit():
    import os
    value = os.environ.get("NK_SPARE_MB", "1024")
    try:
        mb = int(value)
    except ValueError:
        raise ValueError(f"NK_SPARE_MB must be a whole number of megabytes, got {value!r}") from None
    if mb < 0:
        raise ValueError(f"NK_SPARE_MB must be >= 0, got {mb}")
    return mb << 20


_spare_limit = _read_spare_limit()
# The kernels' scratch buffers (ndarray_backend_cpu_scratch.h) are kept under the same
# switch: NK_SPARE_MB=0 keeps none, and none bigger than the limit.
nk_scratch_cap = min(SCRATCH_CAP, _spare_limit)


cdef float *_take_buffer(Py_ssize_t nbytes):
    global _spare_bytes
    if nbytes >= SPARE_MIN:
        free_list = _spare.get(nbytes)
        if free_list:
            _spare_bytes -= nbytes
            return <float *><size_t>free_list.pop()
    return <float *>nk_buffer_alloc(<size_t>nbytes)


cdef void _give_buffer(float *data, Py_ssize_t nbytes):
    global _spare_bytes
    if data == NULL:
        return
    if nbytes < SPARE_MIN or nbytes > _spare_limit or _spare is None:  # None: interpreter shutdown
        free(data)
        return
    if _spare_bytes + nbytes > _spare_limit:
        release_cached_buffers()
    _spare.setdefault(nbytes, []).append(<size_t>data)
    _spare_bytes += nbytes


def release_cached_buffers():
    """Free the spare buffers kept for reuse (see NK_SPARE_MB) and the kernels' idle scratch
    buffers; returns how many bytes that released."""
    global _spare_bytes
    released = _spare_bytes + nk_scratch_idle_bytes()
    nk_scratch_release_idle()
    for addresses in _spare.values():
        for address in addresses:
            free(<void *><size_t>address)
    _spare.clear()
    _spare_bytes = 0
    return released


def memory_stats():
    """{"live_bytes": held by live Arrays now, "peak_bytes": the most held since the last reset,
    "cached_bytes": freed buffers kept for reuse (not counted as live), "scratch_bytes": the
    kernels' idle scratch buffers (packed panels of a matmul and the like) kept for their next call}."""
    return {"live_bytes": _live_bytes, "peak_bytes": _peak_bytes, "cached_bytes": _spare_bytes,
            "scratch_bytes": nk_scratch_idle_bytes()}


def reset_peak_memory():
    """Start a new peak from what is held now."""
    global _peak_bytes
    _peak_bytes = _live_bytes


cdef class Array:
    """A flat float32 buffer of ``size`` elements, 64-byte aligned, freed with the object."""

    cdef float *data
    cdef readonly Py_ssize_t size

    def __cinit__(self, size):
        try:
            n = int(size)
        except (TypeError, ValueError):
            raise ValueError(f"Array size must be an integer, got {type(size).__name__}") from None
        if n < 0:
            raise ValueError(f"Array size must be >= 0, got {n}")
        if n > (<Py_ssize_t>1 << 60) // 4:
            raise ValueError(f"Array size {n} is too large")
        self.size = n
        self.data = _take_buffer(n * 4)
        if self.data == NULL:
            raise MemoryError(f"Array: cannot allocate {n} floats")
        global _live_bytes, _peak_bytes
        _live_bytes += n * 4
        if _live_bytes > _peak_bytes:
            _peak_bytes = _live_bytes

    def __dealloc__(self):
        global _live_bytes
        if self.data != NULL:
            _live_bytes -= self.size * 4
        _give_buffer(self.data, self.size * 4)

    def ptr(self):
        """The buffer's address."""
        return <size_t>self.data

    def __repr__(self):
        return f"ndarray_backend_cpu.Array(size={self.size})"


# ---------------------------------------------------------------- argument checks

cdef Py_ssize_t _int(str name, str what, v) except? -1:
    if type(v) is int:  # the common case, without a call to operator.index
        try:
            return <Py_ssize_t>v
        except OverflowError:
            raise ValueError(f"{name}: {what}={v} is out of range") from None
    try:
        return operator.index(v)
    except TypeError:
        raise ValueError(f"{name}: {what} must be an integer, got {type(v).__name__}") from None
    except OverflowError:
        raise ValueError(f"{name}: {what}={v} is out of range") from None


cdef inline float _scalar_arg(str name, val) except? -1:
    # a Python float is by far the common case; anything else goes through the reference's check
    if type(val) is float:
        return <float>(<double>val)
    return check_scalar(name, val)


cdef Array _arr(str name, str what, x):
    if not isinstance(x, Array):
        raise ValueError(f"{name}: {what} must be an ndarray_backend_cpu.Array, got {type(x).__name__}")
    return <Array>x


cdef tuple _read_view(str name, shape, strides, offset):
    """(shape, strides, offset) as tuples of Python ints; the reference's check_view checks the rest."""
    try:
        shape = tuple(shape)
        strides = tuple(strides)
    except TypeError:
        raise ValueError(f"{name}: shape and strides must be sequences of integers") from None
    if len(shape) > MAX_NDIM or len(strides) > MAX_NDIM:
        raise ValueError(f"{name}: {len(shape)} dimensions, at most {MAX_NDIM} are supported")
    shape = tuple([_int(name, "shape", n) for n in shape])
    strides = tuple([_int(name, "strides", s) for s in strides])
    return shape, strides, _int(name, "offset", offset)


cdef bint _view_fits(Py_ssize_t size, tuple shape, tuple strides, Py_ssize_t offset, Py_ssize_t *total) except -1:
    """True when the view lies in a buffer of size, with *total = prod(shape): the reference's
    check_view and prod, in C. False where they would raise, and (conservatively) for
    dimensions or strides of 2**31 or more; callers then run the reference's checks."""
    cdef Py_ssize_t nd = len(shape), k, n, st, lo = offset, hi = offset, t = 1
    cdef Py_ssize_t big = <Py_ssize_t>1 << 31
    cdef bint empty = False
    if nd != len(strides) or offset < 0:
        return False
    for k in range(nd):
        n = shape[k]
        st = strides[k]
        if n < 0 or n >= big or st >= big or st <= -big:
            return False
        t *= n
        if t >= (<Py_ssize_t>1 << 60):
            return False
        if n == 0:
            empty = True
        elif st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
        if (lo < 0 or hi >= size) and not empty:
            return False  # out of bounds, or empty after all: the reference decides
    total[0] = t
    return True


cdef int _c_view(tuple shape, tuple strides, Py_ssize_t *cshape, Py_ssize_t *cstrides) except -1:
    """Copy a checked view into C arrays; returns ndim."""
    cdef int k
    for k in range(len(shape)):
        cshape[k] = shape[k]
        cstrides[k] = strides[k]
    return len(shape)


cdef _check_dims(str name, dims):
    out = []
    for what, v in dims:
        v = _int(name, what, v)
        if v < 0:
            raise ValueError(f"{name}: {what} must be >= 0, got {v}")
        out.append(v)
    return out
