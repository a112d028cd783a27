"""Numerically stable log-sum-exp and log-softmax.

Both subtract the maximum before exponentiating, so large logits never
overflow ``exp``; the gradients are written with ops (differentiable again).
"""
import numpy

from ..autograd import SavedForBackward, Tensor, TensorOp
from ..backend_selection import array_api
from ..labels import one_hot_rows
from ..shapes import kept_shape, normalize_axes
from .ops_mathematic import broadcast_to, exp, reshape, summation


class LogSoftmax(TensorOp):
    """out = a - logsumexp(a) along ``axis`` (default the last).

    da = g - softmax(a) * sum(g), with softmax(a) = exp(out). Stable: the max is
    subtracted before exponentiating.
    """

    def __init__(self, axis=-1):
        self.axis = axis

    def compute(self, a):
        axis = normalize_axes(self.axis, a.ndim, "logsoftmax")
        shifted = a - array_api.broadcast_to(array_api.max(a, axis=axis, keepdims=True), a.shape)
        lse = array_api.log(array_api.sum(array_api.exp(shifted), axis=axis, keepdims=True))
        return shifted - array_api.broadcast_to(lse, a.shape)

    def gradient(self, out_grad, node):
        shape = out_grad.shape
        axis = normalize_axes(self.axis, len(shape), "logsoftmax")
        kept = kept_shape(shape, axis)
        total = broadcast_to(reshape(summation(out_grad, axis), kept), shape)
        return out_grad - exp(node) * total


def logsoftmax(a, axis=-1):
    return LogSoftmax(axis)(a)


class Softmax(TensorOp):
    """out = exp(a - max) / sum(exp(a - max)) over the last axis, one kernel each way.

    da = out * (g - sum_last(g * out)): SoftmaxBackward(out, g).
    """

    def compute(self, a):
        return array_api.softmax(a)

    def gradient(self, out_grad, node):
        return SoftmaxBackward()(node, out_grad)

    def decompose(self, a):
        """The same softmax in generic ops (what the compiler and the ONNX exporter know). The
        row max is subtracted as a constant: softmax is shift-invariant, so the gradient is
        unchanged and exp cannot overflow."""
        last = len(a.shape) - 1
        row_max = Tensor.make_const(a.realize_cached_data().max(axis=last, keepdims=True))
        probs = exp(a - broadcast_to(row_max, a.shape))
        return probs / broadcast_to(reshape(summation(probs, (last,)), (*a.shape[:-1], 1)), a.shape)


def softmax(a):
    """The softmax of the Tensor a over its last axis: see Softmax."""
    return Softmax()(a)


class SoftmaxBackward(TensorOp):
    """out = y * (g - sum_last(g * y)) for inputs (y, g), y a softmax over the last axis and g
    its adjoint: the softmax's gradient, one kernel (softmax_backward).

    With u the adjoint of out and s = sum_last(g * y), t = sum_last(u * y) (kept as columns):
    dy = u * (g - s) - g * t,  dg = y * (u - t) = SoftmaxBackward(y, u).
    """

    def compute(self, y, g):
        return array_api.softmax_backward(y, g)

    def gradient(self, out_grad, node):
        y, g = node.inputs
        dy = out_grad * (g - _sum_last(g * y)) - g * _sum_last(out_grad * y)
        return dy, self(y, out_grad)


def _sum_last(a):
    """The sums of the Tensor a over its last axis, broadcast back to its shape."""
    shape = a.shape
    return broadcast_to(reshape(summation(a, (len(shape) - 1,)), shape[:-1] + (1,)), shape)


class LogSumExp(TensorOp):
    """out = log(sum(exp(a), axes)), computed as m + log(sum(exp(a - m))) with m = max(a).

    da = g * exp(a - out) (the softmax), broadcast back along ``axes``.
    """

    def __init__(self, axes=None):
        if isinstance(axes, (int, numpy.integer)):
            axes = (int(axes),)
        self.axes = None if axes is None else tuple(axes)

    def compute(self, a):
        axes = normalize_axes(self.axes, a.ndim, "logsumexp")
        # clamping the max keeps an all -inf slice at -inf (instead of -inf - -inf = nan)
        m = array_api.maximum(array_api.max(a, axis=axes, keepdims=True), -3e38)
        s = array_api.sum(array_api.exp(a - array_api.broadcast_to(m, a.shape)), axis=axes, keepdims=True)
        out = array_api.log(s) + m
        shape = tuple(n for i, n in enumerate(a.shape) if i not in axes)
        return array_api.reshape(out, shape)

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        axes = normalize_axes(self.axes, len(a.shape), "logsumexp")
        kept = kept_shape(a.shape, axes)
        g = broadcast_to(reshape(out_grad, kept), a.shape)
        return g * exp(a - broadcast_to(reshape(node, kept), a.shape))


def logsumexp(a, axes=None):
    return LogSumExp(axes)(a)


class SoftmaxCrossEntropy(TensorOp):
    """out_i = logsumexp(z_i) - z_i[y_i]: the cross-entropy of each row of logits z (B, k) against
    integer labels y (B,), the same as ``logsumexp(z, (1,)) - (z * one_hot(y)).sum((1,))``.

    dz_i = g_i * (softmax(z_i) - one_hot(y_i)). Each direction is one fused kernel that reads a
    row of z while it is in cache, with no one-hot matrix and no broadcast copies; the forward
    keeps the row log-sum-exps for the backward.
    """

    def __init__(self, labels):
        self.labels = numpy.asarray(labels)

    def compute(self, z):
        loss, lse = array_api.softmax_cross_entropy(z, self.labels)
        return SavedForBackward(loss, (lse,))

    def gradient(self, out_grad, node):
        z = node.inputs[0]
        if node.saved is None:  # the node was built around a known output: compute them again
            lse = array_api.softmax_cross_entropy(z.realize_cached_data(), self.labels)[1]
        else:
            (lse,) = node.saved
        return SoftmaxCrossEntropyGrad(self.labels)(z, out_grad, Tensor.make_const(lse))


def softmax_cross_entropy(z, labels):
    """Per-row cross-entropy of logits z (B, k) against integer labels (B,): a Tensor (B,)."""
    return SoftmaxCrossEntropy(labels)(z)


class SoftmaxCrossEntropyGrad(TensorOp):
    """out = g_i * (softmax(z_i) - one_hot(y_i)) for inputs (z, g, lse), lse the rows' log-sum-exps.

    Differentiable again (a Hessian-vector product through the loss): with S = softmax(z), Y the
    one-hot labels and H the incoming gradient, dz = g * S * (H - sum_j H * S), dg = sum_j H * (S - Y);
    lse is a constant of the forward pass.
    """

    def __init__(self, labels):
        self.labels = numpy.asarray(labels)

    def compute(self, z, g, lse):
        return array_api.softmax_cross_entropy_grad(z, self.labels, lse, g)

    def gradient(self, out_grad, node):
        z, g, _ = node.inputs
        rows, k = z.shape
        S = exp(logsoftmax(z))
        Y = Tensor(one_hot_rows(k, self.labels), device=z.device, dtype=z.dtype, requires_grad=False)
        row = lambda v: broadcast_to(reshape(v, (rows, 1)), (rows, k))  # noqa: E731
        dz = row(g) * S * (out_grad - row(summation(out_grad * S, (1,))))
        return dz, summation(out_grad * (S - Y), (1,)), None
