"""Element-wise, shape and linear-algebra ops.

Each op is a class with ``compute`` (on arrays of the selected array API) and
``gradient`` (on Tensors, returning one partial adjoint per input), plus a
lowercase function. ``g`` in the docstrings is ``out_grad``, the adjoint of
the op's output. Gradients are written with ops, so they can be
differentiated again.
"""
import numbers

import numpy

from ..autograd import Tensor, TensorOp, TensorTuple, TensorTupleOp, zeros_adjoint
from ..backend_selection import array_api, device_of
from ..shapes import broadcast_axes, broadcast_shapes, kept_shape, normalize_axes, resolve_shape
from .ops_tuple import make_tuple


# ---------------------------------------------------------------- helpers

def _unbroadcast(grad, shape):
    """Sum ``grad`` back to ``shape`` over the axes broadcasting added or stretched (see shapes.broadcast_axes)."""
    if type(shape) is not tuple:
        shape = tuple(shape)
    if grad.shape == shape:
        return grad
    return reshape(summation(grad, broadcast_axes(shape, grad.shape)), shape)


def _const(array):
    return Tensor.make_const(array)


def _zeros_like(t):
    """A constant zero adjoint of ``t``'s shape (a broadcast view of one zero, no memory of its own)."""
    data = t.realize_cached_data()
    return zeros_adjoint(tuple(data.shape), data.dtype, device_of(data))


# ---------------------------------------------------------------- element-wise

class EWiseAdd(TensorOp):
    """out = a + b (numpy broadcasting).  da = g, db = g, each summed back to its input's shape."""

    def compute(self, a, b):
        if a.shape != b.shape:
            broadcast_shapes(a.shape, b.shape, name="add")
        return a + b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        if a.shape == b.shape:  # nothing was broadcast: the usual case, without summing back
            return out_grad, out_grad
        return _unbroadcast(out_grad, a.shape), _unbroadcast(out_grad, b.shape)


def add(a, b):
    return EWiseAdd()(a, b)


class AddN(TensorOp):
    """out = a_1 + ... + a_n for n >= 2 arrays of one shape.  da_i = g.

    The backward pass sums the partial adjoints a value receives with one of
    these instead of n - 1 ``add`` nodes: a weight used at every step of an
    RNN, say, gets one node and one output buffer for all its partials.
    """

    def compute(self, *arrays):
        if len(arrays) < 2:
            raise ValueError(f"add_n: needs at least 2 arrays, got {len(arrays)}")
        shape = arrays[0].shape
        for i, a in enumerate(arrays):
            if a.shape != shape:
                raise ValueError(f"add_n: array {i} has shape {a.shape}, array 0 has {shape}")
        out = arrays[0] + arrays[1]
        for a in arrays[2:]:
            out += a  # in place: ``out`` is this op's own new array
        return out

    def gradient(self, out_grad, node):
        return (out_grad,) * len(node.inputs)


def add_n(*tensors):
    return AddN()(*tensors)


