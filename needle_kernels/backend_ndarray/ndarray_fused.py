"""Entry points of the backends' fused kernels: optimizer updates, col2im, Winograd's 3x3
convolution and weight gradient, softmax cross-entropy, batch norm, the LSTM cell, the activations' adjoints and a
linear layer's bias.

Each is one pass of one kernel over whole arrays, where the same formula
written with array operations would take a dozen kernels and temporaries.
Shapes and devices are checked here; sizes again by the backend (see
``ndarray_backend_numpy`` for what each kernel computes).
"""
import numpy as np

from .. import fused_specs
from ..labels import class_indices, one_hot_rows, scatter_rows
from .kernels import FUSED_FUNCTIONS
from .ndarray import NDArray
from .ndarray_functions import stack

# What the package exports from here: the registry's fused functions and the two questions
# the convolution ops ask before picking a kernel.
__all__ = FUSED_FUNCTIONS + ("winograd_runs_on", "conv_implicit_runs_on")


def _same_layout(name, ref, **arrays):
    for what, arr in arrays.items():
        # `is` first: a device's == is a Python method, and this runs for every fused op
        if not isinstance(arr, NDArray) or arr._shape != ref._shape or (
                arr._device is not ref._device and arr._device != ref._device):
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


def adam_update_many(params, grads, ms, vs, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """adam_update for every parameter of a list at once (one kernel call over all of them on a
    device that has ``adam_update_many``): returns the list of new parameters; each ``ms[i]``
    and ``vs[i]`` is updated in place."""
    if not (len(params) == len(grads) == len(ms) == len(vs)):
        raise ValueError(f"adam_update_many: {len(params)} params, {len(grads)} grads, {len(ms)} m and "
                         f"{len(vs)} v: the lists must be of one length")
    if not params:
        return []
    dev, one_device = params[0]._device, True
    for i, (p, g, m, v) in enumerate(zip(params, grads, ms, vs)):
        if not (type(g) is type(m) is type(v) is NDArray and p._shape == g._shape == m._shape == v._shape
                and p._device is dev and g._device is dev and m._device is dev and v._device is dev):
            # the message is made only here: this loop runs for every parameter of every step
            _same_layout(f"adam_update_many: params[{i}]", p, grad=g, m=m, v=v)
            one_device = one_device and p._device == dev
    if not one_device or not _has_kernel(dev, "adam_update_many"):  # one call per parameter
        return [adam_update(*state, lr, beta1, beta2, eps, weight_decay, c1, c2) for state in zip(params, grads, ms, vs)]
    outs = [NDArray._new(p._shape, dev) for p in params]
    # (the name for _state's message is made only for a state that fails its check)
    states = [[a._handle if a.is_compact() else _state("adam_update_many", f"{what}[{i}]", a)
               for i, a in enumerate(arrays)] for what, arrays in (("ms", ms), ("vs", vs))]
    dev.adam_update_many([p.compact()._handle for p in params], [g.compact()._handle for g in grads], *states,
                         [o._handle for o in outs], lr, beta1, beta2, eps, weight_decay, c1, c2)
    return outs


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


def conv_implicit_runs_on(device):
    """Whether ``device`` convolves without an im2col matrix (``conv_implicit`` and its weight
    gradient); convolution makes the matrix where not."""
    return _has_kernel(device, "conv_implicit") and _has_kernel(device, "conv_implicit_weight_grad")


def _implicit_image(name, image, k, stride, pad_h, pad_w, out_hw, **other):
    if not isinstance(image, NDArray) or image.ndim != 4:
        raise ValueError(f"{name}: needs an NHWC image, got shape {getattr(image, 'shape', None)}")
    (what, arr), = other.items()
    if not isinstance(arr, NDArray) or (arr._device is not image._device and arr._device != image._device):
        raise ValueError(f"{name}: the {what} must be an NDArray on {image.device}, got "
                         f"{getattr(arr, 'device', type(arr).__name__)}")
    return image._shape, (image._shape, image._strides, image._offset, int(k), int(stride), int(pad_h),
                          int(pad_w), int(out_hw[0]), int(out_hw[1]))


def conv_implicit(image, weight, stride, pad_h, pad_w, out_hw):
    """(N, Ho, Wo, C_out): the convolution of the NHWC ``image`` (N, H, W, C), any strides (a
    transposed NCHW batch is read as it is), by ``weight`` (K, K, C, C_out) with stride ``stride``,
    the image zero-padded by ``pad_h`` rows above and ``pad_w`` columns on the left and as far as
    the ``out_hw`` = (Ho, Wo) windows reach below and on the right. No im2col matrix is made."""
    if not isinstance(weight, NDArray) or weight.ndim != 4 or weight.shape[0] != weight.shape[1]:
        raise ValueError(f"conv_implicit: weight must be (K, K, C_in, C_out), got shape {getattr(weight, 'shape', None)}")
    k, c_out = weight.shape[0], weight.shape[3]
    shape, args = _implicit_image("conv_implicit", image, k, stride, pad_h, pad_w, out_hw, weight=weight)
    if weight.shape[2] != shape[3]:
        raise ValueError(f"conv_implicit: weight {weight.shape} for an image of {shape[3]} channels {shape}")
    out = NDArray._new((shape[0], args[7], args[8], c_out), image._device)
    image._device.conv_implicit(image._handle, *args[:3], weight.compact()._handle, out._handle, *args[3:], c_out)
    return out


def conv_implicit_weight_grad(image, grad, k, stride, pad_h, pad_w):
    """(K, K, C, C_out): the weight gradient of ``conv_implicit(image, weight, stride, pad_h,
    pad_w, (Ho, Wo))`` whose output gradient is ``grad`` (N, Ho, Wo, C_out)."""
    if not isinstance(grad, NDArray) or grad.ndim != 4 or grad.shape[0] != getattr(image, "shape", (None,))[0]:
        raise ValueError(f"conv_implicit_weight_grad: a gradient of shape {getattr(grad, 'shape', None)} for an "
                         f"image of {getattr(image, 'shape', None)}: it must be (N, Ho, Wo, C_out)")
    shape, args = _implicit_image("conv_implicit_weight_grad", image, k, stride, pad_h, pad_w, grad.shape[1:3],
                                  gradient=grad)
    c_out = grad.shape[3]
    out = NDArray._new((args[3], args[3], shape[3], c_out), image._device)
    image._device.conv_implicit_weight_grad(image._handle, *args[:3], grad.compact()._handle, out._handle, *args[3:],
                                            c_out)
    return out


def winograd_runs_on(device):
    """Whether ``device`` has Winograd's convolution and its weight gradient (convolution uses
    im2col where not)."""
    return _has_kernel(device, "winograd_conv3x3") and _has_kernel(device, "winograd_weight_grad")


def _winograd_image(name, image, **other):
    """The shape (N, H, W, C) of a Winograd kernel's NHWC ``image``, after checking it is at least
    3x3 and that the ``other`` array lives on its device."""
    if image.ndim != 4 or image.shape[1] < 3 or image.shape[2] < 3:
        raise ValueError(f"{name}: needs an NHWC image of at least 3x3, got shape {image.shape}")
    (what, arr), = other.items()
    if arr._device is not image._device and arr._device != image._device:
        raise ValueError(f"{name}: the {what} is on {arr.device}, the image on {image.device}")
    return image.shape


def winograd_weight_grad(image, grad):
    """(3, 3, C_in, C_out): the weight gradient of the stride-1 3x3 convolution of the NHWC
    ``image`` (N, H, W, C_in) whose output gradient is ``grad`` (N, H - 2, W - 2, C_out)."""
    n, h, w, c_in = _winograd_image("winograd_weight_grad", image, gradient=grad)
    if grad.ndim != 4 or grad.shape[:3] != (n, h - 2, w - 2):
        raise ValueError(f"winograd_weight_grad: a gradient of shape {grad.shape} for an image of {image.shape}: "
                         f"it must be ({n}, {h - 2}, {w - 2}, C_out)")
    out = NDArray._new((3, 3, c_in, grad.shape[3]), image._device)
    image._device.winograd_weight_grad(image.compact()._handle, grad.compact()._handle, out._handle,
                                       n, h, w, c_in, grad.shape[3])
    return out


def winograd_conv3x3(image, kernel):
    """(N, H - 2, W - 2, C_out): the stride-1 3x3 convolution of the NHWC ``image`` (N, H, W, C_in)
    whose kernel g has the Winograd F(2x2, 3x3) transform ``kernel`` (16, C_in, C_out),
    kernel[4p + q] = (G g G^T)[p, q] for every channel pair."""
    n, h, w, c_in = _winograd_image("winograd_conv3x3", image, kernel=kernel)
    if kernel.ndim != 3 or kernel.shape[:2] != (16, c_in):
        raise ValueError(f"winograd_conv3x3: kernel of shape {kernel.shape} for an image of {c_in} channels: "
                         f"it must be (16, {c_in}, C_out)")
    out = NDArray._new((n, h - 2, w - 2, kernel.shape[2]), image._device)
    image._device.winograd_conv3x3(image.compact()._handle, kernel.compact()._handle, out._handle,
                                   n, h, w, c_in, kernel.shape[2])
    return out


def _xent_args(name, z, labels):
    if not isinstance(z, NDArray) or z.ndim != 2 or z.shape[1] < 1:
        raise ValueError(f"{name}: logits must be an NDArray (rows, classes), got shape {getattr(z, 'shape', None)}")
    labels = np.asarray(labels)
    if labels.shape != (z.shape[0],):
        raise ValueError(f"{name}: labels of shape {labels.shape} do not match logits {z.shape}")
    # checked here, on the host where they are, so a bad one raises at the call on every device
    # (the CUDA kernels check them too, but report only at the next synchronization)
    labels = class_indices(labels, z.shape[1], name)
    return z.compact(), NDArray(labels.astype(np.float32), device=z._device)


def _has_kernel(device, name):
    # a device made from a module of one's own (make_device) may lack the fused kernels
    return hasattr(device, name)


class NDArrays:
    """The array API of fused_specs' formulas on NDArrays: what runs a fused op on a device
    without its kernel (float32 throughout: ``wide`` and ``narrow`` change nothing)."""

    @staticmethod
    def exp(a):
        return a.exp()

    @staticmethod
    def log(a):
        return a.log()

    @staticmethod
    def tanh(a):
        return a.tanh()

    @staticmethod
    def maximum(a, b):
        return a.maximum(b)

    @staticmethod
    def sum(a, axis):
        return a.sum(axis=axis)

    @staticmethod
    def max(a, axis):
        return a.max(axis=axis)

    @staticmethod
    def rows(v, shape):
        return v.reshape((shape[0], 1)).broadcast_to(shape)

    @staticmethod
    def columns(v, shape):
        return v.reshape((1, shape[1])).broadcast_to(shape)

    @staticmethod
    def wide(a):
        return a

    @staticmethod
    def narrow(a, like):
        return a

    @staticmethod
    def reshape(a, shape):
        return a.reshape(shape)

    @staticmethod
    def stack(parts, axis):
        return stack(parts, axis)

    @staticmethod
    def where_positive(mask, a):
        return a * (mask > 0.0)

    @staticmethod
    def one_hot(labels, z):
        return NDArray(one_hot_rows(z.shape[1], labels), device=z._device)

    def picked(self, z, labels):
        return (z * self.one_hot(labels, z)).sum(axis=1)


NDARRAY = NDArrays()


def softmax_cross_entropy(z, labels):
    """``(loss, lse)`` of logits z (rows, classes) and integer labels (rows,): per-row cross-entropy
    lse(z_i) - z_i[labels_i] and the row log-sum-exps its gradient reuses, in one kernel."""
    z, y = _xent_args("softmax_cross_entropy", z, labels)
    rows, cols = z.shape
    if not _has_kernel(z._device, "softmax_xent"):
        return fused_specs.softmax_cross_entropy(NDARRAY, z, labels)
    lse, loss = NDArray._new((rows,), z._device), NDArray._new((rows,), z._device)
    z._device.softmax_xent(z._handle, y._handle, lse._handle, loss._handle, rows, cols)
    return loss, lse


def _last_axis_rows(name, x, **others):
    if not isinstance(x, NDArray) or x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name}: x must be an NDArray with a non-empty last axis, got shape {getattr(x, 'shape', None)}")
    _same_layout(name, x, **others)
    return x.compact(), x.size // x.shape[-1], x.shape[-1]


