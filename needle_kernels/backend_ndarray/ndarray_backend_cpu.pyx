# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython + OpenMP backend: the flat kernel table of ``ndarray_backend_numpy``, in C.

Every function here has the same name, arguments, meaning and error
messages as in the numpy reference backend, which defines them. The split of
labour:

* this file checks arguments at the Python boundary (with the shared
  ``backend_checks``, so every backend raises the same ``ValueError``) and then, without
  the GIL, cuts the work into chunks run by OpenMP threads (``prange``);
* ``ndarray_backend_cpu_kernels.h`` holds the vectorized loop one thread runs
  on one chunk (``ndarray_backend_cpu_vmath.h``: exp, log, tanh, max) and
  ``ndarray_backend_cpu_gemm.h`` the packed, register-blocked matmul
  micro-kernel; each is compiled for several instruction sets (baseline,
  AVX2+FMA, AVX-512) and the widest one the CPU runs is chosen when the
  module loads, so a portable build still uses wide registers.

Small kernels run on one thread (see ``num_threads_for``): waking a thread
team costs microseconds, more than adding a few thousand floats.

Diagnostics beyond the table: ``set_num_threads``, ``get_num_threads``,
``num_threads_for``, ``omp_threads_used`` (threads that ran the last kernel),
``isa``/``available_isas``/``set_isa`` (the instruction set of the
matmul micro-kernel and of the exp/log/tanh/max loops).
"""
import operator

import numpy as np

cimport openmp
from cython.parallel cimport parallel, prange, threadid
from libc.math cimport logf, sqrt
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from .backend_checks import (
    check_lists,
    check_optim_lists,
    check_batchnorm,
    check_layernorm,
    check_bias_add,
    check_lstm,
    check_matmul as _check_matmul,
    check_optim as _check_optim,
    check_col2im,
    check_conv_implicit,
    check_softmax,
    check_softmax_xent,
    check_winograd_input,
    check_winograd_output,
    check_winograd_conv,
    check_winograd_weight_grad,
    label_error,
    check_reduce as _check_reduce,
    check_reduce_axis as _check_reduce_axis,
    check_same_size,
    check_scalar,
    check_size,
    check_view,
    prod,
)

cdef extern from "ndarray_backend_cpu_kernels.h" nogil:
    enum:
        NK_ADD
        NK_MUL
        NK_DIV
        NK_MAX
        NK_EQ
        NK_GE
        NK_POW
        NK_SQUARE
        NK_RELU_BACKWARD
        NK_TANH_BACKWARD
        NK_SIGMOID_BACKWARD
        NK_LOG
        NK_EXP
        NK_TANH
    void nk_binary(int op, const float *a, const float *b, float *out, Py_ssize_t n)
    void nk_scalar(int op, const float *a, float v, float *out, Py_ssize_t n)
    void nk_unary(int op, const float *a, float *out, Py_ssize_t n)
    int nk_vmath_select(const char *isa)
    void nk_fill(float *out, float v, Py_ssize_t n)
    float nk_sum(const float *a, Py_ssize_t n)
    float nk_max(const float *a, Py_ssize_t n)
    float nk_exp_sum(const float *a, float shift, Py_ssize_t n)
    void nk_exp_scale(const float *a, float shift, float scale, float *out, Py_ssize_t n)
    void nk_lstm_row(const float *z, const float *c0, float *h, float *c, Py_ssize_t H)
    void nk_lstm_row_backward(const float *z, const float *c0, const float *dh, const float *dc, float *dz,
                              float *dc0, Py_ssize_t H)
    float nk_maxf(float a, float b)
    void nk_sum_rows(const float *a, Py_ssize_t lda, Py_ssize_t rows, float *out, Py_ssize_t n, int is_max)
    void nk_tile_matmul8(const float *a, const float *b, float *out)
    void nk_note_thread(int tid)
    void nk_reset_threads()
    int nk_threads_used()
    void nk_adam(const float *p, const float *g, float *m, float *v, float *out, Py_ssize_t n, float b1, float omb1,
                 float b2, float omb2, float wd, int has_wd, float step, float inv_c2, float eps)
    void nk_sgd(const float *p, const float *g, float *u, float *out, Py_ssize_t n, float lr, float mom,
                float ommom, float wd, int has_wd)
    void *nk_buffer_alloc(size_t nbytes)
    void nk_bn_col_sums(const float *x, Py_ssize_t rows, Py_ssize_t n, const double *center, double *acc)
    void nk_bn_grad_sums(const float *x, const float *dy, const float *y, Py_ssize_t rows, Py_ssize_t n,
                         const double *mean, const double *invstd, double *db, double *dw)
    void nk_bias_add_rows(const float *a, const float *bias, float *out, Py_ssize_t rows, Py_ssize_t n)
    void nk_bn_apply_rows(const float *x, const float *scale, const float *shift, float *out, Py_ssize_t rows,
                          Py_ssize_t n, int relu)
    void nk_bn_dx_rows(const float *x, const float *dy, const float *y, const float *k, const float *gm,
                       const float *mean, const float *xd, float *dx, Py_ssize_t rows, Py_ssize_t n)
    void nk_softmax_grad_row(const float *y, const float *g, float *out, Py_ssize_t n)
    void nk_ln_row(const float *x, const float *w, const float *b, float *out, Py_ssize_t n, double eps,
                   float *mean, float *invstd)
    void nk_ln_grad_row(const float *x, const float *dy, const float *w, float mean, float invstd, float *dx,
                        Py_ssize_t n, double *dw, double *db)
    void nk_col2im_row(const float *cols, float *out_row, Py_ssize_t b, Py_ssize_t y, Py_ssize_t w, Py_ssize_t c,
                       Py_ssize_t k, Py_ssize_t s, Py_ssize_t ho, Py_ssize_t wo)
    void nk_prefetch(const float *p, Py_ssize_t n)
    void nk_window_rows(const float *a, Py_ssize_t sn, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t sc, Py_ssize_t h,
                        Py_ssize_t w, Py_ssize_t c, Py_ssize_t k, Py_ssize_t s, Py_ssize_t ph, Py_ssize_t pw,
                        Py_ssize_t ho, Py_ssize_t wo, int planar, Py_ssize_t r0, Py_ssize_t npix,
                        const float *zeros, float *edge, const float **rows)
    # tile t of th x tw per image (t = (b * th + ti) * tw + tj)
    void nk_winograd_input_tile(const float *a, float *out, Py_ssize_t ld, Py_ssize_t t, Py_ssize_t th,
                                Py_ssize_t tw, Py_ssize_t h, Py_ssize_t w, Py_ssize_t c)
    void nk_winograd_output_tile(const float *m, Py_ssize_t ld, float *out, Py_ssize_t t, Py_ssize_t th,
                                 Py_ssize_t tw, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t c)
    void nk_winograd_grad_tile(const float *g, float *out, Py_ssize_t ld, Py_ssize_t t, Py_ssize_t th,
                               Py_ssize_t tw, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t c)
    void nk_winograd_weight_output(const float *m, float *dw, Py_ssize_t n)

cdef extern from "ndarray_backend_cpu_gemm.h" nogil:
    ctypedef void (*nk_macro_fn)(Py_ssize_t mc, Py_ssize_t nc, Py_ssize_t kc, const float *Ap,
                                 const float *Bp, float *C, Py_ssize_t ldc, int add) noexcept nogil
    ctypedef void (*nk_direct_fn)(Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, const float *A, Py_ssize_t ars,
                                  Py_ssize_t acs, const float *B, const float *Bp, float *C,
                                  float *work) noexcept nogil
    ctypedef void (*nk_conv_fn)(Py_ssize_t nseg, Py_ssize_t seglen, const float *const *rows, const float *B,
                                Py_ssize_t ldb, float *C, Py_ssize_t ldc, Py_ssize_t mr, Py_ssize_t nr) noexcept nogil
    ctypedef void (*nk_convw_fn)(Py_ssize_t npix, const float *const *rows, Py_ssize_t nseg, Py_ssize_t off,
                                 const float *G, Py_ssize_t ldg, float *S, Py_ssize_t lds, Py_ssize_t mr,
                                 Py_ssize_t nr) noexcept nogil
    ctypedef struct nk_gemm_kernel:
        const char *name
        int mr, nr, kc, mc, nc
        nk_macro_fn macro
        int dmr, dnr
        nk_direct_fn direct
        int cmr, cnr
        nk_conv_fn conv, conv1
        nk_convw_fn convw, convw1
    const nk_gemm_kernel nk_gemm_kernels[]
    const int nk_gemm_nkernels
    int nk_gemm_supported(int i)
    int nk_gemm_best()
    void nk_pack_a(const float *A, Py_ssize_t lda, Py_ssize_t mc, Py_ssize_t kc, int MR, float *Ap)
    void nk_pack_b(const float *B, Py_ssize_t ldb, Py_ssize_t kc, Py_ssize_t j0, Py_ssize_t j1, int NR,
                   float *Bp)
    void *nk_aligned_alloc(size_t nbytes)
    enum:
        NK_DIRECT_GROUP

__device_name__ = "cpu"
__tile_size__ = 8

cdef enum:
    MAX_NDIM = 64
    # Below this much work (elements; flops / MATMUL_FLOPS_PER_ELEMENT for matmul) a kernel runs
    # on one thread.
    PARALLEL_MIN_WORK = 32768
    # A product's flops per element of work: 16 gives two threads from 256k multiply-adds on.
    # `benchmarks/bench_backend.py --only "(small)"`, then with --threads 1: 64^3 106.6 against
    # 83.8 GFLOP/s, the MLPResNet's 100x100x50 111.0 against 75.1 and 100x50x100 121.8 against
    # 82.7 (at 64 these had one thread)
    MATMUL_FLOPS_PER_ELEMENT = 16
    # Tiles of a transpose-like copy are COPY_TILE x COPY_TILE.
    COPY_TILE = 32
    # Below this many multiply-adds the packing costs more than it saves.
    GEMM_SMALL = 4096
    # The direct kernel (kern.direct) reads a row-major A in place. A product whose B has at
    # most this many floats (1 MB, an L2 here) reads B in place too: B stays in L2 while A
    # streams past once.
    # Measured here against the packed kernel it was 1.05-4x faster on such shapes, from
    # 16x400x100 (an LSTM step) to 16384x576x64 (a 3x3 convolution's im2col product).
    GEMM_DIRECT_B = 1 << 18
    # A product at most this many columns wide with a bigger B packs only B, whole, into
    # column strips (when A has GEMM_DIRECT_PACK_ROWS rows to repay that; fewer read B in
    # place): a weight gradient X^T @ dY, 576 x 16384 @ 16384 x 64, ran 1.5x faster so.
    GEMM_DIRECT_COLS = 512
    GEMM_DIRECT_PACK_ROWS = 64
    # A product this deep or deeper, with a transposed A of fewer than GEMM_DIRECT_PACK_ROWS
    # rows (a weight gradient X^T @ dY over a whole batch of pixels), splits its depth among
    # the threads, each summing its share into its own copy of the small output: splitting
    # C's rows instead left 16 rows to one thread (the direct kernel gathers a transposed A
    # 16 rows at a time). bench_backend's 16x8192x147 row went from 60 to 124 GFLOP/s.
    GEMM_KSPLIT_DEPTH = 1024
    # Floats of B per block of the depth-split product's sum (256 KB, well inside an L2):
    # bench_backend's 16x8192x147 row (B in cache) went from 123 to 147 GFLOP/s.
    GEMM_KSPLIT_BLOCK_B = 1 << 16
    # Most floats of B packed at once (256 MB).
    GEMM_PACK_MAX = 1 << 26
    # Floats of one block of Winograd tiles with their 16 products (512 KB: in an L2 here).
    WINOGRAD_BLOCK_FLOATS = 1 << 17
    # The pixels conv_implicit takes per block: as many as have this many floats of windows (64 KB
    # were they copied; mostly they are read where they lie, through the block's segment table)
    CONV_IMPLICIT_BLOCK = 1 << 14

cdef int _num_threads = max(1, openmp.omp_get_max_threads())
cdef Py_ssize_t _direct_b = GEMM_DIRECT_B
cdef int _gemm_index = nk_gemm_best()


# ---------------------------------------------------------------- threads

def set_num_threads(n):
    """Use up to n OpenMP threads in the following kernels (n >= 1)."""
    global _num_threads
    n = _int("set_num_threads", "n", n)
    if n < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n}")
    _num_threads = n


def get_num_threads():
    """The most threads a kernel may use (default: OMP_NUM_THREADS or the core count)."""
    return _num_threads


cdef inline int _threads_for(Py_ssize_t work) noexcept nogil:
    cdef Py_ssize_t t
    if work < PARALLEL_MIN_WORK or _num_threads <= 1:
        return 1
    t = work // (PARALLEL_MIN_WORK // 2)
    return <int>(t if t < _num_threads else _num_threads)


def num_threads_for(work):
    """How many threads a kernel of this many elements (flops for matmul) runs on."""
    return _threads_for(_int("num_threads_for", "work", work))


def set_gemm_direct_limit(floats):
    """The most elements of B the direct kernel reads in place (default 2**18); returns the
    previous limit. 0 sends every product through the packed kernel (for tests and for
    measuring both paths); 1 makes every direct product of 64 rows or more pack B's strips."""
    global _direct_b
    floats = _int("set_gemm_direct_limit", "floats", floats)
    if floats < 0:
        raise ValueError(f"set_gemm_direct_limit: floats must be >= 0, got {floats}")
    old, _direct_b = _direct_b, floats
    return old