def _scalar(value, name):
    """A Python number from an int, float, numpy scalar, 0-d array or one-element array
    (needle's tests pass ``np.random.randn(1)``); integers stay ints (exact powers). ScalarOp
    keeps a plain float or int without calling this."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    size = getattr(value, "size", None)
    if size == 1 and hasattr(value, "item"):
        item = value.item()
        if isinstance(item, numbers.Real):
            return int(item) if isinstance(item, numbers.Integral) else float(item)
    raise TypeError(f"{name}: the scalar must be a real number or a one-element array, got {value!r}")


class ScalarOp(TensorOp):
    """An op of a Tensor and a Python number, ``self.scalar`` (see _scalar)."""

    name = "scalar op"  # for errors: the function that makes the op

    def __init__(self, scalar):
        # a float or an int as it is, without a call: every ``x * 0.5`` of a model makes one of these
        self.scalar = scalar if type(scalar) is float or type(scalar) is int else _scalar(scalar, self.name)


class AddScalar(ScalarOp):
    """out = a + c.  da = g."""

    name = "add_scalar"

    def compute(self, a):
        return a + self.scalar

    def gradient(self, out_grad, node):
        return out_grad


def add_scalar(a, scalar):
    return AddScalar(scalar)(a)


class EWiseMul(TensorOp):
    """out = a * b (broadcasting).  da = g * b, db = g * a."""

    def compute(self, a, b):
        if a.shape != b.shape:
            broadcast_shapes(a.shape, b.shape, name="multiply")
        return a * b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        if a.shape == b.shape:  # (as in EWiseAdd)
            return out_grad * b if a.requires_grad else None, out_grad * a if b.requires_grad else None
        da = _unbroadcast(out_grad * b, a.shape) if a.requires_grad else None
        db = _unbroadcast(out_grad * a, b.shape) if b.requires_grad else None
        return da, db


def multiply(a, b):
    return EWiseMul()(a, b)


class MulScalar(ScalarOp):
    """out = c * a.  da = c * g."""

    name = "mul_scalar"

    def compute(self, a):
        return a * self.scalar

    def gradient(self, out_grad, node):
        return out_grad * self.scalar


def mul_scalar(a, scalar):
    return MulScalar(scalar)(a)


class EWisePow(TensorOp):
    """out = a ** b element-wise, for a > 0 (computed as exp(b log a)).

    da = g * b * a**(b-1),  db = g * a**b * log(a).
    """

    def compute(self, a, b):
        if a.shape != b.shape:
            broadcast_shapes(a.shape, b.shape, name="power")
        return array_api.exp(array_api.log(a) * b)

    def gradient(self, out_grad, node):
        a, b = node.inputs
        da = out_grad * b * power(a, b - 1.0)
        db = out_grad * node * log(a)
        return _unbroadcast(da, a.shape), _unbroadcast(db, b.shape)


def power(a, b):
    return EWisePow()(a, b)


class PowerScalar(ScalarOp):
    """out = a ** c for a constant c.  da = g * c * a**(c-1)."""

    name = "power_scalar"

    def compute(self, a):
        return a ** self.scalar

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        if self.scalar == 0:
            return out_grad * 0.0
        return out_grad * (power_scalar(a, self.scalar - 1) * self.scalar)


def power_scalar(a, scalar):
    return PowerScalar(scalar)(a)


class EWiseDiv(TensorOp):
    """out = a / b (broadcasting).  da = g / b,  db = -g * a / b**2 = -g * out / b."""

    def compute(self, a, b):
        if a.shape != b.shape:
            broadcast_shapes(a.shape, b.shape, name="divide")
        return a / b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        da = out_grad / b  # already the output's shape, even when a was broadcast
        db = -(da * node)
        return _unbroadcast(da, a.shape), _unbroadcast(db, b.shape)


def divide(a, b):
    return EWiseDiv()(a, b)


class DivScalar(ScalarOp):
    """out = a / c.  da = g / c."""

    name = "divide_scalar"

    def compute(self, a):
        return a / self.scalar

    def gradient(self, out_grad, node):
        return out_grad / self.scalar


def divide_scalar(a, scalar):
    return DivScalar(scalar)(a)


class Negate(TensorOp):
    """out = -a.  da = -g."""

    def compute(self, a):
        return -a

    def gradient(self, out_grad, node):
        return -out_grad


def negate(a):
    return Negate()(a)


class Log(TensorOp):
    """out = log(a).  da = g / a."""

    def compute(self, a):
        return array_api.log(a)

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]


def log(a):
    return Log()(a)


class Exp(TensorOp):
    """out = exp(a).  da = g * exp(a) = g * out."""

    def compute(self, a):
        return array_api.exp(a)

    def gradient(self, out_grad, node):
        return out_grad * node


def exp(a):
    return Exp()(a)


# The adjoints of relu, tanh and sigmoid are each one op of their own (as PyTorch's
# threshold_backward, tanh_backward and sigmoid_backward are): one graph node and one
# kernel (array_api.relu_backward, ...) per backward step instead of two to four of each,
# and still differentiable, for second order.

class ReLU(TensorOp):
    """out = max(a, 0).  da = g * [a > 0] (relu_backward)."""

    def compute(self, a):
        return array_api.maximum(a, 0.0)

    def gradient(self, out_grad, node):
        return relu_backward(out_grad, node.inputs[0])


def relu(a):
    return ReLU()(a)


class ReLUBackward(TensorOp):
    """out = g * [a > 0].  dg = out_grad * [a > 0]; da = 0 (the mask is piecewise constant)."""

    def compute(self, g, a):
        return array_api.relu_backward(g, a)

    def gradient(self, out_grad, node):
        g, a = node.inputs
        return relu_backward(out_grad, a), _zeros_like(a)


def relu_backward(out_grad, a):
    return ReLUBackward()(out_grad, a)


class Tanh(TensorOp):
    """out = tanh(a).  da = g * (1 - out**2) (tanh_backward)."""

    def compute(self, a):
        return array_api.tanh(a)

    def gradient(self, out_grad, node):
        return tanh_backward(out_grad, node)


def tanh(a):
    return Tanh()(a)


class TanhBackward(TensorOp):
    """out = g * (1 - y**2) for y = tanh(a).  dg = out_grad * (1 - y**2); dy = -2 * out_grad * g * y."""

    def compute(self, g, y):
        return array_api.tanh_backward(g, y)

    def gradient(self, out_grad, node):
        g, y = node.inputs
        return tanh_backward(out_grad, y), out_grad * g * y * -2.0


def tanh_backward(out_grad, y):
    return TanhBackward()(out_grad, y)


class Sigmoid(TensorOp):
    """out = 1 / (1 + exp(-a)).  da = g * out * (1 - out) (sigmoid_backward).

    Computed as (tanh(a/2) + 1) / 2, which never overflows (exp(-a) does for a << 0).
    """

    def compute(self, a):
        return (array_api.tanh(a * 0.5) + 1.0) * 0.5

    def gradient(self, out_grad, node):
        return sigmoid_backward(out_grad, node)


def sigmoid(a):
    return Sigmoid()(a)


class SigmoidBackward(TensorOp):
    """out = g * y * (1 - y) for y = sigmoid(a).  dg = out_grad * y * (1 - y); dy = out_grad * g * (1 - 2y)."""

    def compute(self, g, y):
        return array_api.sigmoid_backward(g, y)

    def gradient(self, out_grad, node):
        g, y = node.inputs
        return sigmoid_backward(out_grad, y), out_grad * g * (1.0 - 2.0 * y)


def sigmoid_backward(out_grad, y):
    return SigmoidBackward()(out_grad, y)


# ---------------------------------------------------------------- shapes

class Transpose(TensorOp):
    """Swap two axes (default the last two); a full permutation if ``axes`` names every axis.

    The adjoint of a swap is the same swap; of a permutation, the inverse permutation.
    """

    def __init__(self, axes=None):
        self.axes = None if axes is None else tuple(int(x) for x in axes)

    def _perm(self, ndim):
        if self.axes is None:
            if ndim < 2:
                raise ValueError(f"transpose: needs at least 2 dimensions, got {ndim}")
            i, j = ndim - 2, ndim - 1
        elif len(self.axes) == 2:
            i, j = (normalize_axes((ax,), ndim, "transpose")[0] for ax in self.axes)
        else:
            if sorted(ax % ndim for ax in self.axes) != list(range(ndim)) or len(self.axes) != ndim:
                raise ValueError(f"transpose: axes {self.axes} are not a permutation of {ndim} axes")
            return tuple(ax % ndim for ax in self.axes)
        perm = list(range(ndim))
        perm[i], perm[j] = perm[j], perm[i]
        return tuple(perm)

    def compute(self, a):
        return array_api.transpose(a, self._perm(a.ndim))

    def gradient(self, out_grad, node):
        perm = self._perm(len(out_grad.shape))
        return transpose(out_grad, tuple(int(k) for k in numpy.argsort(perm)))


def transpose(a, axes=None):
    return Transpose(axes)(a)


class Reshape(TensorOp):
    """out = a viewed with a new shape (one entry may be -1).  da = reshape(g, a.shape)."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def compute(self, a):
        shape = resolve_shape(self.shape, a.shape)
        if tuple(a.shape) == shape:
            return a
        return array_api.reshape(a, shape)

    def gradient(self, out_grad, node):
        return reshape(out_grad, node.inputs[0].shape)


