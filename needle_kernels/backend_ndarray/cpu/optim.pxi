# Optimizer steps, element-wise over parameters and their moment buffers.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

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
    cdef int nt = _team(n * 4), c  # about four element-wise kernels' worth of memory traffic
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            nk_adam(P.data, G.data, M.data, V.data, O.data, n, b1, omb1, b2, omb2, wd, has_wd, step, inv_c2, ep)
        else:
            chunk = _chunks(n, nt, 16)
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
    cdef int nt = _team(total * 4), c  # as adam_update: four element-wise kernels' traffic
    with nogil:
        chunk = _chunks(total, nt, 16)
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
    cdef int nt = _team(n * 2), c
    with nogil:
        if nt == 1:
            nk_note_thread(0)
            nk_sgd(P.data, G.data, ud, O.data, n, flr, mom, ommom, wd, has_wd)
        else:
            chunk = _chunks(n, nt, 16)
            for c in prange(nt, num_threads=nt, schedule="static"):
                nk_note_thread(threadid())
                lo = c * chunk
                if lo < n:
                    nk_sgd(P.data + lo, G.data + lo, NULL if ud == NULL else ud + lo, O.data + lo,
                           min(chunk, n - lo), flr, mom, ommom, wd, has_wd)
