# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython + OpenMP backend: the flat kernel table of ``ndarray_backend_numpy``, in C.

Every function here has the same name, arguments, meaning and error
messages as in the numpy reference backend, which defines them. The split of
labour:

* this module (its kernels in ``cpu/*.pxi``, one file per family) checks
  arguments at the Python boundary (with the shared ``backend_checks``, so every
  backend raises the same ``ValueError``) and then, without the GIL, cuts the
  work into chunks run by OpenMP threads (``prange``);
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
    check_embedding,
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
    void nk_rms_row(const float *x, const float *w, float *out, Py_ssize_t n, double eps, float *invrms)
    void nk_rms_grad_row(const float *x, const float *dy, const float *w, float invrms, float *dx, Py_ssize_t n,
                         double *dw)
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

cdef extern from "ndarray_backend_cpu_blas.h" nogil:
    size_t nk_blas_threads_address()
    long nk_blas_threads_calls()

cdef extern from "ndarray_backend_cpu_gemm.h" nogil:
    ctypedef void (*nk_macro_fn)(Py_ssize_t mc, Py_ssize_t nc, Py_ssize_t kc, const float *Ap,
                                 const float *Bp, float *C, Py_ssize_t ldc, int add,
                                 const float *bias) noexcept nogil
    ctypedef void (*nk_direct_fn)(Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, const float *A, Py_ssize_t ars,
                                  Py_ssize_t acs, const float *B, const float *Bp, Py_ssize_t kd,
                                  float *C, float *work) noexcept nogil
    ctypedef void (*nk_conv_fn)(Py_ssize_t nseg, Py_ssize_t seglen, const float *const *rows, const float *B,
                                Py_ssize_t ldb, float *C, Py_ssize_t ldc, Py_ssize_t mr, Py_ssize_t nr) noexcept nogil
    ctypedef void (*nk_convw_fn)(Py_ssize_t npix, const float *const *rows, Py_ssize_t nseg, Py_ssize_t off,
                                 const float *G, Py_ssize_t ldg, float *S, Py_ssize_t lds, Py_ssize_t mr,
                                 Py_ssize_t nr) noexcept nogil
    ctypedef struct nk_gemm_kernel:
        const char *name
        int mr, nr
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
    enum:
        NK_DIRECT_GROUP

cdef extern from "ndarray_backend_cpu_scratch.h" nogil:
    void *nk_scratch_alloc(size_t nbytes)
    void nk_scratch_free(void *p)
    void nk_scratch_release_idle()
    size_t nk_scratch_idle_bytes()
    size_t nk_scratch_cap

__device_name__ = "cpu"
__tile_size__ = 8

cdef enum:
    MAX_NDIM = 64
    # Below this much work (elements; flops / MATMUL_FLOPS_PER_ELEMENT for matmul) a kernel runs
    # on one thread.
    PARALLEL_MIN_WORK = 32768
    # A product's flops per element of work: 16 gives two threads from 256k multiply-adds on,
    # low enough that small products (64^3, the MLPResNet's 100x100x50) get a second thread,
    # which repays its wake-up there (bench_backend.py's "(small)" rows, with and without
    # --threads 1; benchmarks/README.md has the figures).
    MATMUL_FLOPS_PER_ELEMENT = 16
    # Tiles of a transpose-like copy are COPY_TILE x COPY_TILE.
    COPY_TILE = 32
    # Below this many multiply-adds the packing costs more than it saves.
    GEMM_SMALL = 4096
    # The direct kernel (kern.direct) reads a row-major A in place. A product whose B has at
    # most this many floats (1 MB, an L2 here) reads B in place too: B stays in L2 while A
    # streams past once.
    # Packing such a B costs more than it saves, from 16x400x100 (an LSTM step) to
    # 16384x576x64 (a 3x3 convolution's im2col product).
    GEMM_DIRECT_B = 1 << 18
    # A product at most this many columns wide with a bigger B packs only B, whole, into
    # column strips (when A has GEMM_DIRECT_PACK_ROWS rows to repay that; fewer read B in
    # place): a weight gradient X^T @ dY, 576 x 16384 @ 16384 x 64, then reads B's strips
    # contiguously instead of striding through a B that has left the cache.
    GEMM_DIRECT_COLS = 512
    GEMM_DIRECT_PACK_ROWS = 64
    # A product at most this many columns wide reads B in place whatever the rows of A (see
    # set_gemm_direct_rows): a convolution's im2col product with 64 output channels.
    GEMM_DIRECT_NARROW = 64
    # A product at least this deep whose B the direct kernel packs into strips (a transposed B,
    # or one over the in-place limit) and whose A is row-major takes it whatever the rows of A
    # (see _direct_fits): the direct kernel keeps C's tile in registers over the whole depth,
    # where the packed one reads and writes C again at every KC slice (the LSTM language
    # model's dY @ W^T, 640 x 10000 @ 10000 x 100: bench_backend.py's "g @ w^T 640x10000x100"
    # row, benchmarks/README.md).
    GEMM_DIRECT_DEEP = 1024
    # A product this deep or deeper, with a transposed A of fewer than GEMM_DIRECT_PACK_ROWS
    # rows (a weight gradient X^T @ dY over a whole batch of pixels), splits its depth among
    # the threads, each summing its share into its own copy of the small output: splitting
    # C's rows instead would leave 16 rows to one thread (the direct kernel gathers a
    # transposed A 16 rows at a time), so only one thread would work (bench_backend.py's
    # "16x8192x147, A = view.T" row is such a product).
    GEMM_KSPLIT_DEPTH = 1024
    # Floats of B per block of the depth-split product's sum (256 KB, well inside an L2), so
    # that a block of B stays in cache while every row of the thread's share of A passes it.
    GEMM_KSPLIT_BLOCK_B = 1 << 16
    # Most floats of B packed at once (256 MB).
    GEMM_PACK_MAX = 1 << 26
    # The packed kernel's last row blocks are cut into this many pieces (see _gemm_packed).
    TAIL_PIECES = 8
    # The fewest floats (1 MB) of a block of the Winograd weight gradient's input and gradient
    # tiles, whose 16 products are as deep as the block is tall: 4x an AMD Zen 3's convolution
    # block, where shallower products lost to the direct kernel's gathering of the tiles'
    # columns, and half an Intel Xeon's 2 MB L2, where 4x its convolution block (4 MB) fell out
    # of L2 (benchmarks/README.md).
    WINOGRAD_DW_FLOATS = 1 << 18

cdef int _num_threads = max(1, openmp.omp_get_max_threads())
cdef Py_ssize_t _direct_b = GEMM_DIRECT_B
cdef Py_ssize_t _direct_rows = 0
cdef int _gemm_index = nk_gemm_best()
# The packed matmul's cache blocks (set_gemm_blocking; cpu_tuning.py picks them per CPU): KC, the
# depth of a packed slice; MC, the most rows of A packed at once; the width of a column band of
# a product with at most MC rows. The convolutions' blocks (set_conv_blocking): the floats of one
# block of Winograd tiles with their 16 products, which stay in a core's L2 while the block is
# transformed, multiplied and transformed back; the floats of windows conv_implicit takes per
# block of pixels (were they all copied: mostly they are read where they lie, through the
# block's segment table). All are set as the module finishes loading (tune_on_load, below).
cdef Py_ssize_t _kc, _mc, _band, _winograd_block_floats, _implicit_block_floats

# One file per family of kernels, as textual includes: they share this module's
# declarations, its state and each other's cdef functions.
include "cpu/threads.pxi"
include "cpu/buffers.pxi"
include "cpu/strided.pxi"
include "cpu/elementwise.pxi"

# ewise_*, scalar_* and the unary kernels: one wrapper each around the helpers
# in cpu/elementwise.pxi, generated from the table in elementwise_table.py.
include "ndarray_backend_cpu_elementwise.pxi"

include "cpu/matmul.pxi"
include "cpu/reduce.pxi"
include "cpu/optim.pxi"
include "cpu/conv.pxi"
include "cpu/norm.pxi"
include "cpu/lstm.pxi"
include "cpu/embedding.pxi"

# The kernel and cache blocks for this CPU (cpu_tuning.py); numpy's OpenBLAS on this module's
# threads, and one thread in a forked child (blas_sharing.py).
from .cpu_tuning import tune_on_load as _tune_on_load
from .blas_sharing import share_on_load as _share_on_load
_tune_on_load()
_share_on_load()