def reshape(a, shape):
    return Reshape(shape)(a)


class BroadcastTo(TensorOp):
    """out = a repeated along new leading axes and axes of length 1 (a view).

    da = g summed over those axes.
    """

    def __init__(self, shape):
        self.shape = tuple(int(n) for n in shape)

    def compute(self, a):
        if tuple(a.shape) == self.shape:
            return a
        if broadcast_shapes(a.shape, self.shape, name="broadcast_to") != self.shape:
            raise ValueError(f"broadcast_to: cannot broadcast shape {tuple(a.shape)} to {self.shape}")
        return array_api.broadcast_to(a, self.shape)

    def gradient(self, out_grad, node):
        return _unbroadcast(out_grad, node.inputs[0].shape)


def broadcast_to(a, shape):
    return BroadcastTo(shape)(a)


class Summation(TensorOp):
    """out = sum of a over ``axes`` (None: all).  da = g broadcast back along the summed axes."""

    def __init__(self, axes=None):
        if isinstance(axes, (int, numpy.integer)):
            axes = (int(axes),)
        self.axes = None if axes is None else tuple(axes)

    def compute(self, a):
        axes = normalize_axes(self.axes, a.ndim, "summation")
        if not axes:
            return a
        return array_api.sum(a, axis=axes)

    def gradient(self, out_grad, node):
        shape = node.inputs[0].shape
        axes = normalize_axes(self.axes, len(shape), "summation")
        kept = kept_shape(shape, axes)
        return broadcast_to(reshape(out_grad, kept), shape)


