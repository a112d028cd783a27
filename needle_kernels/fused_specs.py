"""The fused ops, each defined once: its shape check and its formula against a small array API.

A fused op (softmax, layer norm, batch norm, the LSTM cell, softmax cross-entropy) runs as one
kernel per backend: a Cython section, a ``cuda/*.cu`` kernel and the numpy reference of the
flat contract (``backend_ndarray/ndarray_backend_numpy.py``). Three places need the op's
meaning besides its native kernels, and all three run the formula written here:

* the numpy reference kernel itself, on its buffers seen as numpy arrays;
* the NDArray function's stand-in on a device without the kernel (a device made from a
  module of one's own, such as the course's first NDArray backend);
* numpy mode (``NEEDLE_BACKEND=np``), which has no kernels at all.

``xp`` is the array API a formula computes with: ``NUMPY`` here, or the NDArray one in
``ndarray_fused``. It is small on purpose, so a formula reads like its math: element-wise
arithmetic with scalars and arrays of one shape, ``sum``/``max`` over one axis giving a vector,
``rows``/``columns`` broadcasting a vector back over a matrix, ``wide``/``narrow`` (numpy sums
and normalises in float64 and rounds once, as the native kernels do; NDArray stays in float32).
Each formula checks its arguments' shapes first, with a ValueError naming the wrong one; the
NDArray functions add their device and layout checks.

Adding a fused op: its formula here (and in ``NUMPY_MODE``), its kernel in
``ndarray_backend_numpy`` (the formula on the buffers), one Cython section, one ``.cu``
kernel, its entry in ``backend_ndarray/kernels.py`` and its NDArray function in
``ndarray_fused``; ``autotests/backend`` then checks every backend against the reference.
"""
import numpy

from .labels import class_indices, one_hot_rows


class NumpyArrays:
    """The array API of the formulas on numpy arrays (numpy mode and the numpy reference kernels)."""

    exp, log, tanh, maximum = numpy.exp, numpy.log, numpy.tanh, numpy.maximum

    @staticmethod
    def sum(a, axis):
        return a.sum(axis=axis)

    @staticmethod
    def max(a, axis):
        return a.max(axis=axis)

    @staticmethod
    def rows(v, shape):
        """The vector v (one value per row) broadcast over a matrix of ``shape``."""
        return numpy.broadcast_to(v.reshape(-1, 1), shape)

    @staticmethod
    def columns(v, shape):
        """The vector v (one value per column) broadcast over a matrix of ``shape``."""
        return numpy.broadcast_to(v.reshape(1, -1), shape)

    @staticmethod
    def wide(a):
        return a.astype(numpy.float64, copy=False)

    @staticmethod
    def narrow(a, like):
        """a rounded to like's dtype."""
        return a.astype(like.dtype, copy=False)

    @staticmethod
    def reshape(a, shape):
        return a.reshape(shape)

    @staticmethod
    def stack(parts, axis):
        return numpy.stack(parts, axis=axis)

    @staticmethod
    def where_positive(mask, a):
        """a where mask > 0, else 0."""
        return numpy.where(mask > 0, a, 0)

    @staticmethod
    def picked(z, labels):
        """z[i, labels[i]] for every row i."""
        return z[numpy.arange(z.shape[0]), labels]

    @staticmethod
    def one_hot(labels, z):
        return one_hot_rows(z.shape[1], labels, dtype=z.dtype)


NUMPY = NumpyArrays()


# ---------------------------------------------------------------- argument checks

def _last_axis(name, x):
    if len(x.shape) < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name}: x must have a non-empty last axis, got shape {tuple(x.shape)}")
    return x.size // x.shape[-1], x.shape[-1]


def _same_shape(name, ref, **arrays):
    for what, a in arrays.items():
        if tuple(a.shape) != tuple(ref.shape):
            raise ValueError(f"{name}: {what} of shape {tuple(a.shape)} must have the shape {tuple(ref.shape)}")


def _matrix(name, x, what, **vectors):
    """(rows, cols) of the matrix x, cols >= 1 (rows >= 1 too for a batch's statistics, which
    divide by rows); each of ``vectors`` must be a (cols,) vector."""
    if len(x.shape) != 2 or x.shape[1] == 0 or (what == "channels" and x.shape[0] == 0):
        raise ValueError(f"{name}: x must be a non-empty matrix (rows, {what}), got shape {tuple(x.shape)}")
    for v_name, v in vectors.items():
        if tuple(v.shape) != (x.shape[1],):
            raise ValueError(f"{name}: {v_name} must have shape ({x.shape[1]},), got {tuple(v.shape)}")
    return x.shape