def softmax(x):
    """The softmax of x over its last axis, one row of it per task of one kernel."""
    x, rows, cols = _last_axis_rows("softmax", x)
    if not _has_kernel(x._device, "softmax"):
        return fused_specs.softmax(NDARRAY, x)
    out = NDArray._new(x.shape, x._device)
    x._device.softmax(x._handle, out._handle, rows, cols)
    return out


def softmax_backward(y, g):
    """y * (g - sum(g * y) over the last axis): softmax's adjoint for out_grad g at its output y."""
    y, rows, cols = _last_axis_rows("softmax_backward", y, g=g)
    if not _has_kernel(y._device, "softmax_backward"):
        return fused_specs.softmax_backward(NDARRAY, y, g.compact())
    out = NDArray._new(y.shape, y._device)
    y._device.softmax_backward(y._handle, g.compact()._handle, out._handle, rows, cols)
    return out


def softmax_cross_entropy_grad(z, labels, lse, g):
    """g[i] * (softmax(z_i) - one_hot(labels_i)) for every row i, in one kernel."""
    z, y = _xent_args("softmax_cross_entropy_grad", z, labels)
    rows, cols = z.shape
    _same_layout("softmax_cross_entropy_grad", NDArray._new((rows,), z._device), lse=lse, g=g)
    if not _has_kernel(z._device, "softmax_xent_grad"):
        return fused_specs.softmax_cross_entropy_grad(NDARRAY, z, labels, lse, g)
    out = NDArray._new((rows, cols), z._device)
    z._device.softmax_xent_grad(z._handle, y._handle, lse.compact()._handle, g.compact()._handle, out._handle,
                                rows, cols)
    return out


