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

from .fused_specs import NUMPY_MODE, in_numpy
from .labels import class_indices, one_hot_rows, scatter_rows

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


def matmul_bias(x, w, bias):
    """x (m, n) @ w (n, p) + bias (p elements) on every row: a linear layer's forward."""
    if numpy.ndim(x) != 2 or numpy.ndim(w) != 2 or numpy.shape(x)[1] != numpy.shape(w)[0] \
            or numpy.size(bias) != numpy.shape(w)[1]:
        raise ValueError(f"matmul_bias: x, w and bias must be (m, n), (n, p) and of p elements, got shapes "
                         f"{numpy.shape(x)}, {numpy.shape(w)} and {numpy.shape(bias)}")
    return bias_add(x @ w, bias, in_place=True)


def embedding_gather(weight, ids):
    """The rows of weight (N, D) that ids (R,: integer-valued) name, (R, D)."""
    return weight[class_indices(ids, numpy.shape(weight)[0], "embedding_gather")]


def embedding_scatter(g, ids, num_rows):
    """(num_rows, D): row n the sum of the rows of g (R, D) whose id is n."""
    if numpy.ndim(g) != 2 or numpy.size(ids) != numpy.shape(g)[0]:
        raise ValueError(f"embedding_scatter: {numpy.size(ids)} ids for g of shape {numpy.shape(g)}")
    return scatter_rows(g, class_indices(ids, num_rows, "embedding_scatter").reshape(-1), num_rows)


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


# The fused ops' formulas, written once in fused_specs for numpy mode, the NDArray stand-ins and
# the numpy reference kernels.
for _formula in NUMPY_MODE:
    globals()[_formula.__name__] = in_numpy(_formula)
del _formula


def element_strides(a):
    """Strides of a numpy array in elements (NDArray.strides already are)."""
    return tuple(s // a.itemsize for s in a.strides)


def __getattr__(name):
    # everything else (exp, log, maximum, matmul, stack, flip, pad, ...) is numpy's own
    return getattr(numpy, name)
