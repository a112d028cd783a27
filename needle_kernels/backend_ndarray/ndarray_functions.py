"""Constructors and numpy-named functions of the NDArray array API.

``array``/``empty``/``full``/``zeros``/``ones`` make arrays on a device;
the functions after them carry numpy's names and meanings (``exp``,
``sum(a, axis, keepdims)``, ``stack``, ...), because ``backend_selection``
hands the ops either this package or numpy itself as ``array_api``.
"""
import builtins
import numbers

from ..shapes import normalize_axes
from .device import default_device
from .ndarray import NDArray, _check_dtype


# ---------------------------------------------------------------- constructors

def array(a, dtype="float32", device=None):
    """An NDArray from a list, numpy array or NDArray (a copy, converted to float32; dtype None is float32)."""
    _check_dtype(dtype)
    return NDArray(a, device=device)


def empty(shape, dtype="float32", device=None):
    _check_dtype(dtype)
    device = default_device() if device is None else device
    return device.empty(tuple(shape) if not isinstance(shape, numbers.Integral) else (shape,), dtype)


def full(shape, fill_value, dtype="float32", device=None):
    out = empty(shape, dtype, device)
    out.fill(fill_value)
    return out


def zeros(shape, dtype="float32", device=None):
    return full(shape, 0.0, dtype, device)


def ones(shape, dtype="float32", device=None):
    return full(shape, 1.0, dtype, device)


# ---------------------------------------------------------------- numpy-named functions

def exp(a):
    return a.exp()


def log(a):
    return a.log()


def tanh(a):
    return a.tanh()


def maximum(a, b):
    return a.maximum(b) if isinstance(a, NDArray) else b.maximum(a)


def negative(a):
    return -a


def greater(a, b):
    """a > b as 0.0/1.0 floats."""
    return a > b


def equal(a, b):
    """a == b as 0.0/1.0 floats."""
    return a == b


def device_of(a):
    """The device an array lives on."""
    return a.device


def element_strides(a):
    """Strides of an array in elements (they already are)."""
    return tuple(a.strides)


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def multiply(a, b):
    return a * b


def divide(a, b):
    return a / b


def power(a, b):
    return a ** b


def sum(a, axis=None, keepdims=False):
    return a.sum(axis=axis, keepdims=keepdims)


def summation(a, axis=None, keepdims=False):
    """needle's name for ``sum``."""
    return a.sum(axis=axis, keepdims=keepdims)


def max(a, axis=None, keepdims=False):
    return a.max(axis=axis, keepdims=keepdims)


def broadcast_to(a, shape):
    return a.broadcast_to(shape)


def reshape(a, shape):
    return a.reshape(shape)


def transpose(a, axes=None):
    """Permute axes (reversed when None), like numpy.transpose."""
    return a.permute(tuple(reversed(range(a.ndim))) if axes is None else axes)


def swapaxes(a, i, j):
    axes = list(range(a.ndim))
    axes[i], axes[j] = axes[j], axes[i]
    return a.permute(axes)


def flip(a, axis=None):
    return a.flip(axis)


def pad(a, pad_width):
    return a.pad(pad_width)


def matmul(a, b):
    return a @ b


def as_strided(a, shape, strides):
    """A view with element strides (numpy's as_strided takes byte strides)."""
    return a.as_strided(shape, strides)


def stack(arrays, axis=0):
    """Join arrays of one shape along a new axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("stack: need at least one array")
    shape = arrays[0].shape
    for i, arr in enumerate(arrays):
        if arr.shape != shape:
            raise ValueError(f"stack: array {i} has shape {arr.shape}, expected {shape}")
    ndim = len(shape) + 1
    if not -ndim <= axis < ndim:
        raise ValueError(f"stack: axis {axis} out of range for {ndim} dimensions")
    axis %= ndim
    out = empty(shape[:axis] + (len(arrays),) + shape[axis:], device=arrays[0].device)
    for i, arr in enumerate(arrays):
        out[(slice(None),) * axis + (i,)] = arr
    return out


def split(a, axis=0):
    """The slices of ``a`` along ``axis`` (that axis removed), as a tuple of views."""
    axis = normalize_axes(axis, a.ndim, "split")[0]
    lead = (slice(None),) * axis
    return tuple(a[lead + (i,)] for i in range(a.shape[axis]))


def concatenate(arrays, axis=0):
    """Join arrays along an existing axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("concatenate: need at least one array")
    ref = arrays[0].shape
    axis %= len(ref)
    for i, arr in enumerate(arrays):
        if len(arr.shape) != len(ref) or any(a != b for k, (a, b) in enumerate(zip(arr.shape, ref)) if k != axis):
            raise ValueError(f"concatenate: array {i} has shape {arr.shape}, incompatible with {ref} along axis {axis}")
    total = builtins.sum(arr.shape[axis] for arr in arrays)
    out = empty(ref[:axis] + (total,) + ref[axis + 1:], device=arrays[0].device)
    start = 0
    for arr in arrays:
        out[(slice(None),) * axis + (slice(start, start + arr.shape[axis]),)] = arr
        start += arr.shape[axis]
    return out
