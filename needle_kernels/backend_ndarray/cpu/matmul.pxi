# The GEMM driver: blocking, packing and the thread split around the micro-kernels of
# ndarray_backend_cpu_gemm.h.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

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


cdef inline void _pack_b(const nk_gemm_kernel *kern, const float *B, bint bt, Py_ssize_t n, Py_ssize_t p,
                         Py_ssize_t pc, Py_ssize_t kcur, Py_ssize_t jc, Py_ssize_t j0, Py_ssize_t j1,
                         float *Bp) noexcept nogil:
    """Pack rows pc..pc+kcur, columns jc+j0..jc+j1 of B into NR-column panels, the panel of column
    jc+j0 at Bp + j0 * kcur (j0 a multiple of NR): B row-major (n, p), or (bt) stored as the
    row-major (p, n) array of its transpose, read as it is (a backward pass's dY @ W^T)."""
    if bt:  # rows of B^T hold B's columns: B's column panels are nk_pack_a's row panels of B^T
        nk_pack_a(B + (jc + j0) * n + pc, n, j1 - j0, kcur, kern.nr, Bp + j0 * kcur)
    else:
        nk_pack_b(B + pc * p + jc, p, kcur, j0, j1, kern.nr, Bp)


cdef inline void _gemm_rows(const nk_gemm_kernel *kern, const float *A, bint at, Py_ssize_t m, float *C, float *Ap,
                            const float *Bp, Py_ssize_t i0, Py_ssize_t mcur, Py_ssize_t n, Py_ssize_t p,
                            Py_ssize_t kc, Py_ssize_t nc, Py_ssize_t jc, Py_ssize_t ncur,
                            const float *bias) noexcept nogil:
    """Rows i0..i0+mcur of C[:, jc:jc+ncur] = A @ B (+ bias, when not NULL), one KC slice at a
    time, from the packed B."""
    cdef Py_ssize_t pc = 0, kcur
    while pc < n:
        kcur = kc if kc < n - pc else n - pc
        _pack_a(kern, A, at, m, n, i0, mcur, pc, kcur, Ap)
        kern.macro(mcur, ncur, kcur, Ap, Bp + pc * nc, C + i0 * p + jc, p, pc > 0, _columns(bias, jc))
        pc += kc


cdef void _gemm_band(const nk_gemm_kernel *kern, const float *A, bint at, const float *B, bint bt, float *C,
                     Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, Py_ssize_t kc, Py_ssize_t j0, Py_ssize_t ncur,
                     float *Ap, float *Bp, const float *bias) noexcept nogil:
    """C[:, j0:j0+ncur] = A @ B[:, j0:j0+ncur] (+ bias) for m <= MC rows, one KC slice at a time:
    the slice of B is packed and used at once, while it is in cache."""
    cdef Py_ssize_t pc = 0, kcur
    while pc < n:
        kcur = kc if kc < n - pc else n - pc
        _pack_b(kern, B, bt, n, p, pc, kcur, j0, 0, ncur, Bp)
        _pack_a(kern, A, at, m, n, 0, m, pc, kcur, Ap)
        kern.macro(m, ncur, kcur, Ap, Bp, C + j0, p, pc > 0, _columns(bias, j0))
        pc += kc


cdef int _gemm_few_rows(const nk_gemm_kernel *kern, const float *A, bint at, const float *B, bint bt, float *C,
                        Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, int nt, const float *bias) noexcept nogil:
    """C = A @ B when A has at most MC rows (a weight gradient X^T @ G, a small batch times a
    wide layer): the threads split the columns of C into bands instead of its few rows, so each
    reads its band of B once; splitting rows would have every thread stream all of B."""
    cdef int MR = kern.mr, NR = kern.nr
    cdef Py_ssize_t kc = _kc if _kc < n else n
    cdef Py_ssize_t npan = (p + NR - 1) // NR, nbands, bandw, jb, per, apsize
    # bands of at most _band columns (a KC x band slice of B stays in L2), at least one per thread
    nbands = (p + _band - 1) // _band
    if nbands < nt:
        nbands = nt
    bandw = (npan + nbands - 1) // nbands * NR
    nbands = (p + bandw - 1) // bandw
    if nbands < nt:
        nt = <int>nbands
    apsize = (m + MR - 1) // MR * MR * kc
    per = apsize + kc * bandw
    cdef float *buf = <float *>nk_scratch_alloc(nt * per * sizeof(float))
    if buf == NULL:
        return -1
    if nt == 1:
        nk_note_thread(0)
        for jb in range(nbands):
            _gemm_band(kern, A, at, B, bt, C, m, n, p, kc, jb * bandw, bandw if bandw < p - jb * bandw else p - jb * bandw,
                       buf, buf + apsize, bias)
    else:
        for jb in prange(nbands, num_threads=nt, schedule="dynamic"):  # as _gemm_packed's row blocks
            nk_note_thread(threadid())
            _gemm_band(kern, A, at, B, bt, C, m, n, p, kc, jb * bandw, bandw if bandw < p - jb * bandw else p - jb * bandw,
                       buf + threadid() * per, buf + threadid() * per + apsize, bias)
    nk_scratch_free(buf)
    return 0