def omp_threads_used():
    """How many distinct OpenMP threads ran a chunk of the most recent kernel."""
    return nk_threads_used()


def available_isas():
    """Instruction sets this build and CPU can run the kernels with, widest first."""
    return [nk_gemm_kernels[i].name.decode() for i in range(nk_gemm_nkernels) if nk_gemm_supported(i)]


def isa():
    """The instruction set in use, with the matmul micro-kernel's register tile and cache blocks."""
    k = nk_gemm_kernels[_gemm_index]
    return {"name": k.name.decode(), "mr": k.mr, "nr": k.nr, "kc": k.kc, "mc": k.mc, "nc": k.nc}


def set_isa(name=None):
    """Run matmul and exp/log/tanh/max with the code for "avx512", "avx2" or "generic"; None picks the widest.

    All three compute the same function; choosing a narrower one is for
    testing every variant on one machine and for measuring what it buys.
    """
    global _gemm_index
    if name is None:
        name = nk_gemm_kernels[nk_gemm_best()].name.decode()
    for i in range(nk_gemm_nkernels):
        if nk_gemm_kernels[i].name.decode() == name:
            if not nk_gemm_supported(i) or not nk_vmath_select(name.encode()):
                raise ValueError(f"set_isa: this CPU cannot run the {name!r} kernels")
            _gemm_index = i
            return
    raise ValueError(f"set_isa: unknown instruction set {name!r}, expected one of {available_isas()}")


set_isa(None)


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
    """Free the spare buffers kept for reuse (see NK_SPARE_MB); returns how many bytes that released."""
    global _spare_bytes
    released = _spare_bytes
    for addresses in _spare.values():
        for address in addresses:
            free(<void *><size_t>address)
    _spare.clear()
    _spare_bytes = 0
    return released


def memory_stats():
    """{"live_bytes": held by live Arrays now, "peak_bytes": the most held since the last reset,
    "cached_bytes": freed buffers kept for reuse (not counted as live)}."""
    return {"live_bytes": _live_bytes, "peak_bytes": _peak_bytes, "cached_bytes": _spare_bytes}


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