def _columns(name, x, **vectors):
    if not isinstance(x, NDArray) or x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"{name}: x must be a non-empty NDArray (rows, channels), got shape {getattr(x, 'shape', None)}")
    _same_layout(name, NDArray._new((x.shape[1],), x._device), **vectors)
    return x.compact()


def batchnorm_stats(x):
    """``(mean, var)`` of each column of x (rows, channels): the batch's mean and biased variance."""
    x = _columns("batchnorm_stats", x)
    rows, cols = x.shape
    if not _has_kernel(x._device, "batchnorm_stats"):
        return fused_specs.batchnorm_stats(NDARRAY, x)
    mean, var = NDArray._new((cols,), x._device), NDArray._new((cols,), x._device)
    x._device.batchnorm_stats(x._handle, mean._handle, var._handle, rows, cols)
    return mean, var


def batchnorm_fold(mean, var, weight, bias, running_mean, running_var, eps, momentum):
    """``(invstd, scale, shift, new_running_mean, new_running_var)``: what a training-mode batch
    norm works out per channel from the batch's mean and biased variance (arrays (C,)), in one
    kernel (see ``ndarray_backend_numpy.batchnorm_fold`` for the formulas)."""
    ins = (mean, var, weight, bias, running_mean, running_var)
    dev, shape = mean._device, mean._shape
    if not all(type(a) is NDArray and a._shape == shape and a._device is dev for a in ins):
        _same_layout("batchnorm_fold", mean, var=var, weight=weight, bias=bias, running_mean=running_mean,
                     running_var=running_var)
    if len(shape) != 1 or shape[0] < 1:
        raise ValueError(f"batchnorm_fold: per-channel arrays must be (C,) with C >= 1, got shape {shape}")
    cols = shape[0]
    if not _has_kernel(dev, "batchnorm_fold"):
        return fused_specs.batchnorm_fold(NDARRAY, *ins, eps, momentum)
    outs = (NDArray._new(shape, dev), NDArray._new(shape, dev), NDArray._new(shape, dev), NDArray._new(shape, dev),
            NDArray._new(shape, dev))
    dev.batchnorm_fold(*[a.compact()._handle for a in ins], *[o._handle for o in outs], cols, eps, momentum)
    return outs