cdef inline bint _packs_b_strips(Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, bint b_trans) noexcept nogil:
    """Whether _gemm_direct packs B whole into column strips before the product (see there);
    _direct_fits' rule for deep products asks the same."""
    return b_trans or (n * p > _direct_b and m >= GEMM_DIRECT_PACK_ROWS)


cdef int _gemm_direct(const nk_gemm_kernel *kern, const float *A, Py_ssize_t ars, Py_ssize_t acs, const float *B,
                      bint b_trans, float *C, Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, int nt) noexcept nogil:
    """C = A @ B by kern.direct, the threads taking contiguous blocks of rows; A's element (i, k)
    is A[i * ars + k * acs], and B is row-major (n, p) or, with b_trans, the row-major (p, n)
    array of its transpose. B is first packed whole into column strips when it is transposed,
    or bigger than the in-place limit with enough rows of A to repay that (a short, deep
    product such as 16 x 8192 @ 8192 x 147 has too few rows to repay packing B). A packed B
    bigger than the in-place limit is taken a block of its depth at a time, each block an
    in-place B's worth of floats, so that the block stays in L2 while all of a thread's rows
    pass it: read whole for every block of rows, the LSTM language model's dY @ W^T (640 x
    10000 @ 10000 x 100, 4 MB of B) came from beyond L2 each time (bench_backend.py's "g @ w^T"
    rows). A row-major A is read in place; a transposed one is gathered 16 rows at a time (see
    nk_direct in the gemm header)."""
    cdef Py_ssize_t per_thread = n * (kern.dnr + kern.dmr + 16), blocks = (m + kern.dmr - 1) // kern.dmr, rows, r0
    cdef Py_ssize_t NR = kern.dnr, npan = (p + NR - 1) // NR, jp, kd = n
    cdef int t
    cdef float *Bp = NULL
    if nt > blocks:
        nt = <int>blocks
    # as even shares of row blocks as can be; whole groups of 16 rows when A is transposed (the
    # kernel gathers a transposed A 16 rows at a time): 100 rows went 64 + 36 that way
    rows = _chunks(blocks, nt, 1) * kern.dmr
    if acs != 1:
        rows = _round_up(rows, 16)
    cdef float *work = <float *>nk_scratch_alloc(nt * per_thread * sizeof(float))
    if work == NULL:
        return -1
    if _packs_b_strips(m, n, p, b_trans):
        Bp = <float *>nk_scratch_alloc(n * npan * NR * sizeof(float))
        if Bp == NULL:
            nk_scratch_free(work)
            return -1
        for jp in prange(npan, num_threads=nt, schedule="static"):
            if b_trans:  # B's column strips are nk_pack_a's row panels of the stored B^T
                nk_pack_a(B + jp * NR * n, n, ((jp + 1) * NR if (jp + 1) * NR < p else p) - jp * NR, n,
                          <int>NR, Bp + jp * NR * n)
            else:
                nk_pack_b(B, p, n, jp * NR, (jp + 1) * NR if (jp + 1) * NR < p else p, <int>NR, Bp)
        if _direct_b > 0 and n * npan * NR > _direct_b:
            kd = max(_direct_b // (npan * NR) // 64 * 64, 64)
    if nt == 1:
        nk_note_thread(0)
        kern.direct(m, n, p, A, ars, acs, B, Bp, kd, C, work)
    else:
        for t in prange(nt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            r0 = t * rows
            if r0 < m:
                kern.direct(rows if rows < m - r0 else m - r0, n, p, A + r0 * ars, ars, acs, B, Bp, kd, C + r0 * p,
                            work + t * per_thread)
    nk_scratch_free(Bp)
    nk_scratch_free(work)
    return 0


cdef int _gemm_direct_ksplit(const nk_gemm_kernel *kern, const float *A, Py_ssize_t ars, Py_ssize_t acs,
                             const float *B, float *C, Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, int nt) noexcept nogil:
    """C = A @ B (B row-major) with the depth n split among nt threads: thread t multiplies
    rows [k0, k1) of B by those columns of A into its own (m, p) block (thread 0's is C),
    then the blocks are summed into C. Each thread goes through its rows of B a block of
    GEMM_KSPLIT_BLOCK_B floats at a time, summing the blocks' products: the direct kernel
    reads B once per 4 rows of A, and a block stays in L2 for all of them, where a whole
    share (a 4.8 MB im2col matrix) was read from memory again for every 4 rows."""
    cdef Py_ssize_t chunk = _chunks(n, nt, 1), k0, kn, kb, kcur, i, size = m * p
    cdef Py_ssize_t depth = GEMM_KSPLIT_BLOCK_B // p if p < GEMM_KSPLIT_BLOCK_B // 64 else 64
    cdef int t, err = 0
    # per thread: its sum (thread 0's is C) and the product of the current block
    cdef float *parts = <float *>nk_scratch_alloc((2 * nt - 1) * size * sizeof(float))
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
    nk_scratch_free(parts)
    return -1 if err else 0


cdef inline bint _direct_fits(Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, bint a_trans, bint b_trans) noexcept nogil:
    # (rows of B a multiple of 4 KB apart fall on the same cache sets when read in place:
    # 2048 x 256 @ 256 x 1024 ran at 0.7x the packed kernel's speed)
    # The row limit is about B read in place; B that _gemm_direct packs into strips is read in
    # order, and a deep enough product repays keeping C's tile in registers over its whole
    # depth, where the packed kernel reads and writes C again at every KC slice. Not with a
    # transposed A, which the direct kernel gathers 16 rows at a time: there packing A wins.
    return (_direct_b > 0 and ((n * p <= _direct_b and p % 1024 != 0) or p <= GEMM_DIRECT_COLS)
            and (_direct_rows == 0 or m < _direct_rows or p <= GEMM_DIRECT_NARROW
                 or (_packs_b_strips(m, n, p, b_trans) and not a_trans and n >= GEMM_DIRECT_DEEP)))


cdef enum:
    PATH_SMALL, PATH_KSPLIT, PATH_DIRECT, PATH_PACKED

GEMM_PATHS = ("small", "ksplit", "direct", "packed")  # gemm_path()'s names, by PATH_* value


cdef inline int _gemm_path(Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, bint a_trans, bint b_trans,
                           int nt) noexcept nogil:
    """The kernel a product of m x n by n x p takes (either operand stored transposed): the one
    rule _gemm_bias and matmul_t follow, and gemm_path() reports."""
    if (a_trans and not b_trans and nt > 1 and m < GEMM_DIRECT_PACK_ROWS and n >= GEMM_KSPLIT_DEPTH
            and n >= 2 * (m + p) and _direct_b > 0):
        return PATH_KSPLIT
    if m * n * p <= GEMM_SMALL:
        return PATH_SMALL
    if _direct_fits(m, n, p, a_trans, b_trans):
        return PATH_DIRECT
    return PATH_PACKED


def gemm_path(m, n, p, trans_a=False, trans_b=False):
    """Which kernel matmul (or matmul_t, with an operand stored transposed) takes for an m x n by
    n x p product on this CPU with the current rule and threads: "small", "ksplit" (a transposed A
    of few rows and great depth, the depth split among the threads), "direct" or "packed"."""
    m, n, p = _check_dims("gemm_path", (("m", m), ("n", n), ("p", p)))
    cdef Py_ssize_t cm = m, cn = n, cp = p
    return GEMM_PATHS[_gemm_path(cm, cn, cp, bool(trans_a), bool(trans_b),
                                 _team(2 * cm * cn * cp // MATMUL_FLOPS_PER_ELEMENT))]


cdef inline int _gemm(const float *A, const float *B, float *C, Py_ssize_t m, Py_ssize_t n, Py_ssize_t p,
                      int nt) noexcept nogil:
    """C (m, p) = A (m, n) @ B (n, p), row-major; returns -1 when out of memory."""
    return _gemm_bias(A, B, NULL, C, m, n, p, nt)


cdef int _gemm_bias(const float *A, const float *B, const float *bias, float *C, Py_ssize_t m, Py_ssize_t n,
                    Py_ssize_t p, int nt) noexcept nogil:
    """C (m, p) = A (m, n) @ B (n, p) (+ bias (p,) on every row, when not NULL), row-major;
    returns -1 when out of memory.

    Goto/BLIS blocking: the threads pack a column block of B together (all
    its KC-deep slices, as NR-column panels), then each takes MC-row blocks,
    packs each KC slice of its rows of A into MR-row panels and runs the
    micro-kernel over them.
    """
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef int err = 0, path
    if m == 0 or p == 0:
        return 0
    path = _gemm_path(m, n, p, False, False, nt)
    if n == 0:
        memset(C, 0, m * p * sizeof(float))
    elif path == PATH_SMALL:
        _gemm_small(A, B, C, m, n, p)
    elif path == PATH_DIRECT:
        err = _gemm_direct(kern, A, n, 1, B, False, C, m, n, p, nt)
    else:
        # the packed kernel adds the bias as it stores each tile of C
        return _gemm_packed(kern, A, False, B, False, C, m, n, p, nt, bias)
    if bias != NULL and err == 0:
        _bias_rows(C, bias, C, m, p, nt)
    return err


cdef inline const float *_columns(const float *bias, Py_ssize_t j) noexcept nogil:
    """The bias of the columns from j on (NULL for none)."""
    return bias + j if bias != NULL else NULL


cdef void _bias_rows(const float *a, const float *bias, float *out, Py_ssize_t m, Py_ssize_t p,
                     int nt) noexcept nogil:
    """out[i, :] = a[i, :] + bias for every row (out may be a), the rows split among nt threads
    (bias_add's loop too)."""
    cdef Py_ssize_t step = _chunks(m, nt, 1)
    cdef int t
    for t in prange(nt, num_threads=nt, schedule="static"):
        nk_note_thread(threadid())
        if t * step < m:
            nk_bias_add_rows(a + t * step * p, bias, out + t * step * p, min(step, m - t * step), p)


cdef int _gemm_packed(const nk_gemm_kernel *kern, const float *A, bint at, const float *B, bint bt, float *C,
                      Py_ssize_t m, Py_ssize_t n, Py_ssize_t p, int nt, const float *bias) noexcept nogil:
    """The packed kernel of _gemm_bias for m, n, p >= 1; A and B row-major, or (at, bt) each
    stored as its transpose."""
    cdef int MR = kern.mr, NR = kern.nr
    cdef Py_ssize_t kc, nc, mc, nb, npan, nslices, jc, pc, ncur, jp, ib, it, nfull, piece, ntasks, r0
    cdef float *Bp
    cdef float *Ap_all
    if m <= _mc:
        return _gemm_few_rows(kern, A, at, B, bt, C, m, n, p, nt, bias)
    kc = _kc if _kc < n else n
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
    # Row blocks: at most _mc rows each, and a multiple of nt of them so
    # every thread gets the same share.
    nb = (m + _mc - 1) // _mc
    if nt > 1:
        nb = _round_up(nb, nt)
    mc = ((m + nb - 1) // nb + MR - 1) // MR * MR
    nb = (m + mc - 1) // mc
    if nb < nt:
        nt = <int>nb
    # The threads take the row blocks as they come free, and the last nt blocks are cut into
    # pieces of an eighth of a block: threads that began together drift apart over a long
    # product (the other processes of a shared machine, one core's slower memory), and whole
    # blocks at the end left one idle for up to a block's time (with 2 threads a 2048 x 2048
    # product has 12 blocks, 6 a thread: up to a sixth of its time; benchmarks/README.md).
    nfull = nb - nt if nt > 1 else nb
    piece = _round_up((mc + TAIL_PIECES - 1) // TAIL_PIECES, MR)
    ntasks = nfull + (m - nfull * mc + piece - 1) // piece
    Bp = <float *>nk_scratch_alloc(n * nc * sizeof(float))
    Ap_all = <float *>nk_scratch_alloc(nt * mc * kc * sizeof(float))
    if Bp == NULL or Ap_all == NULL:
        nk_scratch_free(Bp)
        nk_scratch_free(Ap_all)
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
                _pack_b(kern, B, bt, n, p, pc, kc if kc < n - pc else n - pc, jc, 0, ncur, Bp + pc * nc)
            for ib in range(nb):
                _gemm_rows(kern, A, at, m, C, Ap_all, Bp, ib * mc, mc if mc < m - ib * mc else m - ib * mc,
                           n, p, kc, nc, jc, ncur, bias)
        else:
            with parallel(num_threads=nt):
                for it in prange(nslices * npan, schedule="static"):
                    nk_note_thread(threadid())
                    pc = (it // npan) * kc
                    jp = it % npan
                    _pack_b(kern, B, bt, n, p, pc, kc if kc < n - pc else n - pc, jc, jp * NR,
                            (jp + 1) * NR if (jp + 1) * NR < ncur else ncur, Bp + pc * nc)
                # dynamic: a thread that gets its core back late takes fewer row blocks
                for ib in prange(ntasks, schedule="dynamic"):
                    r0 = ib * mc if ib < nfull else nfull * mc + (ib - nfull) * piece
                    _gemm_rows(kern, A, at, m, C, Ap_all + threadid() * mc * kc, Bp, r0,
                               min(mc if ib < nfull else piece, m - r0), n, p, kc, nc, jc, ncur, bias)
        jc += nc
    nk_scratch_free(Bp)
    nk_scratch_free(Ap_all)
    return 0


def matmul(a, b, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p), all compact row-major."""
    cdef Array A = _arr("matmul", "a", a)
    cdef Array B = _arr("matmul", "b", b)
    cdef Array O = _arr("matmul", "out", out)
    m, n, p = _check_dims("matmul", (("m", m), ("n", n), ("p", p)))
    _check_matmul("matmul", A, B, O, m, n, p)
    cdef Py_ssize_t cm = m, cn = n, cp = p
    cdef int nt = _team(2 * cm * cn * cp // MATMUL_FLOPS_PER_ELEMENT), err
    with nogil:
        err = _gemm(A.data, B.data, O.data, cm, cn, cp, nt)
    if err:
        raise MemoryError("matmul: cannot allocate packing buffers")


def matmul_bias(a, b, bias, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p) + bias (p,) on every row, all compact row-major: a linear
    layer. The packed kernel adds the bias as it stores each tile of out, while the tile is in
    cache; a separate pass would read and write all of out once more."""
    cdef Array A = _arr("matmul_bias", "a", a)
    cdef Array B = _arr("matmul_bias", "b", b)
    cdef Array Bs = _arr("matmul_bias", "bias", bias)
    cdef Array O = _arr("matmul_bias", "out", out)
    m, n, p = _check_dims("matmul_bias", (("m", m), ("n", n), ("p", p)))
    _check_matmul("matmul_bias", A, B, O, m, n, p)
    check_size("matmul_bias", Bs, p, f"bias (p={p})")
    cdef Py_ssize_t cm = m, cn = n, cp = p
    cdef int nt = _team(2 * cm * cn * cp // MATMUL_FLOPS_PER_ELEMENT), err
    with nogil:
        err = _gemm_bias(A.data, B.data, Bs.data, O.data, cm, cn, cp, nt)
    if err:
        raise MemoryError("matmul_bias: cannot allocate packing buffers")


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
    cdef int nt = _team(2 * cm * cn * cp // MATMUL_FLOPS_PER_ELEMENT), err = 0
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef float *At = NULL
    cdef float *Bt = NULL
    cdef int path
    with nogil:
        if not ta and not tb:  # _gemm follows the same rule
            err = _gemm(A.data, B.data, O.data, cm, cn, cp, nt)
        else:
            path = _gemm_path(cm, cn, cp, ta, tb, nt)
            if path == PATH_KSPLIT:
                err = _gemm_direct_ksplit(kern, A.data, 1, cm, B.data, O.data, cm, cn, cp, nt)
            elif path == PATH_DIRECT:
                err = _gemm_direct(kern, A.data, 1 if ta else cn, cm if ta else 1, B.data, tb, O.data, cm, cn, cp, nt)
            elif path == PATH_PACKED:  # the packed kernel packs a transposed A or B as it is
                err = _gemm_packed(kern, A.data, ta, B.data, tb, O.data, cm, cn, cp, nt, NULL)
            else:  # the small kernel takes row-major operands: a transposed copy first
                if ta:
                    At = <float *>nk_scratch_alloc(cm * cn * sizeof(float))
                if tb:
                    Bt = <float *>nk_scratch_alloc(cn * cp * sizeof(float))
                if (ta and At == NULL) or (tb and Bt == NULL):
                    err = -1
                else:
                    if ta:
                        _transpose_into(A.data, At, cn, cm)
                    if tb:
                        _transpose_into(B.data, Bt, cp, cn)
                    err = _gemm(At if ta else A.data, Bt if tb else B.data, O.data, cm, cn, cp, nt)
                nk_scratch_free(At)
                nk_scratch_free(Bt)
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
    cdef int nt = _team(2 * cb * cm * cn * cp // 64), err = 0, e
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
    cdef int nt = _team(2 * m * n * p // 64)
    with nogil:
        for tile in prange(mt * pt, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            i = tile // pt
            j = tile % pt
            memset(O.data + tile * 64, 0, 64 * sizeof(float))
            for k in range(nt_):
                nk_tile_matmul8(A.data + (i * nt_ + k) * 64, B.data + (k * pt + j) * 64, O.data + tile * 64)
