"""Numerically stable log-sum-exp and log-softmax.

Both subtract the maximum before exponentiating, so large logits never
overflow ``exp``; the gradients are written with ops (differentiable again).
"""
import numpy

from ..autograd import TensorOp
from ..backend_selection import array_api
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
