# cython: boundscheck=False, wraparound=False, cdivision=True
"""The softmax regression epoch of hw0 in Cython + OpenMP.

Same arithmetic as ``simple_ml.softmax_regression_epoch``: for each minibatch
``X_b`` (b rows) in order,

    Z = normalize(exp(X_b @ theta))             (b, k), softmax per row
    theta -= lr / b * X_b^T @ (Z - I_y)          (n, k)

The two products are parallelised over independent outputs (rows of Z, then
blocks of rows of the gradient), so no two threads ever write the same
element and no reduction across threads is needed.
"""
import numpy as np

cimport cython
from cython.parallel cimport prange
from libc.math cimport expf


cdef void _epoch(const float[:, ::1] X, const unsigned char[::1] y, float[:, ::1] theta,
                 float lr, Py_ssize_t batch, float[:, ::1] Z, float[:, ::1] G) noexcept nogil:
    cdef Py_ssize_t m = X.shape[0], n = X.shape[1], k = theta.shape[1]
    cdef Py_ssize_t start, b, i, j, c, jb, j0, j1
    cdef Py_ssize_t JB = 32
    cdef Py_ssize_t nblocks = (n + JB - 1) // JB
    cdef float zmax, s, xij, scale
    cdef float* zrow
    cdef float* grow
    cdef const float* trow
    start = 0
    while start < m:
        b = batch if start + batch <= m else m - start
        # Z = softmax(X_b @ theta) - I_y, one row per iteration. Zero inputs
        # (most of an MNIST image is background) are skipped in both products.
        for i in prange(b, schedule="static"):
            for c in range(k):
                Z[i, c] = 0
            zrow = &Z[i, 0]
            for j in range(n):
                xij = X[start + i, j]
                if xij != 0:
                    trow = &theta[j, 0]
                    for c in range(k):
                        zrow[c] += xij * trow[c]
            zmax = Z[i, 0]
            for c in range(1, k):
                if Z[i, c] > zmax:
                    zmax = Z[i, c]
            s = 0
            for c in range(k):
                Z[i, c] = expf(Z[i, c] - zmax)
                s = s + Z[i, c]
            for c in range(k):
                Z[i, c] = Z[i, c] / s
            Z[i, y[start + i]] -= 1
        # theta -= lr / b * X_b^T @ Z. Each iteration owns a block of JB rows of
        # theta and walks the batch row by row, so X is read along its rows
        # (contiguous) rather than down its columns, and the block's gradient
        # (JB x k floats) stays in L1.
        scale = lr / b
        for jb in prange(nblocks, schedule="static"):
            j0 = jb * JB
            j1 = j0 + JB if j0 + JB <= n else n
            for j in range(j0, j1):
                for c in range(k):
                    G[j, c] = 0
            for i in range(b):
                zrow = &Z[i, 0]
                for j in range(j0, j1):
                    xij = X[start + i, j]
                    if xij != 0:
                        grow = &G[j, 0]
                        for c in range(k):
                            grow[c] += xij * zrow[c]
            for j in range(j0, j1):
                for c in range(k):
                    theta[j, c] -= scale * G[j, c]
        start = start + b


def _check(name, a, dtype, ndim):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise ValueError(f"{name} must have dtype {np.dtype(dtype).name}, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")


def softmax_regression_epoch_native(X, y, theta, lr=0.1, batch=100):
    """One epoch of minibatch SGD for softmax regression, updating ``theta`` in place.

    X: float32 (m, n); y: uint8 (m,) with values < k; theta: float32 (n, k),
    C-contiguous and writable. Batches are taken in order without shuffling;
    the last one may be smaller and is averaged over its own size.
    """
    _check("X", X, np.float32, 2)
    _check("y", y, np.uint8, 1)
    _check("theta", theta, np.float32, 2)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows (shape {X.shape}) but y has {y.shape[0]} labels (shape {y.shape})")
    if X.shape[1] != theta.shape[0]:
        raise ValueError(f"X shape {X.shape} and theta shape {theta.shape} do not multiply: {X.shape[1]} != {theta.shape[0]}")
    if theta.shape[1] < 1:
        raise ValueError(f"theta must have at least one column (class), got shape {theta.shape}")
    if not (theta.flags.c_contiguous and theta.flags.writeable):
        raise ValueError("theta must be C-contiguous and writable (it is updated in place)")
    if int(batch) <= 0:
        raise ValueError(f"batch must be > 0, got {batch}")
    if y.size and int(y.max()) >= theta.shape[1]:
        raise ValueError(f"label {int(y.max())} out of range for theta with {theta.shape[1]} classes")
    cdef Py_ssize_t b = min(int(batch), max(X.shape[0], 1))
    Xc = np.ascontiguousarray(X)
    yc = np.ascontiguousarray(y)
    Z = np.empty((b, theta.shape[1]), dtype=np.float32)
    G = np.empty(theta.shape, dtype=np.float32)
    cdef float[:, ::1] theta_v = theta
    cdef const float[:, ::1] X_v = Xc
    cdef const unsigned char[::1] y_v = yc
    cdef float[:, ::1] Z_v = Z
    cdef float[:, ::1] G_v = G
    cdef float lr_f = lr
    with nogil:
        _epoch(X_v, y_v, theta_v, lr_f, b, Z_v, G_v)