def batchnorm_apply(x, scale, shift, relu=False):
    """x * scale + shift with one scale and shift per column of x (rows, channels); with
    ``relu``, max(that, 0), in the same pass."""
    x = _columns("batchnorm_apply", x, scale=scale, shift=shift)
    rows, cols = x.shape
    if not _has_kernel(x._device, "batchnorm_apply"):
        return fused_specs.batchnorm_apply(NDARRAY, x, scale, shift, relu)
    out = NDArray._new((rows, cols), x._device)
    if relu:
        x._device.batchnorm_apply(x._handle, scale.compact()._handle, shift.compact()._handle, out._handle,
                                  rows, cols, True)
    else:  # (the call a backend of one's own written before the flag also answers)
        x._device.batchnorm_apply(x._handle, scale.compact()._handle, shift.compact()._handle, out._handle,
                                  rows, cols)
    return out


def batchnorm_backward(x, dy, mean, invstd, weight, batch_stats, relu_out=None):
    """``(dx, dweight, dbias)`` of (x - mean) * invstd * weight + bias for the adjoint dy (rows, channels);
    with ``relu_out``, the output of a ReLU after it, dy is that ReLU's adjoint (it counts where
    relu_out > 0), applied in the same kernel."""
    x = _columns("batchnorm_backward", x, mean=mean, invstd=invstd, weight=weight)
    if relu_out is None:
        _same_layout("batchnorm_backward", x, dy=dy)
    else:
        _same_layout("batchnorm_backward", x, dy=dy, relu_out=relu_out)
    rows, cols = x.shape
    dev = x._device
    if not _has_kernel(dev, "batchnorm_backward"):
        return fused_specs.batchnorm_backward(NDARRAY, x, dy, mean, invstd, weight, batch_stats, relu_out)
    dx, dw, db = NDArray._new((rows, cols), dev), NDArray._new((cols,), dev), NDArray._new((cols,), dev)
    mask = () if relu_out is None else (relu_out.compact()._handle,)
    dev.batchnorm_backward(x._handle, dy.compact()._handle, mean.compact()._handle, invstd.compact()._handle,
                           weight.compact()._handle, dx._handle, dw._handle, db._handle, rows, cols, bool(batch_stats),
                           *mask)
    return dx, dw, db


