"""Tensors filled with constants or random numbers.

Random draws come from numpy's global RNG in float64 (``np.random.rand`` /
``randn``), are scaled in float64 and then cast to float32, so after
``np.random.seed(s)`` every device and both array APIs produce the same
numbers. Each call draws exactly ``prod(shape)`` numbers, in row-major order.
"""
import numpy

from ..autograd import Tensor
from ..backend_selection import default_device
from ..labels import one_hot_rows


def _device(device):
    device = default_device() if device is None else device
    if hasattr(device, "enabled") and not device.enabled():
        raise RuntimeError(f"device {device} is not available on this machine")
    return device


def _shape(shape):
    # rand(2, 3) and rand((2, 3)) both mean shape (2, 3)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(int(n) for n in shape[0])
    return tuple(int(n) for n in shape)


def _tensor(array, device, dtype, requires_grad):
    # cast once, from the float64 draws, to the dtype asked for (float32 unless numpy mode asks for more)
    array = numpy.asarray(array, dtype=numpy.float32 if dtype is None else dtype)
    return Tensor(array, device=_device(device), dtype=dtype, requires_grad=requires_grad)


def rand(*shape, low=0.0, high=1.0, device=None, dtype="float32", requires_grad=False):
    """Uniform in [low, high)."""
    array = numpy.random.rand(*_shape(shape)) * (high - low) + low
    return _tensor(array, device, dtype, requires_grad)


def randn(*shape, mean=0.0, std=1.0, device=None, dtype="float32", requires_grad=False):
    """Normal with the given mean and standard deviation."""
    array = numpy.random.randn(*_shape(shape)) * std + mean
    return _tensor(array, device, dtype, requires_grad)


def constant(*shape, c=1.0, device=None, dtype="float32", requires_grad=False):
    """Every entry equal to c."""
    return _tensor(numpy.full(_shape(shape), c), device, dtype, requires_grad)


def ones(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=1.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=0.0, device=device, dtype=dtype, requires_grad=requires_grad)


def randb(*shape, p=0.5, device=None, dtype="float32", requires_grad=False):
    """Bernoulli: 1.0 where a uniform draw is <= p, else 0.0 (needle's convention)."""
    array = numpy.random.rand(*_shape(shape)) <= p
    return _tensor(array, device, dtype, requires_grad)


def one_hot(n, i, device=None, dtype="float32", requires_grad=False):
    """Rows of the n x n identity picked by the integer labels i (any shape): shape i.shape + (n,)."""
    if isinstance(i, Tensor):
        i = i.numpy()
    return _tensor(one_hot_rows(n, i), device, dtype, requires_grad)


def zeros_like(array, *, device=None, requires_grad=False):
    device = device if device is not None else array.device
    return zeros(*array.shape, dtype=array.dtype, device=device, requires_grad=requires_grad)


def ones_like(array, *, device=None, requires_grad=False):
    device = device if device is not None else array.device
    return ones(*array.shape, dtype=array.dtype, device=device, requires_grad=requires_grad)
