"""The array API of ``NEEDLE_BACKEND=np``: numpy itself, with one CPU device.

The course builds autograd and the nn library before students write their own
NDArray, so the library must also run on plain ``numpy.ndarray``: float32 by
default, and a floating array keeps the dtype it was given (float64 stays
float64), as in needle's numpy mode.
This module *is* that array API: any name not defined here falls through to
numpy (``backend_numpy.exp is numpy.exp``), and the few functions whose numpy
signature differs from the NDArray module's are redefined here:

* ``array/empty/full/zeros/ones`` take ``device=`` and default to float32;
* ``sum``/``max`` always return arrays (numpy returns scalars for ``axis=None``);
* ``as_strided(a, shape, strides)`` takes strides in *elements*, like NDArray
  (numpy's own ``as_strided`` counts bytes).
"""
import numpy

from .labels import class_indices, one_hot_rows

__device_name__ = "cpu"


class NumpyDevice:
    """The single device of numpy mode.

    ``rand``/``randn`` draw from numpy's global RNG in float64 and cast to
    float32, exactly like the NDArray devices, so ``np.random.seed(s)`` gives
    the same numbers in both modes.
    """

    def __init__(self, name="cpu", enabled=True):
        self.name = name
        self._enabled = enabled

    def __repr__(self):
        return f"{self.name}()"

    def __eq__(self, other):
        return getattr(other, "name", None) == self.name

    def __hash__(self):
        return hash(self.name)

    def enabled(self):
        return self._enabled

    def _check(self):
        if not self._enabled:
            raise RuntimeError(f"device {self} is not available on this machine")

    def rand(self, *shape, dtype="float32"):
        self._check()
        return numpy.asarray(numpy.random.rand(*shape), dtype=dtype)

    def randn(self, *shape, dtype="float32"):
        self._check()
        return numpy.asarray(numpy.random.randn(*shape), dtype=dtype)

    def one_hot(self, n, i, dtype="float32"):
        self._check()
        return one_hot_rows(n, i, dtype)

    def empty(self, shape, dtype="float32"):
        self._check()
        return numpy.empty(shape, dtype=dtype)

    def full(self, shape, fill_value, dtype="float32"):
        self._check()
        return numpy.full(shape, fill_value, dtype=dtype)

    def zeros(self, shape, dtype="float32"):
        return self.full(shape, 0.0, dtype)

    def ones(self, shape, dtype="float32"):
        return self.full(shape, 1.0, dtype)


_CPU = NumpyDevice("cpu")
_CUDA = NumpyDevice("cuda", enabled=False)


def cpu():
    """The CPU device (numpy arrays)."""
    return _CPU


def cpu_numpy():
    """numpy mode has one device; ``cpu_numpy()`` is the same as ``cpu()``."""
    return _CPU


def cuda():
    """A disabled device: numpy mode never runs on a GPU."""
    return _CUDA


def default_device():
    return _CPU


def all_devices():
    return [_CPU]


# ---------------------------------------------------------------- numpy shims

def _require(device):
    if device is not None and hasattr(device, "enabled") and not device.enabled():
        raise RuntimeError(f"device {device} is not available on this machine")


def array(obj, dtype=None, device=None):
    """A copy of ``obj`` as a numpy array.

    With ``dtype=None`` a floating array keeps its dtype (a float64 Tensor
    stays float64 through ops and gradients, as in needle's numpy mode) and
    anything else (lists, integers, booleans) becomes float32.
    """
    _require(device)
    if hasattr(obj, "numpy") and not isinstance(obj, numpy.ndarray):
        obj = obj.numpy()  # an NDArray of the other mode
    if dtype is None:
        dtype = obj.dtype if getattr(obj, "dtype", None) is not None and numpy.dtype(obj.dtype).kind == "f" \
            else numpy.float32
    return numpy.array(obj, dtype=dtype)


def empty(shape, dtype="float32", device=None):
    _require(device)
    return numpy.empty(shape, dtype=dtype)


def full(shape, fill_value, dtype="float32", device=None):
    _require(device)
    return numpy.full(shape, fill_value, dtype=dtype)


def zeros(shape, dtype="float32", device=None):
    return full(shape, 0.0, dtype, device)


def ones(shape, dtype="float32", device=None):
    return full(shape, 1.0, dtype, device)


def sum(a, axis=None, keepdims=False):
    return numpy.asarray(numpy.sum(a, axis=axis, keepdims=keepdims))