def summation(a, axes=None):
    return Summation(axes)(a)


class Max(TensorOp):
    """out = max of a over ``axes``.  da = g where a equals the max (ties all receive g)."""

    def __init__(self, axes=None):
        if isinstance(axes, (int, numpy.integer)):
            axes = (int(axes),)
        self.axes = None if axes is None else tuple(axes)

    def compute(self, a):
        axes = normalize_axes(self.axes, a.ndim, "amax")
        if not axes:
            return a
        return array_api.max(a, axis=axes)

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        axes = normalize_axes(self.axes, len(a.shape), "amax")
        kept = kept_shape(a.shape, axes)
        top = array_api.broadcast_to(array_api.reshape(node.realize_cached_data(), kept), a.shape)
        mask = _const(array_api.equal(a.realize_cached_data(), top))
        return broadcast_to(reshape(out_grad, kept), a.shape) * mask


def amax(a, axes=None):
    """The maximum over ``axes`` (differentiable; used by max pooling)."""
    return Max(axes)(a)


# ---------------------------------------------------------------- linear algebra

class MatMul(TensorOp):
    """out = a @ b, batched over leading axes with numpy broadcasting.

    da = g @ b^T,  db = a^T @ g (transposing the last two axes), each summed
    over the batch axes its input was broadcast along.
    """

    def compute(self, a, b):
        if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
            raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} are not aligned")
        if (a.ndim > 2 or b.ndim > 2) and a.shape[:-2] != b.shape[:-2]:
            try:
                broadcast_shapes(a.shape[:-2], b.shape[:-2])
            except ValueError:  # name the whole shapes, not only their batch parts
                raise ValueError(
                    f"matmul: batch dimensions of {tuple(a.shape)} and {tuple(b.shape)} cannot be broadcast"
                ) from None
        return a @ b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # skip the product nobody needs (e.g. the gradient of a data batch): it costs as much as the forward
        da = _unbroadcast(out_grad @ transpose(b), a.shape) if a.requires_grad else None
        db = _unbroadcast(transpose(a) @ out_grad, b.shape) if b.requires_grad else None
        return da, db


def matmul(a, b):
    """a @ b; a 1-D operand is treated as a row (left) or column (right) vector, as numpy does."""
    if len(a.shape) == 1 and len(b.shape) == 1:
        return reshape(MatMul()(reshape(a, (1, -1)), reshape(b, (-1, 1))), ())
    if len(a.shape) == 1:
        out = MatMul()(reshape(a, (1, -1)), b)
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if len(b.shape) == 1:
        out = MatMul()(a, reshape(b, (-1, 1)))
        return reshape(out, out.shape[:-1])
    return MatMul()(a, b)


class MatMulBias(TensorOp):
    """out = x @ w + b for x (n, in), w (in, out) and b of out elements (a linear layer), the
    bias added by the product's kernel as it stores each tile (``matmul_bias``) instead of by a
    broadcast copy and an add.

    dx = g @ w^T,  dw = x^T @ g,  db = g summed over the rows (in b's shape): each a
    MatMulBiasGradient of (x, w, g).
    """

    def compute(self, x, w, b):
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0] or b.size != w.shape[1]:
            raise ValueError(f"matmul_bias: shapes {tuple(x.shape)}, {tuple(w.shape)} and bias {tuple(b.shape)} "
                             "are not (n, in), (in, out) and out elements")
        return array_api.matmul_bias(x, w, b)

    def gradient(self, out_grad, node):
        x, w, b = node.inputs
        # one op each, and none for an input without a gradient (a data batch's dx costs as
        # much as the forward product)
        return tuple(MatMulBiasGradient(i, b.shape)(x, w, out_grad) if t.requires_grad else None
                     for i, t in enumerate(node.inputs))

    def decompose(self, x, w, b):
        """x @ w + b in generic ops (what the compiler and the ONNX exporter know)."""
        out = x @ w
        row = b if tuple(b.shape) == (1, out.shape[1]) else reshape(b, (1, out.shape[1]))
        return out + broadcast_to(row, out.shape)


def matmul_bias(x, w, b):
    return MatMulBias()(x, w, b)


