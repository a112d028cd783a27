"""2-D max and average pooling on NCHW input, as PyTorch's F.max_pool2d / F.avg_pool2d.

NCHW matches the ``nn`` modules (and torch). Internally the input is seen as
NHWC (a transpose is a view), its windows taken with the same strided
``im2col`` view as convolution, and reduced over the two window axes, so no
Python loop touches a pixel. The gradient comes from the ops used: the max
sends ``g`` to the window's maximum (to every tied maximum, where torch picks
one), the average spreads ``g / K^2``.
"""
import numpy

from ..autograd import Tensor
from .ops_conv import im2col
from .ops_mathematic import amax, pad, summation, transpose


def _pool_windows(a, kernel_size, stride, padding, name):
    if len(a.shape) != 4:
        raise ValueError(f"{name}: needs NCHW input, got shape {a.shape}")
    k = int(kernel_size)
    s = k if stride is None else int(stride)
    p = int(padding)
    if p > k // 2:
        raise ValueError(f"{name}: padding {p} should be at most half of kernel_size {k}")
    x = transpose(a, (0, 2, 3, 1))  # NCHW -> NHWC view
    return x, k, s, p


def max_pool2d(a, kernel_size, stride=None, padding=0):
    """out[n, c, i, j] = max over the K x K window at (i*s - p, j*s - p) of a (NCHW).

    ``stride`` defaults to ``kernel_size``; padding counts as -inf.
    """
    x, k, s, p = _pool_windows(a, kernel_size, stride, padding, "max_pool2d")
    if p:
        n, h, w, c = x.shape
        border = numpy.full((1, h + 2 * p, w + 2 * p, 1), -numpy.inf, dtype=numpy.float32)
        border[:, p:p + h, p:p + w, :] = 0.0
        x = pad(x, ((0, 0), (p, p), (p, p), (0, 0))) + Tensor(border, device=a.device, requires_grad=False)
    out = amax(im2col(x, k, s), axes=(3, 4))
    return transpose(out, (0, 3, 1, 2))


def avg_pool2d(a, kernel_size, stride=None, padding=0):
    """out[n, c, i, j] = mean over the K x K window at (i*s - p, j*s - p) of a (NCHW).

    ``stride`` defaults to ``kernel_size``; zero padding is counted in the mean
    (torch's ``count_include_pad=True``).
    """
    x, k, s, p = _pool_windows(a, kernel_size, stride, padding, "avg_pool2d")
    if p:
        x = pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    out = summation(im2col(x, k, s), axes=(3, 4)) / float(k * k)
    return transpose(out, (0, 3, 1, 2))