def _layernorm_rows(name, x, **columns):
    if not isinstance(x, NDArray) or x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"{name}: x must be an NDArray (rows, features) with features >= 1, got shape "
                         f"{getattr(x, 'shape', None)}")
    _same_layout(name, NDArray._new((x.shape[1],), x._device), **columns)
    return x.compact()


def layernorm(x, weight, bias, eps):
    """``(out, mean, invstd)`` of the layer norm of each row of x (rows, features): the row's
    mean and inverse std, and out = (x - mean) * invstd * weight + bias, in one kernel."""
    x = _layernorm_rows("layernorm", x, weight=weight, bias=bias)
    rows, cols = x.shape
    dev = x._device
    if not _has_kernel(dev, "layernorm"):
        return fused_specs.layernorm(NDARRAY, x, weight, bias, eps)
    out, mean, invstd = NDArray._new((rows, cols), dev), NDArray._new((rows,), dev), NDArray._new((rows,), dev)
    dev.layernorm(x._handle, weight.compact()._handle, bias.compact()._handle, out._handle, mean._handle,
                  invstd._handle, rows, cols, eps)
    return out, mean, invstd


def layernorm_backward(x, dy, mean, invstd, weight):
    """``(dx, dweight, dbias)`` of layernorm's out for the adjoint dy (rows, features), with the
    mean and invstd (rows,) the forward kept, in one kernel."""
    x = _layernorm_rows("layernorm_backward", x, weight=weight)
    _same_layout("layernorm_backward", x, dy=dy)
    _same_layout("layernorm_backward", NDArray._new((x.shape[0],), x._device), mean=mean, invstd=invstd)
    rows, cols = x.shape
    dev = x._device
    if not _has_kernel(dev, "layernorm_backward"):
        return fused_specs.layernorm_backward(NDARRAY, x, dy, mean, invstd, weight)
    dx, dw, db = NDArray._new((rows, cols), dev), NDArray._new((cols,), dev), NDArray._new((cols,), dev)
    dev.layernorm_backward(x._handle, dy.compact()._handle, mean.compact()._handle, invstd.compact()._handle,
                           weight.compact()._handle, dx._handle, dw._handle, db._handle, rows, cols)
    return dx, dw, db