cdef void _strided_copy(const float *src, Py_ssize_t *ss, float *dst, Py_ssize_t *ds, Py_ssize_t *shape,
                        int nd, Py_ssize_t total) noexcept nogil:
    cdef int nt, c
    cdef Py_ssize_t chunk, items, it, k
    nk_reset_threads()
    if total == 0:
        return
    nd = _collapse(nd, shape, ss, ds)
    nt = _threads_for(total)
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
    chunk = (total + nt - 1) // nt
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
    cdef int nt = _threads_for(n), c
    nk_reset_threads()
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            nk_fill(O.data, v, n)
        else:
            chunk = ((n + nt - 1) // nt + 15) // 16 * 16
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


# ---------------------------------------------------------------- element-wise

cdef void _binary_kernel(int op, const float *a, const float *b, float *out, Py_ssize_t n) noexcept nogil:
    cdef int nt = _threads_for(n), c
    cdef Py_ssize_t chunk, lo
    nk_reset_threads()
    if nt == 1:
        nk_note_thread(0)
        nk_binary(op, a, b, out, n)
        return
    # Chunks are multiples of 16 floats (64 bytes) so threads never share a cache line.
    chunk = ((n + nt - 1) // nt + 15) // 16 * 16
    for c in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        lo = c * chunk
        if lo < n:
            nk_binary(op, a + lo, b + lo, out + lo, min(chunk, n - lo))


cdef void _scalar_kernel(int op, const float *a, float v, float *out, Py_ssize_t n) noexcept nogil:
    cdef int nt = _threads_for(n), c
    cdef Py_ssize_t chunk, lo
    nk_reset_threads()
    if nt == 1:
        nk_note_thread(0)
        nk_scalar(op, a, v, out, n)
        return
    chunk = ((n + nt - 1) // nt + 15) // 16 * 16
    for c in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        lo = c * chunk
        if lo < n:
            nk_scalar(op, a + lo, v, out + lo, min(chunk, n - lo))


cdef void _unary_kernel(int op, const float *a, float *out, Py_ssize_t n) noexcept nogil:
    cdef int nt = _threads_for(n * 4), c  # exp/log/tanh cost a few times a load
    cdef Py_ssize_t chunk, lo
    nk_reset_threads()
    if nt == 1:
        nk_note_thread(0)
        nk_unary(op, a, out, n)
        return
    chunk = ((n + nt - 1) // nt + 15) // 16 * 16
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


# ewise_*, scalar_* and the unary kernels: one wrapper each around the helpers
# above, generated from the table in elementwise_table.py.
include "ndarray_backend_cpu_elementwise.pxi"


# ---------------------------------------------------------------- matmul

cdef void _gemm_small(const float *A, const float *B, float *C, Py_ssize_t m, Py_ssize_t n,
                      Py_ssize_t p) noexcept nogil:
    cdef Py_ssize_t i, k, j
    cdef float av
    for i in range(m):
        for j in range(p):
            C[i * p + j] = 0.0
        for k in range(n):
            av = A[i * n + k]
            for j in range(p):
                C[i * p + j] += av * B[k * p + j]


cdef inline void _pack_a(const nk_gemm_kernel *kern, const float *A, bint at, Py_ssize_t m, Py_ssize_t n,
                         Py_ssize_t i0, Py_ssize_t mcur, Py_ssize_t pc, Py_ssize_t kcur, float *Ap) noexcept nogil:
    """Pack rows i0..i0+mcur, columns pc..pc+kcur of A: row-major (m, n), or (at) stored as the
    row-major (n, m) array of its transpose, read as it is."""
    if at:  # rows of A^T hold A's columns: A's row panels are nk_pack_b's column panels of A^T
        nk_pack_b(A + pc * m + i0, m, kcur, 0, mcur, kern.mr, Ap)
    else:
        nk_pack_a(A + i0 * n + pc, n, mcur, kcur, kern.mr, Ap)


cdef inline void _gemm_rows(const nk_gemm_kernel *kern, const float *A, bint at, Py_ssize_t m, float *C, float *Ap,
                            const float *Bp, Py_ssize_t i0, Py_ssize_t mcur, Py_ssize_t n, Py_ssize_t p,
                            Py_ssize_t kc, Py_ssize_t nc, Py_ssize_t jc, Py_ssize_t ncur) noexcept nogil:
    """Rows i0..i0+mcur of C[:, jc:jc+ncur] (+)= A @ B, one KC slice at a time, from the packed B."""
    cdef Py_ssize_t pc = 0, kcur
    while pc < n:
        kcur = kc if kc < n - pc else n - pc
        _pack_a(kern, A, at, m, n, i0, mcur, pc, kcur, Ap)
        kern.macro(mcur, ncur, kcur, Ap, Bp + pc * nc, C + i0 * p + jc, p, pc > 0)
        pc += kc


cdef void _gemm_band(const nk_gemm_kernel *kern, const float *A, bint at, const float *B, float *C, Py_ssize_t m,
                     Py_ssize_t n, Py_ssize_t p, Py_ssize_t kc, Py_ssize_t j0, Py_ssize_t ncur,
                     float *Ap, float *Bp) noexcept nogil:
    """C[:, j0:j0+ncur] = A @ B[:, j0:j0+ncur] for m <= MC rows, one KC slice at a time: the slice
    of B is packed and used at once, while it is in cache."""
    cdef Py_ssize_t pc = 0, kcur
    while pc < n:
        kcur = kc if kc < n - pc else n - pc
        nk_pack_b(B + pc * p + j0, p, kcur, 0, ncur, kern.nr, Bp)
        _pack_a(kern, A, at, m, n, 0, m, pc, kcur, Ap)
        kern.macro(m, ncur, kcur, Ap, Bp, C + j0, p, pc > 0)
        pc += kc


cdef int _gemm_few_rows(const nk_gemm_kernel *kern, const float *A, bint at, const float *B, float *C, Py_ssize_t m,
                        Py_ssize_t n, Py_ssize_t p, int nt) noexcept nogil:
    """C = A @ B when A has at most MC rows (a weight gradient X^T @ G, a small batch times a
    wide layer): the threads split the columns of C into bands instead of its few rows, so each
    reads its band of B once; splitting rows would have every thread stream all of B."""
    cdef int MR = kern.mr, NR = kern.nr
    cdef Py_ssize_t kc = kern.kc if kern.kc < n else n
    cdef Py_ssize_t npan = (p + NR - 1) // NR, nbands, bandw, jb, per, apsize
    # bands of at most ~512 columns (a KC x band slice of B stays in L2), at least one per thread
    nbands = (p + 511) // 512
    if nbands < nt:
        nbands = nt
    bandw = (npan + nbands - 1) // nbands * NR
    nbands = (p + bandw - 1) // bandw
    if nbands < nt:
        nt = <int>nbands
    apsize = (m + MR - 1) // MR * MR * kc
    per = apsize + kc * bandw
    cdef float *buf = <float *>nk_aligned_alloc(nt * per * sizeof(float))
    if buf == NULL:
        return -1
    if nt == 1:
        nk_note_thread(0)
        for jb in range(nbands):
            _gemm_band(kern, A, at, B, C, m, n, p, kc, jb * bandw, bandw if bandw < p - jb * bandw else p - jb * bandw,
                       buf, buf + apsize)
    else:
        for jb in prange(nbands, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            _gemm_band(kern, A, at, B, C, m, n, p, kc, jb * bandw, bandw if bandw < p - jb * bandw else p - jb * bandw,
                       buf + threadid() * per, buf + threadid() * per + apsize)
    free(buf)
    return 0


cdef int _gemm_direct(const nk_gemm_kernel *kern, const float *A, Py_ssize_t ars, Py_ssize_t acs, const float *B,
                      bint b_trans, float *C, Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, int nt) noexcept nogil:
    """C = A @ B by kern.direct, the threads taking contiguous blocks of rows; A's element (i, k)
    is A[i * ars + k * acs], and B is row-major (n, p) or, with b_trans, the row-major (p, n)
    array of its transpose. B is first packed whole into column strips when it is transposed,
    or bigger than the in-place limit with enough rows of A to repay that (16 x 8192 @ 8192 x
    147 ran at 129 GFLOP/s in place, 75 packed). A row-major A is read in place; a transposed
    one is gathered 16 rows at a time (see nk_direct in the gemm header)."""
    cdef Py_ssize_t per_thread = n * (kern.dnr + kern.dmr + 16), blocks = (m + kern.dmr - 1) // kern.dmr, rows, r0
    cdef Py_ssize_t NR = kern.dnr, npan = (p + NR - 1) // NR, jp
    cdef int t
    cdef float *Bp = NULL
    if nt > blocks:
        nt = <int>blocks
    # as even shares of row blocks as can be; whole groups of 16 rows when A is transposed (the
    # kernel gathers a transposed A 16 rows at a time): 100 rows went 64 + 36 that way
    rows = (blocks + nt - 1) // nt * kern.dmr
    if acs != 1:
        rows = (rows + 15) // 16 * 16
    cdef float *work = <float *>nk_aligned_alloc(nt * per_thread * sizeof(float))
    if work == NULL:
        return -1
    if b_trans or (n * p > _direct_b and m >= GEMM_DIRECT_PACK_ROWS):
        Bp = <float *>nk_aligned_alloc(n * npan * NR * sizeof(float))
        if Bp == NULL:
            free(work)
            return -1
        for jp in prange(npan, num_threads=nt, schedule="static"):
            if b_trans:  # B's column strips are nk_pack_a's row panels of the stored B^T
                nk_pack_a(B + jp * NR * n, n, ((jp + 1) * NR if (jp + 1) * NR < p else p) - jp * NR, n,
                          <int>NR, Bp + jp * NR * n)
            else:
                nk_pack_b(B, p, n, jp * NR, (jp + 1) * NR if (jp + 1) * NR < p else p, <int>NR, Bp)
    if nt == 1:
        nk_note_thread(0)
        kern.direct(m, n, p, A, ars, acs, B, Bp, C, work)
    else:
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            r0 = t * rows
            if r0 < m:
                kern.direct(rows if rows < m - r0 else m - r0, n, p, A + r0 * ars, ars, acs, B, Bp, C + r0 * p,
                            work + t * per_thread)
    free(Bp)
    free(work)
    return 0


cdef int _gemm_direct_ksplit(const nk_gemm_kernel *kern, const float *A, Py_ssize_t ars, Py_ssize_t acs,
                             const float *B, float *C, Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, int nt) noexcept nogil:
    """C = A @ B (B row-major) with the depth n split among nt threads: thread t multiplies
    rows [k0, k1) of B by those columns of A into its own (m, p) block (thread 0's is C),
    then the blocks are summed into C. Each thread goes through its rows of B a block of
    GEMM_KSPLIT_BLOCK_B floats at a time, summing the blocks' products: the direct kernel
    reads B once per 4 rows of A, and a block stays in L2 for all of them, where a whole
    share (a 4.8 MB im2col matrix) was read from memory again for every 4 rows."""
    cdef Py_ssize_t chunk = (n + nt - 1) // nt, k0, kn, kb, kcur, i, size = m * p
    cdef Py_ssize_t depth = GEMM_KSPLIT_BLOCK_B // p if p < GEMM_KSPLIT_BLOCK_B // 64 else 64
    cdef int t, err = 0
    # per thread: its sum (thread 0's is C) and the product of the current block
    cdef float *parts = <float *>nk_aligned_alloc((2 * nt - 1) * size * sizeof(float))
    cdef float *dst
    cdef float *blk
    if parts == NULL:
        return -1
    for t in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        k0 = t * chunk
        kn = chunk if chunk < n - k0 else n - k0
        dst = C if t == 0 else parts + (t - 1) * size
        blk = parts + (nt - 1 + t) * size
        if kn <= 0:
            memset(dst, 0, size * sizeof(float))
        kb = 0
        while kb < kn:
            kcur = depth if depth < kn - kb else kn - kb
            err += _gemm_direct(kern, A + (k0 + kb) * acs, ars, acs, B + (k0 + kb) * p, False,
                                dst if kb == 0 else blk, m, kcur, p, 1)
            if kb > 0:
                for i in range(size):
                    dst[i] += blk[i]
            kb = kb + kcur
    for t in range(1, nt):
        dst = parts + (t - 1) * size
        for i in range(size):
            C[i] += dst[i]
    free(parts)
    return -1 if err else 0


cdef inline bint _direct_fits(Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    # (rows of B a multiple of 4 KB apart fall on the same cache sets when read in place:
    # 2048 x 256 @ 256 x 1024 ran at 0.7x the packed kernel's speed)
    return _direct_b > 0 and ((n * p <= _direct_b and p % 1024 != 0) or p <= GEMM_DIRECT_COLS)


cdef int _gemm(const float *A, const float *B, float *C, Py_ssize_t m, Py_ssize_t n, Py_ssize_t p,
               int nt) noexcept nogil:
    """C (m, p) = A (m, n) @ B (n, p), row-major; returns -1 when out of memory.

    Goto/BLIS blocking: the threads pack a column block of B together (all
    its KC-deep slices, as NR-column panels), then each takes MC-row blocks,
    packs each KC slice of its rows of A into MR-row panels and runs the
    micro-kernel over them.
    """
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef int MR = kern.mr, NR = kern.nr
    cdef Py_ssize_t kc, nc, mc, nb, npan, nslices, jc, pc, ncur, jp, ib, it
    cdef float *Bp
    cdef float *Ap_all
    if m == 0 or p == 0:
        return 0
    if n == 0:
        memset(C, 0, m * p * sizeof(float))
        return 0
    if m * n * p <= GEMM_SMALL:
        _gemm_small(A, B, C, m, n, p)
        return 0
    if _direct_fits(n, p):
        return _gemm_direct(kern, A, n, 1, B, False, C, m, n, p, nt)
    return _gemm_packed(kern, A, False, B, C, m, n, p, nt)


cdef int _gemm_packed(const nk_gemm_kernel *kern, const float *A, bint at, const float *B, float *C, Py_ssize_t m,
                      Py_ssize_t n, Py_ssize_t p, int nt) noexcept nogil:
    """The packed kernel of _gemm for m, n, p >= 1; A row-major, or (at) stored as its transpose."""
    cdef int MR = kern.mr, NR = kern.nr
    cdef Py_ssize_t kc, nc, mc, nb, npan, nslices, jc, pc, ncur, jp, ib, it
    cdef float *Bp
    cdef float *Ap_all
    if m <= kern.mc:
        return _gemm_few_rows(kern, A, at, B, C, m, n, p, nt)
    kc = kern.kc if kern.kc < n else n
    # B is packed a whole column chunk at a time (all of it, unless that
    # would take more than GEMM_PACK_MAX floats), so the threads meet only
    # once per chunk, after packing: a barrier per KC slice would cost a
    # scheduler time slice each whenever another process holds a core.
    nc = (p + NR - 1) // NR * NR
    if n * nc > GEMM_PACK_MAX:
        nc = GEMM_PACK_MAX // n // NR * NR
        if nc < NR:
            nc = NR
    nslices = (n + kc - 1) // kc
    # Row blocks: at most kern.mc rows each, and a multiple of nt of them so
    # every thread gets the same share.
    nb = (m + kern.mc - 1) // kern.mc
    if nt > 1:
        nb = (nb + nt - 1) // nt * nt
    mc = ((m + nb - 1) // nb + MR - 1) // MR * MR
    nb = (m + mc - 1) // mc
    if nb < nt:
        nt = <int>nb
    Bp = <float *>nk_aligned_alloc(n * nc * sizeof(float))
    Ap_all = <float *>nk_aligned_alloc(nt * mc * kc * sizeof(float))
    if Bp == NULL or Ap_all == NULL:
        free(Bp)
        free(Ap_all)
        return -1
    jc = 0
    while jc < p:
        ncur = nc if nc < p - jc else p - jc
        npan = (ncur + NR - 1) // NR
        # Slice pc (rows pc..pc+kc of B) lands at Bp + pc * nc, as NR-column panels.
        if nt == 1:
            nk_note_thread(0)
            for it in range(nslices):
                pc = it * kc
                nk_pack_b(B + pc * p + jc, p, kc if kc < n - pc else n - pc, 0, ncur, NR, Bp + pc * nc)
            for ib in range(nb):
                _gemm_rows(kern, A, at, m, C, Ap_all, Bp, ib * mc, mc if mc < m - ib * mc else m - ib * mc,
                           n, p, kc, nc, jc, ncur)
        else:
            with parallel(num_threads=nt):
                for it in prange(nslices * npan, schedule="static"):
                    nk_note_thread(threadid())
                    pc = (it // npan) * kc
                    jp = it % npan
                    nk_pack_b(B + pc * p + jc, p, kc if kc < n - pc else n - pc, jp * NR,
                              (jp + 1) * NR if (jp + 1) * NR < ncur else ncur, NR, Bp + pc * nc)
                # dynamic: a thread that gets its core back late takes fewer row blocks
                for ib in prange(nb, schedule="dynamic"):
                    _gemm_rows(kern, A, at, m, C, Ap_all + threadid() * mc * kc, Bp, ib * mc,
                               mc if mc < m - ib * mc else m - ib * mc, n, p, kc, nc, jc, ncur)
        jc += nc
    free(Bp)
    free(Ap_all)
    return 0


cdef _check_dims(str name, dims):
    out = []
    for what, v in dims:
        v = _int(name, what, v)
        if v < 0:
            raise ValueError(f"{name}: {what} must be >= 0, got {v}")
        out.append(v)
    return out


def matmul(a, b, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p), all compact row-major."""
    cdef Array A = _arr("matmul", "a", a)
    cdef Array B = _arr("matmul", "b", b)
    cdef Array O = _arr("matmul", "out", out)
    m, n, p = _check_dims("matmul", (("m", m), ("n", n), ("p", p)))
    _check_matmul("matmul", A, B, O, m, n, p)
    cdef Py_ssize_t cm = m, cn = n, cp = p
    cdef int nt = _threads_for(2 * cm * cn * cp // MATMUL_FLOPS_PER_ELEMENT), err
    nk_reset_threads()
    with nogil:
        err = _gemm(A.data, B.data, O.data, cm, cn, cp, nt)
    if err:
        raise MemoryError("matmul: cannot allocate packing buffers")


cdef void _transpose_into(const float *src, float *dst, Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    """dst (cols, rows) = src (rows, cols) transposed, in COPY_TILE blocks."""
    cdef Py_ssize_t i0 = 0, j0, i, j, tile = COPY_TILE
    while i0 < rows:
        j0 = 0
        while j0 < cols:
            for i in range(i0, i0 + tile if i0 + tile < rows else rows):
                for j in range(j0, j0 + tile if j0 + tile < cols else cols):
                    dst[j * rows + i] = src[i * cols + j]
            j0 += tile
        i0 += tile


def matmul_t(a, b, out, m, n, p, trans_a, trans_b):
    """out (m, p) = A @ B, where a holds A (m, n) row-major or, with trans_a, the row-major (n, m)
    array A is the transpose of; likewise b holds B (n, p) or, with trans_b, a (p, n) array. The
    backward pass's products with a transposed operand (dY @ W^T, X^T @ dY) read it as it is
    where the direct kernel serves the shape, instead of a transposed copy first."""
    cdef Array A = _arr("matmul_t", "a", a)
    cdef Array B = _arr("matmul_t", "b", b)
    cdef Array O = _arr("matmul_t", "out", out)
    m, n, p = _check_dims("matmul_t", (("m", m), ("n", n), ("p", p)))
    _check_matmul("matmul_t", A, B, O, m, n, p)
    cdef Py_ssize_t cm = m, cn = n, cp = p
    cdef bint ta = bool(trans_a), tb = bool(trans_b)
    cdef int nt = _threads_for(2 * cm * cn * cp // MATMUL_FLOPS_PER_ELEMENT), err = 0
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef float *At = NULL
    cdef float *Bt = NULL
    nk_reset_threads()
    with nogil:
        if not ta and not tb:
            err = _gemm(A.data, B.data, O.data, cm, cn, cp, nt)
        elif (ta and not tb and nt > 1 and cm < GEMM_DIRECT_PACK_ROWS and cn >= GEMM_KSPLIT_DEPTH
              and cn >= 2 * (cm + cp) and _direct_b > 0):
            err = _gemm_direct_ksplit(kern, A.data, 1, cm, B.data, O.data, cm, cn, cp, nt)
        elif cm * cn * cp > GEMM_SMALL and _direct_fits(cn, cp):
            err = _gemm_direct(kern, A.data, 1 if ta else cn, cm if ta else 1, B.data, tb, O.data, cm, cn, cp, nt)
        elif cm * cn * cp > GEMM_SMALL and not tb:  # the packed kernel packs a transposed A as it is
            err = _gemm_packed(kern, A.data, True, B.data, O.data, cm, cn, cp, nt)
        else:  # the packed kernel takes a row-major B: a transposed copy first
            if ta:
                At = <float *>nk_aligned_alloc(cm * cn * sizeof(float))
            if tb:
                Bt = <float *>nk_aligned_alloc(cn * cp * sizeof(float))
            if (ta and At == NULL) or (tb and Bt == NULL):
                err = -1
            else:
                if ta:
                    _transpose_into(A.data, At, cn, cm)
                if tb:
                    _transpose_into(B.data, Bt, cp, cn)
                err = _gemm(At if ta else A.data, Bt if tb else B.data, O.data, cm, cn, cp, nt)
            free(At)
            free(Bt)
    if err:
        raise MemoryError("matmul_t: cannot allocate packing buffers")


def matmul_batched(a, b, out, batch, m, n, p):
    """out[k] (m, p) = a[k] (m, n) @ b[k] (n, p) for k < batch."""
    cdef Array A = _arr("matmul_batched", "a", a)
    cdef Array B = _arr("matmul_batched", "b", b)
    cdef Array O = _arr("matmul_batched", "out", out)
    batch, m, n, p = _check_dims("matmul_batched", (("batch", batch), ("m", m), ("n", n), ("p", p)))
    _check_matmul("matmul_batched", A, B, O, m, n, p, batch)
    cdef Py_ssize_t cb = batch, cm = m, cn = n, cp = p, k
    cdef int nt = _threads_for(2 * cb * cm * cn * cp // 64), err = 0, e
    nk_reset_threads()
    with nogil:
        if nt > 1 and cb >= 2 * nt and cm * cn * cp < 128 * 128 * 128:
            # Many small products: one product per thread at a time.
            for k in prange(cb, num_threads=nt, schedule="dynamic"):
                nk_note_thread(threadid())
                e = _gemm(A.data + k * cm * cn, B.data + k * cn * cp, O.data + k * cm * cp, cm, cn, cp, 1)
                err += e
        else:
            for k in range(cb):
                e = _gemm(A.data + k * cm * cn, B.data + k * cn * cp, O.data + k * cm * cp, cm, cn, cp, nt)
                err += e
    if err:
        raise MemoryError("matmul_batched: cannot allocate packing buffers")


def matmul_tiled(a, b, out, m, n, p):
    """matmul on the tiled layout: a is (m/T, n/T, T, T), b (n/T, p/T, T, T), out (m/T, p/T, T, T)."""
    cdef Array A = _arr("matmul_tiled", "a", a)
    cdef Array B = _arr("matmul_tiled", "b", b)
    cdef Array O = _arr("matmul_tiled", "out", out)
    m, n, p = _check_dims("matmul_tiled", (("m", m), ("n", n), ("p", p)))
    t = __tile_size__
    if m % t or n % t or p % t:
        raise ValueError(f"matmul_tiled: m={m}, n={n}, p={p} must be multiples of the tile size {t}")
    _check_matmul("matmul_tiled", A, B, O, m, n, p)
    cdef Py_ssize_t mt = m // 8, nt_ = n // 8, pt = p // 8, tile, i, j, k
    cdef int nt = _threads_for(2 * m * n * p // 64)
    nk_reset_threads()
    with nogil:
        for tile in prange(mt * pt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            i = tile // pt
            j = tile % pt
            memset(O.data + tile * 64, 0, 64 * sizeof(float))
            for k in range(nt_):
                nk_tile_matmul8(A.data + (i * nt_ + k) * 64, B.data + (k * pt + j) * 64, O.data + tile * 64)


# ---------------------------------------------------------------- reductions

cdef void _reduce_blocks(const float *a, float *out, Py_ssize_t nout, Py_ssize_t rs, int is_max) noexcept nogil:
    """out[i] = sum/max of a[i*rs:(i+1)*rs]."""
    cdef int nt = _threads_for(nout * rs), c
    cdef Py_ssize_t i, it, parts, seg, lo, hi, items
    cdef float *partial
    nk_reset_threads()
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
    seg = ((rs + parts - 1) // parts + 15) // 16 * 16
    parts = (rs + seg - 1) // seg
    items = nout * parts
    partial = <float *>nk_aligned_alloc(items * sizeof(float))
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
    free(partial)


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
    nk_reset_threads()
    if outer == 0 or inner == 0:
        return
    nt = _threads_for(outer * rs * inner)
    # Strips of at most 2048 columns keep the running result in L1.
    strip = (inner + nt - 1) // nt
    strip = (strip + 15) // 16 * 16
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


# ---------------------------------------------------------------- optimizer steps

def adam_update(param, grad, m, v, out, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """One Adam step, element-wise; m and v are updated in place (see the reference)."""
    cdef Array P = _arr("adam_update", "param", param)
    cdef Array G = _arr("adam_update", "grad", grad)
    cdef Array M = _arr("adam_update", "m", m)
    cdef Array V = _arr("adam_update", "v", v)
    cdef Array O = _arr("adam_update", "out", out)
    lr, beta1, beta2, eps, weight_decay, c1, c2 = _check_optim(
        "adam_update", dict(param=P, grad=G, m=M, v=V, out=O), (lr, beta1, beta2, eps, weight_decay, c1, c2))
    # the same float32 roundings as the reference: each scalar formed in double, then rounded once
    cdef float b1 = beta1, omb1 = 1.0 - beta1, b2 = beta2, omb2 = 1.0 - beta2, wd = weight_decay
    cdef float step = lr / c1, inv_c2 = 1.0 / c2, ep = eps
    cdef int has_wd = weight_decay != 0.0
    cdef Py_ssize_t n = O.size, chunk, lo
    cdef int nt = _threads_for(n * 4), c  # about four element-wise kernels' worth of memory traffic
    nk_reset_threads()
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            nk_adam(P.data, G.data, M.data, V.data, O.data, n, b1, omb1, b2, omb2, wd, has_wd, step, inv_c2, ep)
        else:
            chunk = ((n + nt - 1) // nt + 15) // 16 * 16
            for c in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                lo = c * chunk
                if lo < n:
                    nk_adam(P.data + lo, G.data + lo, M.data + lo, V.data + lo, O.data + lo, min(chunk, n - lo),
                            b1, omb1, b2, omb2, wd, has_wd, step, inv_c2, ep)


cdef void _adam_span(float **ptrs, const Py_ssize_t *starts, Py_ssize_t count, Py_ssize_t lo, Py_ssize_t hi,
                     float b1, float omb1, float b2, float omb2, float wd, int has_wd, float step, float inv_c2,
                     float ep) noexcept nogil:
    """nk_adam over elements [lo, hi) of the arrays laid end to end (array i holds elements
    starts[i]..starts[i+1]; its param, grad, m, v and out are ptrs[5i..5i+4])."""
    cdef Py_ssize_t i = 0, a, b
    while i < count and starts[i + 1] <= lo:
        i += 1
    while i < count and starts[i] < hi:
        a = (lo if lo > starts[i] else starts[i]) - starts[i]
        b = (hi if hi < starts[i + 1] else starts[i + 1]) - starts[i]
        if b > a:
            nk_adam(ptrs[5 * i] + a, ptrs[5 * i + 1] + a, ptrs[5 * i + 2] + a, ptrs[5 * i + 3] + a,
                    ptrs[5 * i + 4] + a, b - a, b1, omb1, b2, omb2, wd, has_wd, step, inv_c2, ep)
        i += 1


def adam_update_many(params, grads, ms, vs, outs, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """adam_update on each (params[i], grads[i], ms[i], vs[i], outs[i]) of the lists (see the
    reference), as one pass: the threads split the arrays' total length, not each array, so a
    model of many small parameters pays one parallel region and one call instead of one per array."""
    lists = dict(params=params, grads=grads, ms=ms, vs=vs, outs=outs)
    count = check_lists("adam_update_many", **lists)
    keep = []  # the Arrays, alive while their pointers are used
    for i in range(count):
        P, G, M, V, O = params[i], grads[i], ms[i], vs[i], outs[i]
        if not (type(P) is type(G) is type(M) is type(V) is type(O) is Array
                and (<Array>P).size == (<Array>G).size == (<Array>M).size == (<Array>V).size == (<Array>O).size):
            # the messages are made only here: this loop runs for every parameter of every step
            for what, items in lists.items():
                _arr("adam_update_many", f"{what}[{i}]", items[i])
            check_optim_lists("adam_update_many", (), **lists)
        keep.append((P, G, M, V, O))
    _, (lr, beta1, beta2, eps, weight_decay, c1, c2) = check_optim_lists(
        "adam_update_many", (lr, beta1, beta2, eps, weight_decay, c1, c2))
    cdef float b1 = beta1, omb1 = 1.0 - beta1, b2 = beta2, omb2 = 1.0 - beta2, wd = weight_decay
    cdef float step = lr / c1, inv_c2 = 1.0 / c2, ep = eps
    cdef int has_wd = weight_decay != 0.0
    cdef float **ptrs = <float **>malloc((5 * count + 1) * sizeof(float *))
    cdef Py_ssize_t *starts = <Py_ssize_t *>malloc((count + 1) * sizeof(Py_ssize_t))
    if ptrs == NULL or starts == NULL:
        free(ptrs)
        free(starts)
        raise MemoryError("adam_update_many: cannot allocate its tables")
    cdef Py_ssize_t k, total = 0, chunk, lo, narrays = count
    starts[0] = 0
    for k in range(count):
        for j in range(5):
            ptrs[5 * k + j] = (<Array>keep[k][j]).data
        total += (<Array>keep[k][4]).size
        starts[k + 1] = total
    cdef int nt = _threads_for(total * 4), c  # as adam_update: four element-wise kernels' traffic
    nk_reset_threads()
    with nogil:
        chunk = ((total + nt - 1) // nt + 15) // 16 * 16
        if nt == 1:
            nk_note_thread(0)
            _adam_span(ptrs, starts, narrays, 0, total, b1, omb1, b2, omb2, wd, has_wd, step, inv_c2, ep)
        else:
            for c in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                lo = c * chunk
                _adam_span(ptrs, starts, narrays, lo, lo + chunk if lo + chunk < total else total,
                           b1, omb1, b2, omb2, wd, has_wd, step, inv_c2, ep)
    free(ptrs)
    free(starts)


def sgd_update(param, grad, u, out, lr, momentum, weight_decay):
    """One SGD step with moving-average momentum; u (or None) is updated in place (see the reference)."""
    cdef Array P = _arr("sgd_update", "param", param)
    cdef Array G = _arr("sgd_update", "grad", grad)
    cdef Array O = _arr("sgd_update", "out", out)
    cdef Array U = None if u is None else _arr("sgd_update", "u", u)
    arrays = dict(param=P, grad=G, out=O)
    if U is not None:
        arrays["u"] = U
    lr, momentum, weight_decay = _check_optim("sgd_update", arrays, (lr, momentum, weight_decay))
    cdef float flr = lr, mom = momentum, ommom = 1.0 - momentum, wd = weight_decay
    cdef int has_wd = weight_decay != 0.0
    cdef float *ud = NULL if U is None else U.data
    cdef Py_ssize_t n = O.size, chunk, lo
    cdef int nt = _threads_for(n * 2), c
    nk_reset_threads()
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            nk_sgd(P.data, G.data, ud, O.data, n, flr, mom, ommom, wd, has_wd)
        else:
            chunk = ((n + nt - 1) // nt + 15) // 16 * 16
            for c in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                lo = c * chunk
                if lo < n:
                    nk_sgd(P.data + lo, G.data + lo, NULL if ud == NULL else ud + lo, O.data + lo,
                           min(chunk, n - lo), flr, mom, ommom, wd, has_wd)


# ---------------------------------------------------------------- convolution

def col2im(cols, out, n, h, w, c, k, s):
    """The adjoint of the im2col window view of an NHWC image (see the reference).

    Each output row (b, y) gathers the window entries that read it, so rows
    are independent and the threads never write the same element.
    """
    cdef Array C = _arr("col2im", "cols", cols)
    cdef Array O = _arr("col2im", "out", out)
    dims = [_int("col2im", what, x) for what, x in (("n", n), ("h", h), ("w", w), ("c", c), ("k", k), ("s", s))]
    ho, wo = check_col2im("col2im", C, O, *dims)
    cdef Py_ssize_t cn = dims[0], ch = dims[1], cw = dims[2], cc = dims[3], ck = dims[4], cs = dims[5]
    cdef Py_ssize_t cho = ho, cwo = wo, row
    cdef int nt = _threads_for(C.size + O.size)
    nk_reset_threads()
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for row in range(cn * ch):
                nk_col2im_row(C.data, O.data + row * cw * cc, row // ch, row % ch, cw, cc, ck, cs, cho, cwo)
        else:
            for row in prange(cn * ch, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                nk_col2im_row(C.data, O.data + row * cw * cc, row // ch, row % ch, cw, cc, ck, cs, cho, cwo)


cdef struct _Windows:
    # an NHWC image view and the windows conv_implicit reads from it, each as nseg segments of
    # seglen contiguous floats: its rows, or in planar mode its rows' channels (see nk_window_rows)
    const float *a
    Py_ssize_t sn, sh, sw, sc, h, w, c, k, s, ph, pw, ho, wo, nseg, seglen
    int planar


cdef _Windows _windows_of(str name, Array A, shape, strides, offset, k, s, pad_h, pad_w, ho, wo, c_out,
                          per_pixel, per_tap) except *:
    view = _read_view(name, shape, strides, offset)
    dims = [_int(name, what, x) for what, x in (("k", k), ("s", s), ("pad_h", pad_h), ("pad_w", pad_w),
                                                ("ho", ho), ("wo", wo), ("c_out", c_out))]
    cdef Py_ssize_t total
    cdef Array P = per_pixel[1], T = per_tap[1]
    # the checks in C where all is well; the shared check (and its message) where not
    if not (len(view[0]) == 4 and dims[0] >= 1 and dims[1] >= 1 and min(dims[2:]) >= 0
            and _view_fits(A.size, view[0], view[1], view[2], &total)
            and P.size == view[0][0] * dims[4] * dims[5] * dims[6]
            and T.size == dims[0] * dims[0] * view[0][3] * dims[6]):
        check_conv_implicit(name, A, view, *dims, per_pixel, per_tap)
    n, h, w, c = view[0]
    st = view[1]
    cdef _Windows geo
    geo.a = A.data + <Py_ssize_t>view[2]
    geo.sn, geo.sh, geo.sw, geo.sc = st[0], st[1], st[2], st[3]
    geo.h, geo.w, geo.c = h, w, c
    geo.k, geo.s, geo.ph, geo.pw, geo.ho, geo.wo = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    # an image whose rows are contiguous per channel (an NCHW batch) is read a channel at a time
    geo.planar = geo.sw == 1 and not (geo.sc == 1 and geo.sw == geo.c)
    geo.nseg = geo.k * geo.c if geo.planar else geo.k
    geo.seglen = geo.k if geo.planar else geo.k * geo.c
    return geo


cdef inline Py_ssize_t _tap_row(const _Windows *g, Py_ssize_t seg, Py_ssize_t t) noexcept nogil:
    """The row of the (k*k*c, c_out) weight, (ki*k + kj)*c + ch, that multiplies float t of segment seg."""
    if g.planar:  # seg = ki*c + ch, t = kj
        return ((seg // g.c) * g.k + t) * g.c + seg % g.c
    return seg * g.seglen + t  # seg = ki, t = kj*c + ch


cdef inline void _window_rows(const _Windows *g, Py_ssize_t r0, Py_ssize_t npix, const float *zeros, float *edge,
                              const float **rows) noexcept nogil:
    cdef Py_ssize_t per_image = g.ho * g.wo, b0 = r0 // per_image, b1 = (r0 + npix - 1) // per_image
    if g.sn == g.h * g.w * g.c:  # the images the block reads lie in one span: sweep it in first
        nk_prefetch(g.a + b0 * g.sn, (b1 - b0 + 1) * g.sn)
    nk_window_rows(g.a, g.sn, g.sh, g.sw, g.sc, g.h, g.w, g.c, g.k, g.s, g.ph, g.pw, g.ho, g.wo, g.planar, r0, npix,
                   zeros, edge, rows)


cdef inline Py_ssize_t _conv_block_pixels(const _Windows *g, Py_ssize_t floats, int multiple) noexcept nogil:
    """Pixels per block: their windows take about ``floats`` (were they all copied), a multiple of ``multiple``."""
    cdef Py_ssize_t npix = floats // (g.k * g.k * g.c if g.c > 0 else 1) // multiple * multiple
    return npix if npix > multiple else multiple


cdef void _conv_implicit_block(const nk_gemm_kernel *kern, const _Windows *g, const float *Wp, float *O,
                               Py_ssize_t co, Py_ssize_t m, Py_ssize_t npix, Py_ssize_t blk, const float *zeros,
                               float *edge, const float **rows) noexcept nogil:
    """Output rows blk * npix .. of O (m x co) by kern.conv, a tile of cmr pixels by a strip of cnr channels at a time."""
    cdef Py_ssize_t r0 = blk * npix, rows_here = npix if npix < m - r0 else m - r0, i, j
    cdef Py_ssize_t width = g.k * g.k * g.c, CMR = kern.cmr, CNR = kern.cnr
    _window_rows(g, r0, rows_here, zeros, edge, rows)
    cdef nk_conv_fn conv
    i = 0
    while i < rows_here:
        j = 0
        while j < co:
            conv = kern.conv1 if co - j <= CNR // 2 else kern.conv
            conv(g.nseg, g.seglen, rows + i * g.nseg, Wp + j * width, CNR, O + (r0 + i) * co + j, co,
                 CMR if CMR < rows_here - i else rows_here - i, CNR if CNR < co - j else co - j)
            j += CNR
        i += CMR


def conv_implicit(a, shape, strides, offset, w, out, k, s, pad_h, pad_w, ho, wo, c_out):
    """out = X @ w, X the im2col matrix of an NHWC image view (see the reference), never built:
    the convolution kernel (kern.conv) reads each pixel's window where it lies in the image,
    through a table of pointers to the window's segments (its k rows of k * c floats in an NHWC
    image; of an NCHW batch seen as NHWC, each row's k floats per channel); only segments cut by
    the image's edge, or all of them in a view that is neither, are gathered into a per-thread
    buffer first. Neither X (4.8 MB for ResNet9's first layer) nor a padded or transposed copy of
    the image is made."""
    cdef Array A = _arr("conv_implicit", "a", a)
    cdef Array W = _arr("conv_implicit", "w", w)
    cdef Array O = _arr("conv_implicit", "out", out)
    cdef _Windows geo = _windows_of("conv_implicit", A, shape, strides, offset, k, s, pad_h, pad_w, ho, wo, c_out,
                                    ("out", O), ("w", W))
    cdef Py_ssize_t co = c_out, kc = geo.k * geo.c, width = geo.k * kc, m = shape[0] * geo.ho * geo.wo
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef Py_ssize_t npix, nblocks, per, blk
    if m == 0 or co == 0:
        return
    if width == 0:
        fill(O, 0.0)
        return
    npix = _conv_block_pixels(&geo, CONV_IMPLICIT_BLOCK, kern.cmr)
    nblocks = (m + npix - 1) // npix
    cdef int nt = _threads_for(2 * m * width * co // 64), tid
    if nt > nblocks:
        nt = <int>nblocks
    per = npix * width + npix * geo.nseg * 2  # the edge segments, and the table (a pointer is two floats)
    cdef float *Wp = <float *>nk_aligned_alloc(width * ((co + kern.cnr - 1) // kern.cnr) * kern.cnr * sizeof(float))
    cdef float *Wt = <float *>nk_aligned_alloc(width * co * sizeof(float)) if geo.planar else NULL
    cdef float *zeros = <float *>nk_aligned_alloc(kc * sizeof(float))
    cdef float *buf = <float *>nk_aligned_alloc(nt * per * sizeof(float))
    cdef Py_ssize_t seg, t
    if Wp == NULL or zeros == NULL or buf == NULL or (geo.planar and Wt == NULL):
        free(Wp)
        free(Wt)
        free(zeros)
        free(buf)
        raise MemoryError("conv_implicit: cannot allocate block buffers")
    nk_reset_threads()
    with nogil:
        memset(zeros, 0, kc * sizeof(float))
        if geo.planar:  # the weight's rows in the order of the segments' floats
            for seg in range(geo.nseg):
                for t in range(geo.seglen):
                    memcpy(Wt + (seg * geo.seglen + t) * co, W.data + _tap_row(&geo, seg, t) * co, co * sizeof(float))
        nk_pack_b(Wt if geo.planar else W.data, co, width, 0, co, kern.cnr, Wp)
        if nt == 1:
            nk_note_thread(0)
            for blk in range(nblocks):
                _conv_implicit_block(kern, &geo, Wp, O.data, co, m, npix, blk, zeros, buf,
                                     <const float **>(buf + npix * width))
        else:
            for blk in prange(nblocks, num_threads=nt, schedule="static"):
                tid = threadid()
                nk_note_thread(tid)
                _conv_implicit_block(kern, &geo, Wp, O.data, co, m, npix, blk, zeros, buf + tid * per,
                                     <const float **>(buf + tid * per + npix * width))
    free(Wp)
    free(Wt)
    free(zeros)
    free(buf)


cdef void _conv_implicit_grad_block(const nk_gemm_kernel *kern, const _Windows *g, const float *G, Py_ssize_t co,
                                    Py_ssize_t m, Py_ssize_t npix, Py_ssize_t blk, const float *zeros, float *S,
                                    Py_ssize_t lds, float *Gp, float *edge, const float **rows) noexcept nogil:
    """S (k*k*c x lds, in the segments' order) += (the windows of block blk's pixels)^T @ (their rows
    of G), by kern.convw: a tile of cmr floats of one segment by a strip of cnr channels at a time,
    over all the block's pixels."""
    cdef Py_ssize_t r0 = blk * npix, n = npix if npix < m - r0 else m - r0, seg, t, j
    cdef Py_ssize_t L = g.seglen, CMR = kern.cmr, CNR = kern.cnr
    _window_rows(g, r0, n, zeros, edge, rows)
    nk_pack_b(G + r0 * co, co, n, 0, co, <int>CNR, Gp)  # strip j of the block's g at Gp + j * n
    cdef nk_convw_fn convw
    for seg in range(g.nseg):
        t = 0
        while t < L:
            j = 0
            while j < co:
                convw = kern.convw1 if co - j <= CNR // 2 else kern.convw
                convw(n, rows + seg, g.nseg, t, Gp + j * n, CNR, S + (seg * L + t) * lds + j, lds,
                      CMR if CMR < L - t else L - t, CNR if CNR < co - j else co - j)
                j += CNR
            t += CMR


def conv_implicit_weight_grad(a, shape, strides, offset, g, out, k, s, pad_h, pad_w, ho, wo, c_out):
    """out = X^T @ g, X the im2col matrix of conv_implicit, never built: the threads split the
    pixels; for each block of them, the weight-gradient kernel (kern.convw) reads their windows
    through a segment table as conv_implicit does and adds (windows)^T @ g into the thread's own
    (k*k*c, c_out) sum; the sums are added into out at the end."""
    cdef Array A = _arr("conv_implicit_weight_grad", "a", a)
    cdef Array G = _arr("conv_implicit_weight_grad", "g", g)
    cdef Array O = _arr("conv_implicit_weight_grad", "out", out)
    cdef _Windows geo = _windows_of("conv_implicit_weight_grad", A, shape, strides, offset, k, s, pad_h, pad_w, ho,
                                    wo, c_out, ("g", G), ("out", O))
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef Py_ssize_t co = c_out, kc = geo.k * geo.c, width = geo.k * kc, m = shape[0] * geo.ho * geo.wo
    cdef Py_ssize_t lds = (co + kern.cnr - 1) // kern.cnr * kern.cnr, size = width * lds
    cdef Py_ssize_t npix, nblocks, per, blk, i, t, seg
    cdef int tid
    if width * co == 0:
        return
    if m == 0:
        fill(O, 0.0)
        return
    npix = _conv_block_pixels(&geo, GEMM_KSPLIT_BLOCK_B, 16)
    nblocks = (m + npix - 1) // npix
    cdef int nt = _threads_for(2 * m * width * co // 64)
    if nt > nblocks:
        nt = <int>nblocks
    # per thread: its sum, the block's g in strips, the edge segments, the segment table
    per = size + npix * lds + npix * width + npix * geo.nseg * 2
    cdef float *zeros = <float *>nk_aligned_alloc(kc * sizeof(float))
    cdef float *buf = <float *>nk_aligned_alloc(nt * per * sizeof(float))
    if zeros == NULL or buf == NULL:
        free(zeros)
        free(buf)
        raise MemoryError("conv_implicit_weight_grad: cannot allocate block buffers")
    nk_reset_threads()
    with nogil:
        memset(zeros, 0, kc * sizeof(float))
        for tid in range(nt):
            memset(buf + tid * per, 0, size * sizeof(float))
        if nt == 1:
            nk_note_thread(0)
            for blk in range(nblocks):
                _conv_implicit_grad_block(kern, &geo, G.data, co, m, npix, blk, zeros, buf, lds, buf + size,
                                          buf + size + npix * lds,
                                          <const float **>(buf + size + npix * lds + npix * width))
        else:
            for blk in prange(nblocks, num_threads=nt, schedule="static"):
                tid = threadid()
                nk_note_thread(tid)
                _conv_implicit_grad_block(kern, &geo, G.data, co, m, npix, blk, zeros, buf + tid * per, lds,
                                          buf + tid * per + size, buf + tid * per + size + npix * lds,
                                          <const float **>(buf + tid * per + size + npix * lds + npix * width))
        for tid in range(1, nt):
            for i in range(size):
                buf[i] += buf[tid * per + i]
        for seg in range(geo.nseg):
            for t in range(geo.seglen):
                memcpy(O.data + _tap_row(&geo, seg, t) * co, buf + (seg * geo.seglen + t) * lds, co * sizeof(float))
    free(zeros)
    free(buf)


def winograd_input(a, out, n, h, w, c):
    """The transformed 4x4 tiles of a 3x3 convolution's input (see the reference); one tile per
    iteration, so threads write disjoint columns of the 16 output planes."""
    cdef Array A = _arr("winograd_input", "a", a)
    cdef Array O = _arr("winograd_input", "out", out)
    dims = [_int("winograd_input", what, x) for what, x in (("n", n), ("h", h), ("w", w), ("c", c))]
    th, tw = check_winograd_input("winograd_input", A, O, *dims)
    cdef Py_ssize_t ch = dims[1], cw = dims[2], cc = dims[3], cth = th, ctw = tw
    cdef Py_ssize_t tiles = dims[0] * th * tw, t
    cdef int nt = _threads_for(O.size)
    nk_reset_threads()
    with nogil:
        for t in prange(tiles, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_winograd_input_tile(A.data, O.data + t * cc, tiles * cc, t, cth, ctw, ch, cw, cc)


def winograd_output(m, out, n, ho, wo, c):
    """The 2x2 output blocks of a 3x3 convolution from its 16 tile products (see the reference)."""
    cdef Array M = _arr("winograd_output", "m", m)
    cdef Array O = _arr("winograd_output", "out", out)
    dims = [_int("winograd_output", what, x) for what, x in (("n", n), ("ho", ho), ("wo", wo), ("c", c))]
    th, tw = check_winograd_output("winograd_output", M, O, *dims)
    cdef Py_ssize_t cho = dims[1], cwo = dims[2], cc = dims[3], cth = th, ctw = tw
    cdef Py_ssize_t tiles = dims[0] * th * tw, t
    cdef int nt = _threads_for(M.size)
    nk_reset_threads()
    with nogil:
        for t in prange(tiles, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_winograd_output_tile(M.data + t * cc, tiles * cc, O.data, t, cth, ctw, cho, cwo, cc)


cdef Py_ssize_t _winograd_block(Py_ssize_t tb, Py_ssize_t tiles, int nt):
    """Tiles per block: at most tb, few enough that every thread gets a block, a multiple of 4."""
    cdef Py_ssize_t share = (tiles + nt - 1) // nt
    if tb > share:
        tb = share
    return 4 if tb < 4 else tb // 4 * 4


def winograd_conv3x3(a, u, out, n, h, w, c_in, c_out):
    """The stride-1 3x3 convolution of an image by its transformed kernel (see the reference),
    a block of tiles at a time: each thread transforms WINOGRAD_BLOCK_FLOATS worth of tiles,
    runs their 16 products and the output transform while the block is in its L2, so the
    transformed tiles and products never travel to memory and back."""
    cdef Array A = _arr("winograd_conv3x3", "a", a)
    cdef Array U = _arr("winograd_conv3x3", "u", u)
    cdef Array O = _arr("winograd_conv3x3", "out", out)
    dims = [_int("winograd_conv3x3", what, x)
            for what, x in (("n", n), ("h", h), ("w", w), ("c_in", c_in), ("c_out", c_out))]
    th, tw = check_winograd_conv("winograd_conv3x3", A, U, O, *dims)
    cdef Py_ssize_t ch = dims[1], cw = dims[2], ci = dims[3], co = dims[4], cth = th, ctw = tw
    cdef Py_ssize_t tiles = dims[0] * th * tw, tb, nblocks, blk, t0, nb, j, t, q
    if tiles == 0 or co == 0:
        return
    cdef int nt = _threads_for(2 * 16 * tiles * ci * co // 64), err = 0
    # the block's transformed tiles and products take WINOGRAD_BLOCK_FLOATS
    tb = _winograd_block(WINOGRAD_BLOCK_FLOATS // (16 * (ci + co)), tiles, nt)
    nblocks = (tiles + tb - 1) // tb
    if nt > nblocks:
        nt = <int>nblocks
    cdef Py_ssize_t per = 16 * tb * (ci + co)
    cdef float *buf = <float *>nk_aligned_alloc(nt * per * sizeof(float))
    cdef float *V
    cdef float *M
    if buf == NULL:
        raise MemoryError("winograd_conv3x3: cannot allocate tile buffers")
    nk_reset_threads()
    with nogil:
        for blk in prange(nblocks, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            V = buf + threadid() * per
            M = V + 16 * tb * ci
            t0 = blk * tb
            nb = tb if tb < tiles - t0 else tiles - t0
            for j in range(nb):
                t = t0 + j
                nk_winograd_input_tile(A.data, V + j * ci, tb * ci, t, cth, ctw, ch, cw, ci)
            for q in range(16):
                err += _gemm(V + q * tb * ci, U.data + q * ci * co, M + q * tb * co, nb, ci, co, 1)
            for j in range(nb):
                t = t0 + j
                nk_winograd_output_tile(M + j * co, tb * co, O.data, t, cth, ctw, ch - 2, cw - 2, co)
    free(buf)
    if err:
        raise MemoryError("winograd_conv3x3: cannot allocate packing buffers")


def winograd_weight_grad(a, g, out, n, h, w, c_in, c_out):
    """The weight gradient of a stride-1 3x3 convolution (see the reference). Each thread sums
    the 16 tile products of its blocks of tiles (input and gradient tiles transformed while the
    block is in its L2) into its own 16 x c_in x c_out block; the blocks are added and
    transformed to the 3 x 3 kernel at the end."""
    cdef Array A = _arr("winograd_weight_grad", "a", a)
    cdef Array G = _arr("winograd_weight_grad", "g", g)
    cdef Array O = _arr("winograd_weight_grad", "out", out)
    dims = [_int("winograd_weight_grad", what, x)
            for what, x in (("n", n), ("h", h), ("w", w), ("c_in", c_in), ("c_out", c_out))]
    th, tw = check_winograd_weight_grad("winograd_weight_grad", A, G, O, *dims)
    cdef Py_ssize_t ch = dims[1], cw = dims[2], ci = dims[3], co = dims[4], cth = th, ctw = tw
    cdef Py_ssize_t tiles = dims[0] * th * tw, pairs = ci * co, tb, nblocks, blk, t0, nb, j, t, q, i
    if pairs == 0:
        return
    cdef int nt = _threads_for(2 * 16 * tiles * pairs // 64), err = 0, tid
    # blocks 4x as deep as the convolution's: each block's 16 products are as deep as it is
    # tall, and shallow products do not repay the direct kernel's gathering of V's columns
    tb = _winograd_block(4 * WINOGRAD_BLOCK_FLOATS // (16 * (ci + co)), tiles, nt)
    nblocks = (tiles + tb - 1) // tb
    if nt > nblocks:
        nt = <int>(nblocks if nblocks > 0 else 1)
    # per thread: its 16 sums (c_in x c_out each), one block of input and gradient tiles, one product
    cdef Py_ssize_t per = 16 * pairs + 16 * tb * (ci + co) + pairs
    cdef float *buf = <float *>nk_aligned_alloc(nt * per * sizeof(float))
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef float *S
    cdef float *V
    cdef float *E
    cdef float *P
    if buf == NULL:
        raise MemoryError("winograd_weight_grad: cannot allocate tile buffers")
    nk_reset_threads()
    with nogil:
        memset(buf, 0, nt * per * sizeof(float))
        for blk in prange(nblocks, num_threads=nt, schedule="static"):
            tid = threadid()
            nk_note_thread(tid)
            S = buf + tid * per
            V = S + 16 * pairs
            E = V + 16 * tb * ci
            P = E + 16 * tb * co
            t0 = blk * tb
            nb = tb if tb < tiles - t0 else tiles - t0
            for j in range(nb):
                t = t0 + j
                nk_winograd_input_tile(A.data, V + j * ci, tb * ci, t, cth, ctw, ch, cw, ci)
                nk_winograd_grad_tile(G.data, E + j * co, tb * co, t, cth, ctw, ch - 2, cw - 2, co)
            for q in range(16):
                # P (c_in, c_out) = V[q]^T @ E[q]: V[q] (nb, c_in) read as its transpose
                err += _gemm_direct(kern, V + q * tb * ci, 1, ci, E + q * tb * co, False, P, ci, nb, co, 1)
                for i in range(pairs):
                    S[q * pairs + i] += P[i]
        for tid in range(1, nt):
            for i in range(16 * pairs):
                buf[i] += buf[tid * per + i]
        nk_winograd_weight_output(buf, O.data, pairs)
    free(buf)
    if err:
        raise MemoryError("winograd_weight_grad: cannot allocate packing buffers")


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
    cdef int nt = _threads_for(cr * cc * 4)
    if nt > cr:
        nt = <int>cr if cr > 0 else 1
    nk_reset_threads()
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
    cdef int nt = _threads_for(cr * cc * 3)
    nk_reset_threads()
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
    cdef int nt = _threads_for(cr * cc * 4)
    nk_reset_threads()
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
    cdef int nt = _threads_for(cr * cc * 2)
    nk_reset_threads()
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            for r in range(cr):
                nk_softmax_grad_row(Y.data + r * cc, G.data + r * cc, O.data + r * cc, cc)
        else:
            for r in prange(cr, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                nk_softmax_grad_row(Y.data + r * cc, G.data + r * cc, O.data + r * cc, cc)


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


cdef inline Py_ssize_t _chunk(Py_ssize_t rows, int nt) noexcept nogil:
    return (rows + nt - 1) // nt


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
    step = _chunk(cr, nt)
    nk_reset_threads()
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
    cdef Py_ssize_t cr = rows, cc = cols, t, step
    if not (cc >= 1 and A.size == cr * cc and O.size == cr * cc and Bs.size == cc):
        check_bias_add("bias_add", rows, cols, A, Bs, O)
    cdef int nt = _threads_for(cr * cc)
    step = _chunk(cr, nt)
    nk_reset_threads()
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            if t * step < cr:
                nk_bias_add_rows(A.data + t * step * cc, Bs.data, O.data + t * step * cc, min(step, cr - t * step), cc)


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
    cdef int nt = _threads_for(cr * cc), with_relu = bool(relu)
    step = _chunk(cr, nt)
    nk_reset_threads()
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
    step = _chunk(cr, nt)
    nk_reset_threads()
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
    cdef int nt = _threads_for(cr * cc * 3)
    nk_reset_threads()
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
    step = _chunk(cr, nt)
    nk_reset_threads()
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


# ---------------------------------------------------------------- LSTM cell
# The element-wise part of one step (see the reference): a row of gates per task,
# vectorised (nk_lstm_row in ndarray_backend_cpu_vmath.h, for the selected instruction set).

def lstm_cell(z, c0, h, c, rows, hidden):
    """One LSTM step's new cell and hidden state from the gate pre-activations (see the reference)."""
    cdef Array Z = _arr("lstm_cell", "z", z)
    cdef Array C0 = _arr("lstm_cell", "c0", c0)
    cdef Array Hh = _arr("lstm_cell", "h", h)
    cdef Array C = _arr("lstm_cell", "c", c)
    rows, hidden = _check_dims("lstm_cell", (("rows", rows), ("hidden", hidden)))
    cdef Py_ssize_t R = rows, H = hidden, r
    if not (R >= 0 and H >= 1 and Z.size == R * 4 * H and C0.size == R * H and Hh.size == R * H and C.size == R * H):
        check_lstm("lstm_cell", rows, hidden, dict(z=Z), dict(c0=C0, h=Hh, c=C))
    cdef int nt = _threads_for(R * H * 8)  # several transcendental functions per element
    nk_reset_threads()
    with nogil:
        for r in prange(R, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_lstm_row(Z.data + r * 4 * H, C0.data + r * H, Hh.data + r * H, C.data + r * H, H)


def lstm_cell_backward(z, c0, dh, dc, dz, dc0, rows, hidden):
    """The adjoints of lstm_cell's inputs from those of its outputs (see the reference)."""
    cdef Array Z = _arr("lstm_cell_backward", "z", z)
    cdef Array C0 = _arr("lstm_cell_backward", "c0", c0)
    cdef Array DH = _arr("lstm_cell_backward", "dh", dh)
    cdef Array DC = _arr("lstm_cell_backward", "dc", dc)
    cdef Array DZ = _arr("lstm_cell_backward", "dz", dz)
    cdef Array DC0 = _arr("lstm_cell_backward", "dc0", dc0)
    rows, hidden = _check_dims("lstm_cell_backward", (("rows", rows), ("hidden", hidden)))
    cdef Py_ssize_t R = rows, H = hidden, r
    if not (R >= 0 and H >= 1 and Z.size == R * 4 * H and DZ.size == R * 4 * H and C0.size == R * H
            and DH.size == R * H and DC.size == R * H and DC0.size == R * H):
        check_lstm("lstm_cell_backward", rows, hidden, dict(z=Z, dz=DZ), dict(c0=C0, dh=DH, dc=DC, dc0=DC0))
    cdef int nt = _threads_for(R * H * 12)
    nk_reset_threads()
    with nogil:
        for r in prange(R, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_lstm_row_backward(Z.data + r * 4 * H, C0.data + r * H, DH.data + r * H, DC.data + r * H,
                                 DZ.data + r * 4 * H, DC0.data + r * H, H)