def max(a, axis=None, keepdims=False):
    return numpy.asarray(numpy.max(a, axis=axis, keepdims=keepdims))


def as_strided(a, shape, strides):
    """A view of ``a`` with the given shape and strides counted in elements."""
    item = a.itemsize
    return numpy.lib.stride_tricks.as_strided(
        a, shape=tuple(shape), strides=tuple(s * item for s in strides), writeable=False
    )


def device_of(a):
    """The device an array lives on: numpy mode has one."""
    return _CPU


def greater(a, b):
    """a > b as 0.0/1.0 in a's dtype, as NDArray comparisons give (numpy's are booleans)."""
    return numpy.greater(a, b).astype(a.dtype)


def equal(a, b):
    """a == b as 0.0/1.0 in a's dtype."""
    return numpy.equal(a, b).astype(a.dtype)


def _same_shape(name, g, x):
    if numpy.shape(g) != numpy.shape(x):
        raise ValueError(f"{name}: x must have the shape of g {numpy.shape(g)}, got {numpy.shape(x)}")


def bias_add(x, bias, in_place=False):
    """x (rows, cols) + bias (cols elements) on every row; ``in_place``: into x, returned."""
    if numpy.ndim(x) != 2 or numpy.size(bias) != numpy.shape(x)[1]:
        raise ValueError(f"bias_add: x must be (rows, cols) and bias have cols elements, got shapes "
                         f"{numpy.shape(x)} and {numpy.shape(bias)}")
    if in_place:
        return numpy.add(x, numpy.reshape(bias, (1, -1)), out=x)
    return x + numpy.reshape(bias, (1, -1))


def relu_backward(g, x):
    """g * (x > 0): relu's adjoint for out_grad g at its input x (the NDArray kernels' formula)."""
    _same_shape("relu_backward", g, x)
    return g * (x > 0).astype(g.dtype)


def tanh_backward(g, y):
    """g * ((1 - y) * (1 + y)): tanh's adjoint for out_grad g at its output y."""
    _same_shape("tanh_backward", g, y)
    one = g.dtype.type(1)
    return g * ((one - y) * (one + y))


def sigmoid_backward(g, y):
    """g * y * (1 - y): sigmoid's adjoint for out_grad g at its output y."""
    _same_shape("sigmoid_backward", g, y)
    return g * y * (g.dtype.type(1) - y)


def col2im(cols, image_shape, stride):
    """The adjoint of the (N, Ho, Wo, K, K, C) window view of an NHWC image of ``image_shape``:
    out[n, i*s + ki, j*s + kj, c] += cols[n, i, j, ki, kj, c], one strided add per (ki, kj)."""
    n, ho, wo, k, _, c = cols.shape
    s = int(stride)
    out = numpy.zeros(tuple(int(x) for x in image_shape), dtype=cols.dtype)
    for ki in range(k):
        for kj in range(k):
            out[:, ki:ki + s * (ho - 1) + 1:s, kj:kj + s * (wo - 1) + 1:s, :] += cols[:, :, :, ki, kj, :]
    return out


def conv_implicit_runs_on(device):
    """False: numpy mode convolves through the im2col matrix and numpy's own matrix product."""
    return False


def winograd_runs_on(device):
    """False: numpy mode convolves through im2col and numpy's own matrix product."""
    return False


def sgd_update(param, grad, u, lr, momentum, weight_decay):
    """One SGD step (the formula of the NDArray backends' fused kernel, in the arrays' dtype):
    g = grad + weight_decay * param; u = momentum * u + (1 - momentum) * g in place (when u is
    not None); returns param - lr * u (lr * g without u)."""
    g = grad + param * weight_decay if weight_decay else grad
    if u is not None:
        u[...] = u * momentum + g * (1 - momentum)
        g = u
    return param - g * lr


def adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """One Adam step; ``m`` and ``v`` are updated in place; returns the new parameter:
    param - (m * (lr / c1)) / (sqrt(v / c2) + eps) with the bias corrections c1, c2 of the step."""
    g = grad + param * weight_decay if weight_decay else grad
    m[...] = m * beta1 + g * (1 - beta1)
    v[...] = v * beta2 + (g * g) * (1 - beta2)
    return param - (m * (lr / c1)) / (numpy.sqrt(v * (1.0 / c2)) + eps)