def rmsnorm(x, weight, eps):
    """``(out, invrms)`` of the RMS norm of each row of x (rows, features): the row's inverse root
    mean square and out = x * invrms * weight, in one kernel."""
    x = _layernorm_rows("rmsnorm", x, weight=weight)
    rows, cols = x.shape
    dev = x._device
    if not _has_kernel(dev, "rmsnorm"):
        return fused_specs.rmsnorm(NDARRAY, x, weight, eps)
    out, invrms = NDArray._new((rows, cols), dev), NDArray._new((rows,), dev)
    dev.rmsnorm(x._handle, weight.compact()._handle, out._handle, invrms._handle, rows, cols, eps)
    return out, invrms


def rmsnorm_backward(x, dy, invrms, weight):
    """``(dx, dweight)`` of rmsnorm's out for the adjoint dy (rows, features), with the invrms
    (rows,) the forward kept, in one kernel."""
    x = _layernorm_rows("rmsnorm_backward", x, weight=weight)
    _same_layout("rmsnorm_backward", x, dy=dy)
    _same_layout("rmsnorm_backward", NDArray._new((x.shape[0],), x._device), invrms=invrms)
    rows, cols = x.shape
    dev = x._device
    if not _has_kernel(dev, "rmsnorm_backward"):
        return fused_specs.rmsnorm_backward(NDARRAY, x, dy.compact(), invrms, weight)
    dx, dw = NDArray._new((rows, cols), dev), NDArray._new((cols,), dev)
    dev.rmsnorm_backward(x._handle, dy.compact()._handle, invrms.compact()._handle, weight.compact()._handle,
                         dx._handle, dw._handle, rows, cols)
    return dx, dw