class MatMulBiasGradient(TensorOp):
    """The gradient of MatMulBias with respect to its input ``index`` (0: x, 1: w, 2: b), for
    inputs (x, w, g): dx = g @ w^T, dw = x^T @ g, db = g summed over the rows (``bias_shape``).

    Each is linear in g and in the one other input it reads; with u the adjoint of out:
    of dx, dw = u^T @ g and dg = u @ w; of dw, dx = g @ u^T and dg = x @ u; of db, dg = u
    broadcast over the rows.
    """

    def __init__(self, index, bias_shape):
        self.index = index
        self.bias_shape = tuple(bias_shape)

    def compute(self, x, w, g):
        if self.index == 0:
            return g @ array_api.transpose(w, (1, 0))
        if self.index == 1:
            return array_api.transpose(x, (1, 0)) @ g
        return array_api.reshape(array_api.sum(g, axis=0), self.bias_shape)

    def gradient(self, out_grad, node):
        x, w, g = node.inputs
        if self.index == 0:
            return None, transpose(out_grad) @ g, out_grad @ w
        if self.index == 1:
            return g @ transpose(out_grad), None, x @ out_grad
        return None, None, broadcast_to(reshape(out_grad, (1, g.shape[1])), g.shape)


# ---------------------------------------------------------------- stack / split

class Stack(TensorOp):
    """out = the input Tensors (one TensorTuple input) stacked along a new ``axis``.

    The adjoint is ``split(g, axis)``.
    """

    def __init__(self, axis):
        self.axis = axis

    def compute(self, args):
        if len(args) == 0:
            raise ValueError("stack: needs at least one tensor")
        shapes = {tuple(x.shape) for x in args}
        if len(shapes) > 1:
            raise ValueError(f"stack: all tensors must have the same shape, got {[tuple(x.shape) for x in args]}")
        return array_api.stack(list(args), axis=self.axis)

    def gradient(self, out_grad, node):
        return split(out_grad, self.axis)


def stack(args, axis):
    if not isinstance(args, TensorTuple):
        args = make_tuple(*args)
    return Stack(axis)(args)


class Split(TensorTupleOp):
    """out = the slices of a along ``axis`` (that axis removed), as a TensorTuple.

    The adjoint is ``stack(g, axis)``.
    """

    def __init__(self, axis):
        self.axis = axis

    def compute(self, a):
        axis = normalize_axes(self.axis, a.ndim, "split")[0]
        lead = (slice(None),) * axis
        return tuple(a[lead + (i,)] for i in range(a.shape[axis]))

    def gradient(self, out_grad, node):
        return stack(out_grad, self.axis)


def split(a, axis):
    return Split(axis)(a)


# ---------------------------------------------------------------- pad / crop

def _check_pad_width(pad_width, ndim, name):
    pad_width = tuple((int(lo), int(hi)) for lo, hi in pad_width)
    if len(pad_width) != ndim or any(lo < 0 or hi < 0 for lo, hi in pad_width):
        raise ValueError(f"{name}: pad_width {pad_width} needs one non-negative (lo, hi) per axis of {ndim}")
    return pad_width


class Pad(TensorOp):
    """out = a with ``pad_width[i] = (lo, hi)`` zeros added before/after axis i.  da = crop(g, pad_width)."""

    def __init__(self, pad_width):
        self.pad_width = tuple((int(lo), int(hi)) for lo, hi in pad_width)

    def compute(self, a):
        _check_pad_width(self.pad_width, a.ndim, "pad")
        return array_api.pad(a, self.pad_width)

    def gradient(self, out_grad, node):
        return crop(out_grad, self.pad_width)


def pad(a, pad_width):
    return Pad(pad_width)(a)


class Crop(TensorOp):
    """out = a without ``(lo, hi)`` entries at the ends of each axis (a view).  da = pad(g, pad_width)."""

    def __init__(self, pad_width):
        self.pad_width = tuple((int(lo), int(hi)) for lo, hi in pad_width)

    def compute(self, a):
        _check_pad_width(self.pad_width, a.ndim, "crop")
        if any(lo + hi > n for (lo, hi), n in zip(self.pad_width, a.shape)):
            raise ValueError(f"crop: cannot remove {self.pad_width} from shape {tuple(a.shape)}")
        return a[tuple(slice(lo, n - hi) for (lo, hi), n in zip(self.pad_width, a.shape))]

    def gradient(self, out_grad, node):
        return pad(out_grad, self.pad_width)


def crop(a, pad_width):
    return Crop(pad_width)(a)
