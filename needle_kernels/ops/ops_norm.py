"""Batch normalization as one fused op each way, on x seen as (rows, channels).

``nn.BatchNorm1d`` normalises the columns of (batch, dim); ``nn.BatchNorm2d`` the
channels of an NCHW image seen as (N*H*W, C), which is free for the NHWC memory
the convolution writes. Written with generic ops the same normalisation takes a
dozen kernels and as many full-size temporaries each way (every broadcast of a
per-channel vector is a copy); here the forward is one pass (``scale`` and
``shift`` fold the weight, bias, mean and inverse std) and the backward two
(the column sums, then dx). The generic version stays in ``nn`` as the readable
reference (``fused=False``) that the tests compare this one with.
"""
from ..autograd import TensorOp, TensorTupleOp
from ..backend_selection import array_api


def batch_statistics(x):
    """``(mean, var)``: arrays of the column means and biased variances of the Tensor x (rows, channels)."""
    return array_api.batchnorm_stats(x.realize_cached_data())


class BatchNormRows(TensorOp):
    """out = (x - mean) * invstd * weight + bias for inputs (x (rows, C), weight (C,), bias (C,)).

    ``mean`` and ``invstd`` (arrays (C,)) are the batch's own statistics when ``batch_stats``
    (training: they depend on x) or the running ones (eval: constants). With xhat = (x - mean) * invstd:
    dbias = sum_rows g, dweight = sum_rows g * xhat, and
    dx = weight * invstd * (g - dbias / rows - xhat * dweight / rows) with batch statistics,
    weight * invstd * g without.
    """

    def __init__(self, mean, invstd, batch_stats):
        self.mean, self.invstd, self.batch_stats = mean, invstd, bool(batch_stats)

    def compute(self, x, weight, bias):
        scale = weight * self.invstd
        return array_api.batchnorm_apply(x, scale, bias - self.mean * scale)

    def gradient(self, out_grad, node):
        x, weight, _ = node.inputs
        grads = BatchNormRowsGrad(self.mean, self.invstd, self.batch_stats)(x, weight, out_grad)
        return grads[0], grads[1], grads[2]


class BatchNormRowsGrad(TensorTupleOp):
    """(dx, dweight, dbias) of BatchNormRows for inputs (x, weight, g), in one fused kernel."""

    def __init__(self, mean, invstd, batch_stats):
        self.mean, self.invstd, self.batch_stats = mean, invstd, batch_stats

    def compute(self, x, weight, out_grad):
        return tuple(array_api.batchnorm_backward(x, out_grad, self.mean, self.invstd, weight, self.batch_stats))

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "the fused batch norm is differentiable once; for higher derivatives build the module "
            "with fused=False (the same normalisation in generic ops)")


def batch_norm_rows(x, weight, bias, mean, var, eps, batch_stats):
    """Batch norm of the Tensor x (rows, C) with the arrays mean and var (C,): see BatchNormRows."""
    return BatchNormRows(mean, (var + eps) ** -0.5, batch_stats)(x, weight, bias)
