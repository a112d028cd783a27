# Convolution: col2im, the implicit-GEMM kernels that read windows in place, and Winograd F(2x2, 3x3).
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

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
    cdef int nt = _team(C.size + O.size)
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
    npix = _conv_block_pixels(&geo, _implicit_block_floats, kern.cmr)
    nblocks = (m + npix - 1) // npix
    cdef int nt = _threads_for(2 * m * width * co // 64), tid
    if nt > nblocks:
        nt = <int>nblocks
    per = npix * width + npix * geo.nseg * 2  # the edge segments, and the table (a pointer is two floats)
    cdef float *Wp = <float *>nk_scratch_alloc(width * ((co + kern.cnr - 1) // kern.cnr) * kern.cnr * sizeof(float))
    cdef float *Wt = <float *>nk_scratch_alloc(width * co * sizeof(float)) if geo.planar else NULL
    cdef float *zeros = <float *>nk_scratch_alloc(kc * sizeof(float))
    cdef float *buf = <float *>nk_scratch_alloc(nt * per * sizeof(float))
    cdef Py_ssize_t seg, t
    if Wp == NULL or zeros == NULL or buf == NULL or (geo.planar and Wt == NULL):
        nk_scratch_free(Wp)
        nk_scratch_free(Wt)
        nk_scratch_free(zeros)
        nk_scratch_free(buf)
        raise MemoryError("conv_implicit: cannot allocate block buffers")
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
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
            # dynamic: each block writes its own pixels, so a thread that falls behind (another
            # process on its core) takes fewer blocks, and the result does not depend on who took
            # which; the gradients below sum per thread, so they keep a fixed split
            for blk in prange(nblocks, num_threads=nt, schedule="dynamic"):
                tid = threadid()
                nk_note_thread(tid)
                _conv_implicit_block(kern, &geo, Wp, O.data, co, m, npix, blk, zeros, buf + tid * per,
                                     <const float **>(buf + tid * per + npix * width))
    nk_scratch_free(Wp)
    nk_scratch_free(Wt)
    nk_scratch_free(zeros)
    nk_scratch_free(buf)


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
    cdef float *zeros = <float *>nk_scratch_alloc(kc * sizeof(float))
    cdef float *buf = <float *>nk_scratch_alloc(nt * per * sizeof(float))
    if zeros == NULL or buf == NULL:
        nk_scratch_free(zeros)
        nk_scratch_free(buf)
        raise MemoryError("conv_implicit_weight_grad: cannot allocate block buffers")
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
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
    nk_scratch_free(zeros)
    nk_scratch_free(buf)


def winograd_input(a, out, n, h, w, c):
    """The transformed 4x4 tiles of a 3x3 convolution's input (see the reference); one tile per
    iteration, so threads write disjoint columns of the 16 output planes."""
    cdef Array A = _arr("winograd_input", "a", a)
    cdef Array O = _arr("winograd_input", "out", out)
    dims = [_int("winograd_input", what, x) for what, x in (("n", n), ("h", h), ("w", w), ("c", c))]
    th, tw = check_winograd_input("winograd_input", A, O, *dims)
    cdef Py_ssize_t ch = dims[1], cw = dims[2], cc = dims[3], cth = th, ctw = tw
    cdef Py_ssize_t tiles = dims[0] * th * tw, t
    cdef int nt = _team(O.size)
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
    cdef int nt = _team(M.size)
    with nogil:
        for t in prange(tiles, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_winograd_output_tile(M.data + t * cc, tiles * cc, O.data, t, cth, ctw, cho, cwo, cc)


cdef Py_ssize_t _winograd_block(Py_ssize_t tb, Py_ssize_t tiles, int nt):
    """Tiles per block: at most tb, few enough that every thread gets a block, a multiple of 4."""
    cdef Py_ssize_t share = _chunks(tiles, nt, 1)
    if tb > share:
        tb = share
    return 4 if tb < 4 else tb // 4 * 4


def winograd_conv3x3(a, u, out, n, h, w, c_in, c_out):
    """The stride-1 3x3 convolution of an image by its transformed kernel (see the reference),
    a block of tiles at a time (conv_blocking()'s winograd floats): each thread transforms a
    block's tiles, runs their 16 products and the output transform while the block is in its
    L2, so the transformed tiles and products never travel to memory and back."""
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
    # the block's transformed tiles and products take conv_blocking()'s winograd floats
    tb = _winograd_block(_winograd_block_floats // (16 * (ci + co)), tiles, nt)
    nblocks = (tiles + tb - 1) // tb
    if nt > nblocks:
        nt = <int>nblocks
    cdef Py_ssize_t per = 16 * tb * (ci + co)
    cdef float *buf = <float *>nk_scratch_alloc(nt * per * sizeof(float))
    cdef float *V
    cdef float *M
    if buf == NULL:
        raise MemoryError("winograd_conv3x3: cannot allocate tile buffers")
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
    with nogil:
        for blk in prange(nblocks, num_threads=nt, schedule="dynamic"):  # as conv_implicit's blocks
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
    nk_scratch_free(buf)
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
    # blocks of WINOGRAD_DW_FLOATS, or the convolution's if larger (each block's 16 products
    # are as deep as the block is tall: see WINOGRAD_DW_FLOATS)
    tb = _winograd_block(max(_winograd_block_floats, WINOGRAD_DW_FLOATS) // (16 * (ci + co)), tiles, nt)
    nblocks = (tiles + tb - 1) // tb
    if nt > nblocks:
        nt = <int>(nblocks if nblocks > 0 else 1)
    # per thread: its 16 sums (c_in x c_out each), one block of input and gradient tiles, one product
    cdef Py_ssize_t per = 16 * pairs + 16 * tb * (ci + co) + pairs
    cdef float *buf = <float *>nk_scratch_alloc(nt * per * sizeof(float))
    cdef const nk_gemm_kernel *kern = &nk_gemm_kernels[_gemm_index]
    cdef float *S
    cdef float *V
    cdef float *E
    cdef float *P
    if buf == NULL:
        raise MemoryError("winograd_weight_grad: cannot allocate tile buffers")
    nk_reset_threads()  # not at _threads_for: only once nothing left can raise
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
    nk_scratch_free(buf)
    if err:
        raise MemoryError("winograd_weight_grad: cannot allocate packing buffers")