def adam_update_many(params, grads, ms, vs, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """adam_update for every parameter of the lists; returns the new parameters."""
    if not (len(params) == len(grads) == len(ms) == len(vs)):
        raise ValueError(f"adam_update_many: {len(params)} params, {len(grads)} grads, {len(ms)} m and "
                         f"{len(vs)} v: the lists must be of one length")
    return [adam_update(*state, lr, beta1, beta2, eps, weight_decay, c1, c2) for state in zip(params, grads, ms, vs)]


def softmax_cross_entropy(z, labels):
    """``(loss, lse)`` of logits z (rows, classes) and integer labels (rows,), in z's dtype:
    lse_i = max_i + log(sum_j exp(z_ij - max_i)) and loss_i = lse_i - z_i[labels_i]."""
    y = _row_labels("softmax_cross_entropy", z, labels)
    m = z.max(axis=1)
    lse = m + numpy.log(numpy.exp(z - m[:, None]).sum(axis=1))
    return lse - z[numpy.arange(z.shape[0]), y], lse


def softmax_cross_entropy_grad(z, labels, lse, g):
    """g_i * (softmax(z_i) - one_hot(labels_i)) for every row i, in z's dtype."""
    y = _row_labels("softmax_cross_entropy_grad", z, labels)
    out = numpy.exp(z - lse[:, None]) * g[:, None]
    out[numpy.arange(z.shape[0]), y] -= g
    return out


def _row_labels(name, z, labels):
    if z.ndim != 2 or z.shape[1] < 1:
        raise ValueError(f"{name}: logits must be (rows, classes), got shape {z.shape}")
    labels = numpy.asarray(labels)
    if labels.shape != (z.shape[0],):
        raise ValueError(f"{name}: labels of shape {labels.shape} do not match logits {z.shape}")
    return class_indices(labels, z.shape[1], name)


def _bn_columns(name, x):
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"{name}: x must be non-empty (rows, channels), got shape {x.shape}")


def batchnorm_stats(x):
    """``(mean, var)`` of each column of x (rows, channels), biased variance, in x's dtype
    (float32 sums accumulate in float64, as the NDArray backends' do)."""
    _bn_columns("batchnorm_stats", x)
    X = x.astype(numpy.float64)
    m = X.mean(axis=0)
    return m.astype(x.dtype), ((X - m) ** 2).mean(axis=0).astype(x.dtype)


def batchnorm_fold(mean, var, weight, bias, running_mean, running_var, eps, momentum):
    """``(invstd, scale, shift, new_running_mean, new_running_var)`` of a training-mode batch norm,
    per channel (the formulas of ``ndarray_backend_numpy.batchnorm_fold``), in mean's dtype."""
    invstd = (1.0 / numpy.sqrt(var.astype(numpy.float64) + eps)).astype(mean.dtype)
    scale = weight * invstd
    return (invstd, scale, bias - mean * scale, running_mean * (1 - momentum) + mean * momentum,
            running_var * (1 - momentum) + var * momentum)


def batchnorm_apply(x, scale, shift, relu=False):
    """x * scale + shift with one scale and shift per column of x (rows, channels); with
    ``relu``, max(that, 0)."""
    _bn_columns("batchnorm_apply", x)
    y = x * scale + shift
    return numpy.maximum(y, 0) if relu else y


def batchnorm_backward(x, dy, mean, invstd, weight, batch_stats, relu_out=None):
    """``(dx, dweight, dbias)`` of (x - mean) * invstd * weight + bias for the adjoint dy, in x's dtype
    (the formulas of ``ndarray_backend_numpy.batchnorm_backward``); with ``relu_out``, dy counts
    only where that ReLU output is > 0."""
    _bn_columns("batchnorm_backward", x)
    rows = x.shape[0]
    X, G = x.astype(numpy.float64), dy.astype(numpy.float64)
    if relu_out is not None:
        _same_shape("batchnorm_backward", dy, relu_out)
        G = numpy.where(relu_out > 0, G, 0.0)
    s = invstd.astype(numpy.float64)
    xhat = (X - mean) * s
    db, dw = G.sum(axis=0), (G * xhat).sum(axis=0)
    k = weight * s
    dx = k * (G - db / rows - xhat * (dw / rows)) if batch_stats else k * G
    return dx.astype(x.dtype), dw.astype(x.dtype), db.astype(x.dtype)