def _row_vectors(name, x, **vectors):
    for what, v in vectors.items():
        if tuple(v.shape) != (x.shape[0],):
            raise ValueError(f"{name}: {what} must have shape ({x.shape[0]},), got {tuple(v.shape)}")


def labels_of(name, z, labels):
    """The integer labels (rows,) of logits z (rows, classes), checked (a numpy int64 array)."""
    if len(z.shape) != 2 or z.shape[1] < 1:
        raise ValueError(f"{name}: logits must be (rows, classes), got shape {tuple(z.shape)}")
    labels = numpy.asarray(labels)
    if labels.shape != (z.shape[0],):
        raise ValueError(f"{name}: labels of shape {labels.shape} do not match logits {tuple(z.shape)}")
    return class_indices(labels, z.shape[1], name)


def _lstm_shape(name, z, c0, **states):
    if len(z.shape) != 2 or z.shape[1] % 4 or z.shape[1] == 0:
        raise ValueError(f"{name}: gates must be (rows, 4 * hidden), got shape {tuple(z.shape)}")
    shape = (z.shape[0], z.shape[1] // 4)
    for what, a in dict(c0=c0, **states).items():
        if tuple(a.shape) != shape:
            raise ValueError(f"{name}: {what} of shape {tuple(a.shape)} must be (rows, hidden) = {shape}")
    return shape


# ---------------------------------------------------------------- softmax and cross-entropy

def softmax(xp, x):
    """exp(x - max x) / sum(exp(x - max x)) over the last axis."""
    rows, cols = _last_axis("softmax", x)
    flat = xp.reshape(x, (rows, cols))
    e = xp.exp(flat - xp.rows(xp.max(flat, 1), flat.shape))
    return xp.reshape(e / xp.rows(xp.sum(e, 1), flat.shape), x.shape)


def softmax_backward(xp, y, g):
    """y * (g - sum(g * y) over the last axis): softmax's adjoint for out_grad g at its output y."""
    rows, cols = _last_axis("softmax_backward", y)
    _same_shape("softmax_backward", y, g=g)
    Y, G = xp.reshape(y, (rows, cols)), xp.reshape(g, (rows, cols))
    total = xp.narrow(xp.sum(xp.wide(G) * Y, 1), Y)  # summed wide, rounded once
    return xp.reshape(Y * (G - xp.rows(total, Y.shape)), y.shape)


def softmax_cross_entropy(xp, z, labels):
    """``(loss, lse)`` per row of logits z (rows, classes) and integer labels (rows,):
    lse_i = m_i + log(sum_j exp(z_ij - m_i)) with m_i = max_j z_ij, loss_i = lse_i - z_i[labels_i]."""
    labels = labels_of("softmax_cross_entropy", z, labels)
    m = xp.max(z, 1)
    lse = xp.log(xp.sum(xp.exp(z - xp.rows(m, z.shape)), 1)) + m
    return lse - xp.picked(z, labels), lse


def softmax_cross_entropy_grad(xp, z, labels, lse, g):
    """g_i * (softmax(z_i) - one_hot(labels_i)) for every row i, with lse the rows' log-sum-exps."""
    labels = labels_of("softmax_cross_entropy_grad", z, labels)
    _row_vectors("softmax_cross_entropy_grad", z, lse=lse, g=g)
    gb = xp.rows(g, z.shape)
    return xp.exp(z - xp.rows(lse, z.shape)) * gb - xp.one_hot(labels, z) * gb


# ---------------------------------------------------------------- batch normalization (x: rows, channels)

def batchnorm_stats(xp, x):
    """``(mean, var)`` of each column: the batch's mean and biased variance."""
    rows, _ = _matrix("batchnorm_stats", x, "channels")
    X = xp.wide(x)
    mean = xp.sum(X, 0) / rows
    centered = X - xp.columns(mean, X.shape)
    return mean, xp.sum(centered * centered, 0) / rows


def batchnorm_fold(xp, mean, var, weight, bias, running_mean, running_var, eps, momentum):
    """``(invstd, scale, shift, new_running_mean, new_running_var)`` per channel:
    invstd = (var + eps)^-1/2, scale = weight * invstd, shift = bias - mean * scale and the
    running statistics moved by ``momentum`` towards the batch's."""
    if len(mean.shape) != 1 or mean.shape[0] < 1:
        raise ValueError(f"batchnorm_fold: per-channel arrays must be (C,) with C >= 1, got shape {tuple(mean.shape)}")
    _same_shape("batchnorm_fold", mean, var=var, weight=weight, bias=bias, running_mean=running_mean,
                running_var=running_var)
    invstd = xp.narrow((xp.wide(var) + eps) ** -0.5, var)  # rounded once: scale and shift use the invstd returned
    scale = weight * invstd
    return (invstd, scale, bias - mean * scale, running_mean * (1 - momentum) + mean * momentum,
            running_var * (1 - momentum) + var * momentum)


def batchnorm_apply(xp, x, scale, shift, relu=False):
    """x * scale + shift with one scale and shift per column; with ``relu``, max(that, 0)."""
    _matrix("batchnorm_apply", x, "channels", scale=scale, shift=shift)
    y = x * xp.columns(scale, x.shape) + xp.columns(shift, x.shape)
    return xp.maximum(y, 0.0) if relu else y


def batchnorm_backward(xp, x, dy, mean, invstd, weight, batch_stats, relu_out=None):
    """``(dx, dweight, dbias)`` of (x - mean) * invstd * weight + bias for the adjoint dy, with
    xhat = (x - mean) * invstd and k = weight * invstd:

        dbias = sum_r dy,  dweight = sum_r dy * xhat,
        dx = k * (dy - dbias / rows - xhat * dweight / rows)   (batch_stats: mean, invstd depend on x)
        dx = k * dy                                            (running statistics: constants)

    With ``relu_out``, the output of a ReLU after the batch norm, dy counts where relu_out > 0."""
    rows, _ = _matrix("batchnorm_backward", x, "channels", mean=mean, invstd=invstd, weight=weight)
    _same_shape("batchnorm_backward", x, dy=dy, **({} if relu_out is None else {"relu_out": relu_out}))
    G = xp.wide(dy) if relu_out is None else xp.where_positive(relu_out, xp.wide(dy))
    s = xp.columns(xp.wide(invstd), x.shape)
    xhat = (xp.wide(x) - xp.columns(mean, x.shape)) * s
    db, dw = xp.sum(G, 0), xp.sum(G * xhat, 0)
    k = xp.columns(xp.wide(weight), x.shape) * s
    if not batch_stats:
        return k * G, dw, db
    return k * (G - xp.columns(db / rows, x.shape) - xhat * xp.columns(dw / rows, x.shape)), dw, db


# ---------------------------------------------------------------- layer normalization (x: rows, features)

def layernorm(xp, x, weight, bias, eps):
    """``(out, mean, invstd)`` per row: the row's mean, its inverse std (biased variance + eps)^-1/2
    and out = (x - mean) * invstd * weight + bias."""
    _, cols = _matrix("layernorm", x, "features", weight=weight, bias=bias)
    X = xp.wide(x)
    mean = xp.sum(X, 1) / cols
    centered = X - xp.rows(mean, X.shape)
    invstd = (xp.sum(centered * centered, 1) / cols + eps) ** -0.5
    out = centered * xp.rows(invstd, X.shape) * xp.columns(xp.wide(weight), X.shape) + xp.columns(bias, X.shape)
    return out, mean, invstd


def layernorm_backward(xp, x, dy, mean, invstd, weight):
    """``(dx, dweight, dbias)`` of layernorm's out for the adjoint dy, with xhat = (x - mean) * invstd
    and gw = dy * weight: dx = invstd * (gw - mean_c gw - xhat * mean_c(gw * xhat)) per row,
    dweight = sum_r dy * xhat, dbias = sum_r dy."""
    _, cols = _matrix("layernorm_backward", x, "features", weight=weight)
    _same_shape("layernorm_backward", x, dy=dy)
    _row_vectors("layernorm_backward", x, mean=mean, invstd=invstd)
    G = xp.wide(dy)
    s = xp.rows(xp.wide(invstd), x.shape)
    xhat = (xp.wide(x) - xp.rows(mean, x.shape)) * s
    gw = G * xp.columns(xp.wide(weight), x.shape)
    a, c = xp.sum(gw, 1) / cols, xp.sum(gw * xhat, 1) / cols
    dx = s * (gw - xp.rows(a, x.shape) - xhat * xp.rows(c, x.shape))
    return dx, xp.sum(G * xhat, 0), xp.sum(G, 0)


# ---------------------------------------------------------------- RMS normalization (x: rows, features)

def rmsnorm(xp, x, weight, eps):
    """``(out, invrms)`` per row: invrms = (mean of x^2 + eps)^-1/2 and out = x * invrms * weight
    (a layer norm without the centring and the bias, as in LLaMA-style Transformers)."""
    _, cols = _matrix("rmsnorm", x, "features", weight=weight)
    X = xp.wide(x)
    invrms = (xp.sum(X * X, 1) / cols + eps) ** -0.5
    return X * xp.rows(invrms, X.shape) * xp.columns(xp.wide(weight), X.shape), invrms


def rmsnorm_backward(xp, x, dy, invrms, weight):
    """``(dx, dweight)`` of rmsnorm's out for the adjoint dy, with xhat = x * invrms and
    gw = dy * weight: dx = invrms * (gw - xhat * mean_c(gw * xhat)) per row, dweight = sum_r dy * xhat."""
    _, cols = _matrix("rmsnorm_backward", x, "features", weight=weight)
    _same_shape("rmsnorm_backward", x, dy=dy)
    _row_vectors("rmsnorm_backward", x, invrms=invrms)
    G = xp.wide(dy)
    s = xp.rows(xp.wide(invrms), x.shape)
    xhat = xp.wide(x) * s
    gw = G * xp.columns(xp.wide(weight), x.shape)
    c = xp.sum(gw * xhat, 1) / cols
    return s * (gw - xhat * xp.rows(c, x.shape)), xp.sum(G * xhat, 0)


# ---------------------------------------------------------------- the LSTM cell
# z (rows, 4 * hidden) holds the gates' pre-activations [i | f | g | o] per row; sigmoid(a) is
# (tanh(a / 2) + 1) / 2, as ops.sigmoid computes it (it never overflows).

def _gates(xp, z, hidden):
    sigmoid = lambda a: (xp.tanh(a * 0.5) + 1.0) * 0.5  # noqa: E731
    i, f, g, o = (z[:, k * hidden:(k + 1) * hidden] for k in range(4))
    return sigmoid(i), sigmoid(f), xp.tanh(g), sigmoid(o)


def lstm_cell(xp, z, c0):
    """``(h, c)`` of one step: c = f * c0 + i * g, h = o * tanh(c)."""
    _, hidden = _lstm_shape("lstm_cell", z, c0)
    i, f, g, o = _gates(xp, z, hidden)
    c = f * c0 + i * g
    return o * xp.tanh(c), c


def lstm_cell_backward(xp, z, c0, dh, dc):
    """``(dz, dc0)`` given the adjoints (dh, dc) of lstm_cell's outputs, c recomputed: with
    t = tanh(c) and d = dc + dh * o * (1 - t^2), dz = [d g i (1 - i) | d c0 f (1 - f) |
    d i (1 - g^2) | dh t o (1 - o)] and dc0 = d * f."""
    rows, hidden = _lstm_shape("lstm_cell_backward", z, c0, dh=dh, dc=dc)
    i, f, g, o = _gates(xp, z, hidden)
    t = xp.tanh(f * c0 + i * g)
    d = dc + dh * o * (1.0 - t * t)
    parts = (d * g * i * (1.0 - i), d * c0 * f * (1.0 - f), d * i * (1.0 - g * g), dh * t * o * (1.0 - o))
    return xp.reshape(xp.stack(parts, 1), (rows, 4 * hidden)), d * f


# The fused ops numpy mode runs through these formulas (backend_numpy).
NUMPY_MODE = (softmax, softmax_backward, softmax_cross_entropy, softmax_cross_entropy_grad, batchnorm_stats,
              batchnorm_fold, batchnorm_apply, batchnorm_backward, layernorm, layernorm_backward, rmsnorm,
              rmsnorm_backward, lstm_cell, lstm_cell_backward)


def in_numpy(formula):
    """``formula`` as a numpy-mode function: on numpy arrays, each result in the dtype of the first
    array argument (float32 stays float32, float64 float64)."""
    def run(*args, **kwargs):
        dtype = next(a.dtype for a in args if isinstance(a, numpy.ndarray))
        out = formula(NUMPY, *args, **kwargs)
        return tuple(o.astype(dtype, copy=False) for o in out) if isinstance(out, tuple) else out.astype(dtype, copy=False)
    run.__name__ = run.__qualname__ = formula.__name__
    run.__doc__ = formula.__doc__
    return run
