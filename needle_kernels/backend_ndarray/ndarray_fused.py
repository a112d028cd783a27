"""Entry points of the backends' fused kernels: optimizer updates and col2im.

Each is one pass of one kernel over whole arrays, where the same formula
written with array operations would take a dozen kernels and temporaries.
Shapes and devices are checked here; sizes again by the backend (see
``ndarray_backend_numpy`` for what each kernel computes).
"""
from .ndarray import NDArray


def _same_layout(name, ref, **arrays):
    for what, arr in arrays.items():
        if not isinstance(arr, NDArray) or arr._device != ref._device or arr._shape != ref._shape:
            raise ValueError(
                f"{name}: {what} must be an NDArray of shape {ref._shape} on {ref._device}, got "
                f"{getattr(arr, 'shape', type(arr).__name__)} on {getattr(arr, 'device', None)}"
            )


def _state(name, what, arr):
    # optimizer state is updated in place by the kernel, so it must be the whole, row-major buffer
    if not arr.is_compact():
        raise ValueError(f"{name}: {what} must be compact (it is updated in place)")
    return arr._handle


def adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """One Adam step: returns the new parameter (a new array); ``m`` and ``v`` are updated in place."""
    _same_layout("adam_update", param, grad=grad, m=m, v=v)
    out = NDArray._new(param._shape, param._device)
    param._device.adam_update(
        param.compact()._handle, grad.compact()._handle, _state("adam_update", "m", m),
        _state("adam_update", "v", v), out._handle, lr, beta1, beta2, eps, weight_decay, c1, c2,
    )
    return out


def sgd_update(param, grad, u, lr, momentum, weight_decay):
    """One SGD step: returns the new parameter (a new array); the momentum buffer ``u`` (or None) is updated in place."""
    if u is None:
        _same_layout("sgd_update", param, grad=grad)
    else:
        _same_layout("sgd_update", param, grad=grad, u=u)
    out = NDArray._new(param._shape, param._device)
    param._device.sgd_update(
        param.compact()._handle, grad.compact()._handle, None if u is None else _state("sgd_update", "u", u),
        out._handle, lr, momentum, weight_decay,
    )
    return out


def col2im(cols, image_shape, stride):
    """The adjoint of the (N, Ho, Wo, K, K, C) window view of an NHWC image of ``image_shape``."""
    n, h, w, c = (int(x) for x in image_shape)
    if cols.ndim != 6 or cols.shape[3] != cols.shape[4]:
        raise ValueError(f"col2im: cols must be (N, Ho, Wo, K, K, C), got shape {cols.shape}")
    k, s = cols.shape[3], int(stride)
    expect = (n, (h - k) // s + 1, (w - k) // s + 1, k, k, c) if s >= 1 and h >= k and w >= k else None
    if cols.shape != expect:
        raise ValueError(f"col2im: cols of shape {cols.shape} are not the {k}x{k} stride-{s} windows of {image_shape}")
    out = NDArray._new((n, h, w, c), cols._device)
    cols._device.col2im(cols.compact()._handle, out._handle, n, h, w, c, k, s)
    return out