def softmax(x):
    """The softmax of x over its last axis, in x's dtype (the formula of ``ndarray_backend_numpy.softmax``)."""
    if numpy.ndim(x) < 1 or numpy.shape(x)[-1] == 0:
        raise ValueError(f"softmax: x must have a non-empty last axis, got shape {numpy.shape(x)}")
    e = numpy.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_backward(y, g):
    """y * (g - sum(g * y) over the last axis), the sum in float64 (``ndarray_backend_numpy.softmax_backward``)."""
    _same_shape("softmax_backward", g, y)
    s = (g.astype(numpy.float64) * y).sum(axis=-1, keepdims=True).astype(y.dtype)
    return y * (g - s)


def _layernorm_shape(name, x, **columns):
    if numpy.ndim(x) != 2 or numpy.shape(x)[1] == 0:
        raise ValueError(f"{name}: x must be (rows, features) with features >= 1, got shape {numpy.shape(x)}")
    for what, arr in columns.items():
        if numpy.shape(arr) != (x.shape[1],):
            raise ValueError(f"{name}: {what} must have shape ({x.shape[1]},), got {numpy.shape(arr)}")


def layernorm(x, weight, bias, eps):
    """``(out, mean, invstd)`` of the layer norm of each row of x (rows, features), in x's dtype
    (the formulas of ``ndarray_backend_numpy.layernorm``)."""
    _layernorm_shape("layernorm", x, weight=weight, bias=bias)
    X = x.astype(numpy.float64)
    m = X.mean(axis=1)
    s = 1.0 / numpy.sqrt(((X - m[:, None]) ** 2).mean(axis=1) + eps)
    out = (X - m[:, None]) * s[:, None] * weight + bias
    return out.astype(x.dtype), m.astype(x.dtype), s.astype(x.dtype)


def layernorm_backward(x, dy, mean, invstd, weight):
    """``(dx, dweight, dbias)`` of layernorm's out for the adjoint dy, in x's dtype
    (the formulas of ``ndarray_backend_numpy.layernorm_backward``)."""
    _layernorm_shape("layernorm_backward", x, weight=weight)
    X, G = x.astype(numpy.float64), dy.astype(numpy.float64)
    s = invstd.astype(numpy.float64)[:, None]
    xhat = (X - mean.astype(numpy.float64)[:, None]) * s
    gw = G * weight
    dx = s * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
    return dx.astype(x.dtype), (G * xhat).sum(axis=0).astype(x.dtype), G.sum(axis=0).astype(x.dtype)


def _lstm_shape(name, z, c0):
    if z.ndim != 2 or z.shape[1] % 4 or z.shape[1] == 0 or c0.shape != (z.shape[0], z.shape[1] // 4):
        raise ValueError(f"{name}: gates {z.shape} must be (rows, 4 * hidden) and the cell {c0.shape} (rows, hidden)")
    return z.shape[0], z.shape[1] // 4


def _lstm_gates(z, rows, hidden):
    Z = z.reshape(rows, 4, hidden)
    sig = lambda a: (numpy.tanh(a * 0.5) + 1.0) * 0.5  # noqa: E731
    return sig(Z[:, 0]), sig(Z[:, 1]), numpy.tanh(Z[:, 2]), sig(Z[:, 3])


def lstm_cell(z, c0):
    """``(h, c)`` of one LSTM step from the gate pre-activations z (rows, 4 * hidden), [i | f | g | o]
    per row, and the previous cell c0, in z's dtype (the formulas of ``ndarray_backend_numpy.lstm_cell``)."""
    rows, hidden = _lstm_shape("lstm_cell", z, c0)
    i, f, g, o = _lstm_gates(z, rows, hidden)
    c = f * c0 + i * g
    return o * numpy.tanh(c), c


def lstm_cell_backward(z, c0, dh, dc):
    """``(dz, dc0)`` of lstm_cell given the adjoints (dh, dc) of its outputs, in z's dtype."""
    rows, hidden = _lstm_shape("lstm_cell_backward", z, c0)
    i, f, g, o = _lstm_gates(z, rows, hidden)
    t = numpy.tanh(f * c0 + i * g)
    d = dc + dh * o * (1 - t * t)
    dz = numpy.stack([d * g * i * (1 - i), d * c0 * f * (1 - f), d * i * (1 - g * g), dh * t * o * (1 - o)], axis=1)
    return dz.reshape(rows, 4 * hidden), d * f


def element_strides(a):
    """Strides of a numpy array in elements (NDArray.strides already are)."""
    return tuple(s // a.itemsize for s in a.strides)


def __getattr__(name):
    # everything else (exp, log, maximum, matmul, stack, flip, pad, ...) is numpy's own
    return getattr(numpy, name)