def _lstm_args(name, z, c0, *states):
    if not isinstance(z, NDArray) or z.ndim != 2 or z.shape[1] % 4 or z.shape[1] == 0:
        raise ValueError(f"{name}: gates must be an NDArray (rows, 4 * hidden), got shape {getattr(z, 'shape', None)}")
    shape = (z.shape[0], z.shape[1] // 4)
    _same_layout(name, NDArray._new(shape, z._device), c0=c0, **{f"state{k}": s for k, s in enumerate(states)})
    return z.compact(), shape


def lstm_cell(z, c0):
    """``(h, c)`` of one LSTM step from the gate pre-activations z (rows, 4 * hidden), [i | f | g | o]
    per row, and the previous cell c0 (rows, hidden), in one kernel."""
    z, shape = _lstm_args("lstm_cell", z, c0)
    dev = z._device
    if not _has_kernel(dev, "lstm_cell"):
        return fused_specs.lstm_cell(NDARRAY, z, c0)
    h, c = NDArray._new(shape, dev), NDArray._new(shape, dev)
    dev.lstm_cell(z._handle, c0.compact()._handle, h._handle, c._handle, *shape)
    return h, c


def lstm_cell_backward(z, c0, dh, dc):
    """``(dz, dc0)``: the adjoints of lstm_cell's inputs given those of its outputs (dh, dc)."""
    z, shape = _lstm_args("lstm_cell_backward", z, c0, dh, dc)
    dev = z._device
    if not _has_kernel(dev, "lstm_cell_backward"):
        return fused_specs.lstm_cell_backward(NDARRAY, z, c0, dh, dc)
    dz, dc0 = NDArray._new(z.shape, dev), NDArray._new(shape, dev)
    dev.lstm_cell_backward(z._handle, c0.compact()._handle, dh.compact()._handle, dc.compact()._handle,
                           dz._handle, dc0._handle, *shape)
    return dz, dc0


def _activation_adjoint(name, g, x, generic):
    """out = g * f'(x) for an activation's adjoint kernel ``ewise_<name>`` (g and x of one shape);
    ``generic(g, x)`` computes it with other operations on a device without that kernel."""
    if type(g) is NDArray and type(x) is NDArray and x._shape == g._shape and x._device is g._device:
        size = g._csize  # (read first, as in NDArray._ewise_or_scalar)
        if size is None:
            size = g._compact_size()
        kernel = getattr(g._device, "ewise_" + name, None)
        if size >= 0 and kernel is not None and (
                x._csize == size or x._csize is None and x._compact_size() == size):  # the usual operands
            out = g._like_compact(size)
            kernel(g._handle, x._handle, out._handle)
            return out
    _same_layout(name, g, x=x)
    dev = g._device
    if not _has_kernel(dev, "ewise_" + name):
        return generic(g, x)
    layout = g._pair_layout(x)
    if layout is not None:  # a dense transposed layout (see NDArray._pair_layout)
        g, x, out = g._in_layout_of(layout), x._in_layout_of(layout), layout._empty_like_dense()
        getattr(dev, "ewise_" + name)(g._handle, x._handle, out._handle)
        return out
    out = NDArray._new(g._shape, dev)
    getattr(dev, "ewise_" + name)(g.compact()._handle, x.compact()._handle, out._handle)
    return out


# The adjoints below without their kernels, module-level functions rather than a lambda per call
def _relu_adjoint(g, x):
    return g * (x > 0.0)


def _tanh_adjoint(g, y):
    return g * ((1.0 - y) * (y + 1.0))


def _sigmoid_adjoint(g, y):
    return g * y * (1.0 - y)


def relu_backward(g, x):
    """g * (x > 0): relu's adjoint for out_grad g at its input x, in one kernel."""
    return _activation_adjoint("relu_backward", g, x, _relu_adjoint)


def tanh_backward(g, y):
    """g * (1 - y) * (1 + y): tanh's adjoint for out_grad g at its output y, in one kernel."""
    return _activation_adjoint("tanh_backward", g, y, _tanh_adjoint)


def sigmoid_backward(g, y):
    """g * y * (1 - y): sigmoid's adjoint for out_grad g at its output y, in one kernel."""
    return _activation_adjoint("sigmoid_backward", g, y, _sigmoid_adjoint)


def _embedding_ids(name, ids, device):
    if not isinstance(ids, NDArray) or ids.ndim != 1 or ids._device != device:
        raise ValueError(f"{name}: ids must be a 1-D NDArray on {device}, got shape {getattr(ids, 'shape', None)} "
                         f"on {getattr(ids, 'device', None)}")
    return ids.compact()


def embedding_gather(weight, ids):
    """The rows of weight (N, D) that ids (R,: integer-valued) name, (R, D): an embedding's
    lookup, in one kernel (on a device without it, through the host)."""
    if not isinstance(weight, NDArray) or weight.ndim != 2:
        raise ValueError(f"embedding_gather: weight must be an NDArray (N, D), got shape {getattr(weight, 'shape', None)}")
    ids = _embedding_ids("embedding_gather", ids, weight._device)
    (n, d), r = weight.shape, ids.shape[0]
    if not _has_kernel(weight._device, "embedding_gather"):
        rows = np.asarray(weight)[class_indices(np.asarray(ids), n, "embedding_gather")]
        return NDArray(rows, device=weight._device)
    out = NDArray._new((r, d), weight._device)
    weight._device.embedding_gather(weight.compact()._handle, ids._handle, out._handle, n, r, d)
    return out


def embedding_scatter(g, ids, num_rows):
    """(num_rows, D): row n the sum of the rows of g (R, D) whose id is n (one_hot(ids)^T @ g,
    the adjoint of embedding_gather), in one kernel (on a device without it, through the host)."""
    if not isinstance(g, NDArray) or g.ndim != 2:
        raise ValueError(f"embedding_scatter: g must be an NDArray (R, D), got shape {getattr(g, 'shape', None)}")
    ids = _embedding_ids("embedding_scatter", ids, g._device)
    if ids.shape[0] != g.shape[0]:
        raise ValueError(f"embedding_scatter: {ids.shape[0]} ids for {g.shape[0]} rows of g")
    r, d = g.shape
    if not _has_kernel(g._device, "embedding_scatter"):
        idx = class_indices(np.asarray(ids), num_rows, "embedding_scatter")
        return NDArray(scatter_rows(np.asarray(g), idx, num_rows), device=g._device)
    out = NDArray._new((int(num_rows), d), g._device)
    g._device.embedding_scatter(g.compact()._handle, ids._handle, out._handle, num_rows, r, d)
    return out


def matmul_bias(x, w, bias):
    """x (m, n) @ w (n, p) + bias (p elements) on every row: a linear layer's forward. The
    device's kernel adds the bias as it stores each tile of the product; without it (or for
    operands that are views) the product is made first and the bias added into it."""
    if not (isinstance(x, NDArray) and isinstance(w, NDArray) and x.ndim == 2 and w.ndim == 2
            and x.shape[1] == w.shape[0] and isinstance(bias, NDArray) and bias.size == w.shape[1]):
        raise ValueError(f"matmul_bias: x, w and bias must be NDArrays (m, n), (n, p) and of p elements, got shapes "
                         f"{getattr(x, 'shape', None)}, {getattr(w, 'shape', None)} and {getattr(bias, 'shape', None)}")
    dev = x._device
    if not (_has_kernel(dev, "matmul_bias") and w._device is dev and bias._device is dev
            and x.is_compact() and w.is_compact()):
        return bias_add(x @ w, bias, in_place=True)  # the product is this call's own array
    (m, n), p = x.shape, w.shape[1]
    out = NDArray._new((m, p), dev)
    dev.matmul_bias(x._handle, w._handle, bias.compact()._handle, out._handle, m, n, p)
    return out


def bias_add(x, bias, in_place=False):
    """x (rows, cols) + bias (cols elements, any shape) on every row, in one kernel.

    ``in_place``: written into x's own buffer (x compact) and x returned, for a caller that
    owns x, such as a product it has just made: a third 20 MB stream costs more than the add."""
    if not isinstance(x, NDArray) or x.ndim != 2:
        raise ValueError(f"bias_add: x must be an NDArray (rows, cols), got shape {getattr(x, 'shape', None)}")
    rows, cols = x.shape
    if not isinstance(bias, NDArray) or bias.size != cols or bias._device != x._device:
        raise ValueError(f"bias_add: bias must be an NDArray of {cols} elements on {x._device}, got shape "
                         f"{getattr(bias, 'shape', None)} on {getattr(bias, 'device', None)}")
    if in_place and not x.is_compact():
        raise ValueError(f"bias_add: in_place needs a compact x, got strides {x.strides} at offset {x._offset}")
    if not _has_kernel(x._device, "bias_add"):
        row = bias.reshape((1, cols)).broadcast_to((rows, cols))
        if in_place:
            x += row
            return x
        return x + row
    out = x if in_place else NDArray._new((rows, cols), x._device)
    x._device.bias_add(x.compact()._handle, bias.compact()._handle, out._handle, rows, cols)
    return out
