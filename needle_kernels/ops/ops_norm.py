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
from .. import autograd
from ..autograd import SavedForBackward, Tensor, TensorOp, TensorTupleOp
from ..backend_selection import array_api


def _as_rows(x, nchw):
    """The array x as (rows, channels): itself, or an NCHW x's (N*H*W, C) view, a view without
    a copy when its memory is NHWC (as a convolution's output is)."""
    if not nchw:
        return x
    n, c, h, w = x.shape
    return array_api.reshape(array_api.transpose(x, (0, 2, 3, 1)), (n * h * w, c))


def _from_rows(rows, shape, nchw):
    """The inverse of _as_rows for an array of ``shape``."""
    if not nchw:
        return rows
    n, c, h, w = shape
    return array_api.transpose(array_api.reshape(rows, (n, h, w, c)), (0, 3, 1, 2))


def _check_nchw(x, nchw, name):
    if nchw and x.ndim != 4:
        raise ValueError(f"{name}: nchw needs an (N, C, H, W) input, got shape {tuple(x.shape)}")


def _fused_gradients(grad_op, x, weight, out_grad):
    """(dx, dweight[, dbias]) by a normalisation's fused gradient op on (x, weight, out_grad): its
    arrays as constants when nothing will differentiate them, else its one tuple node."""
    if not autograd.RECORDING:  # the arrays, without tuple nodes
        arrays = grad_op.compute(x.realize_cached_data(), weight.realize_cached_data(), out_grad.realize_cached_data())
        return tuple(Tensor.make_const(a) for a in arrays)
    grads = grad_op(x, weight, out_grad)
    return tuple(grads[k] for k in range(len(grads)))


def batch_statistics(x, nchw=False):
    """``(mean, var)``: arrays of the column means and biased variances of the Tensor x (rows,
    channels), or with ``nchw`` of the channels of x (N, C, H, W) over N, H and W."""
    data = x.realize_cached_data()
    _check_nchw(data, nchw, "batch_statistics")
    return array_api.batchnorm_stats(_as_rows(data, nchw))


class BatchNormRows(TensorOp):
    """out = (x - mean) * invstd * weight + bias for inputs (x (rows, C), weight (C,), bias (C,)).

    ``mean`` and ``invstd`` (arrays (C,)) are the batch's own statistics when ``batch_stats``
    (training: they depend on x) or the running ones (eval: constants). With xhat = (x - mean) * invstd:
    dbias = sum_rows g, dweight = sum_rows g * xhat, and
    dx = weight * invstd * (g - dbias / rows - xhat * dweight / rows) with batch statistics,
    weight * invstd * g without. With ``nchw``, x is (N, C, H, W) and its rows are the
    (N*H*W, C) view (see _as_rows): BatchNorm2d in one op, with no transposes in the graph.
    With ``relu``, out = max(that, 0): the ReLU a block puts after its batch norm, in the same
    pass, and its gradient (g where out > 0) taken before the batch norm's.
    ``folded``: ``(weight, bias, scale, shift)`` arrays worked out beforehand (batchnorm_fold);
    the scale and shift are used when the op meets those very weight and bias arrays, and
    recomputed otherwise.
    """

    def __init__(self, mean, invstd, batch_stats, nchw=False, relu=False, folded=None):
        self.mean, self.invstd, self.batch_stats, self.nchw = mean, invstd, bool(batch_stats), bool(nchw)
        self.relu, self.folded = bool(relu), folded

    def compute(self, x, weight, bias):
        _check_nchw(x, self.nchw, "batch_norm_rows")
        if self.folded is not None and weight is self.folded[0] and bias is self.folded[1]:
            scale, shift = self.folded[2], self.folded[3]
        else:
            scale = weight * self.invstd
            shift = bias - self.mean * scale
        out = array_api.batchnorm_apply(_as_rows(x, self.nchw), scale, shift, self.relu)
        return _from_rows(out, x.shape, self.nchw)

    def gradient(self, out_grad, node):
        x, weight, _ = node.inputs
        grad_op = BatchNormRowsGrad(self.mean, self.invstd, self.batch_stats, self.nchw,
                                    node.realize_cached_data() if self.relu else None)
        return _fused_gradients(grad_op, x, weight, out_grad)


class BatchNormRowsGrad(TensorTupleOp):
    """(dx, dweight, dbias) of BatchNormRows for inputs (x, weight, g), in one fused kernel;
    ``relu_out``: the output of a BatchNormRows with ``relu``, whose mask g passes through first."""

    def __init__(self, mean, invstd, batch_stats, nchw=False, relu_out=None):
        self.mean, self.invstd, self.batch_stats, self.nchw = mean, invstd, batch_stats, nchw
        self.relu_out = relu_out

    def compute(self, x, weight, out_grad):
        relu_out = None if self.relu_out is None else _as_rows(self.relu_out, self.nchw)
        dx, dweight, dbias = array_api.batchnorm_backward(
            _as_rows(x, self.nchw), _as_rows(out_grad, self.nchw), self.mean, self.invstd, weight, self.batch_stats,
            relu_out)
        return _from_rows(dx, x.shape, self.nchw), dweight, dbias

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "the fused batch norm is differentiable once; for higher derivatives build the module "
            "with fused=False (the same normalisation in generic ops)")


def batch_norm_rows(x, weight, bias, mean, var, eps, batch_stats, nchw=False, relu=False, folded=None):
    """Batch norm of the Tensor x (rows, C), or (N, C, H, W) with ``nchw``, with the arrays mean
    and var (C,), followed by a ReLU with ``relu``: see BatchNormRows. ``folded``: the
    ``(weight, bias, invstd, scale, shift)`` arrays of batchnorm_fold, when already worked out."""
    if folded is None:
        return BatchNormRows(mean, (var + eps) ** -0.5, batch_stats, nchw, relu)(x, weight, bias)
    w, b, invstd, scale, shift = folded
    return BatchNormRows(mean, invstd, batch_stats, nchw, relu, (w, b, scale, shift))(x, weight, bias)


class LayerNormRows(TensorOp):
    """out = (x - mean) * invstd * weight + bias for inputs (x (rows, F), weight (F,), bias (F,)),
    each row normalised by its own mean and biased variance over its F features (a layer norm).

    One kernel each way, where the same formulas in generic ops take about twenty nodes and
    as many full-size temporaries: the forward keeps the rows' mean and invstd, and with
    xhat = (x - mean) * invstd and gw = g * weight the backward gives dbias = sum_rows g,
    dweight = sum_rows g * xhat and dx = invstd * (gw - mean_F(gw) - xhat * mean_F(gw * xhat)).
    The generic version stays in ``nn.LayerNorm1d(fused=False)``, the readable reference.
    """

    def __init__(self, eps):
        self.eps = float(eps)

    def compute(self, x, weight, bias):
        out, mean, invstd = array_api.layernorm(x, weight, bias, self.eps)
        return SavedForBackward(out, (mean, invstd))

    def gradient(self, out_grad, node):
        x, weight, _ = node.inputs
        if node.saved is None:  # built around a known output: the statistics again
            node.saved = self.compute(*(t.realize_cached_data() for t in node.inputs)).saved
        return _fused_gradients(LayerNormRowsGrad(*node.saved), x, weight, out_grad)

    def decompose(self, x, weight, bias):
        """The same normalisation in generic ops (what the compiler and the ONNX exporter know)."""
        from .ops_mathematic import broadcast_to, reshape, summation

        rows, features = x.shape
        mean = broadcast_to(reshape(summation(x, (1,)) / features, (rows, 1)), x.shape)
        centered = x - mean
        var = reshape(summation(centered * centered, (1,)) / features, (rows, 1))
        inv_std = broadcast_to((var + self.eps) ** -0.5, x.shape)
        w = broadcast_to(reshape(weight, (1, features)), x.shape)
        b = broadcast_to(reshape(bias, (1, features)), x.shape)
        return centered * inv_std * w + b


class LayerNormRowsGrad(TensorTupleOp):
    """(dx, dweight, dbias) of LayerNormRows for inputs (x, weight, g), in one fused kernel."""

    def __init__(self, mean, invstd):
        self.mean, self.invstd = mean, invstd

    def compute(self, x, weight, out_grad):
        return tuple(array_api.layernorm_backward(x, out_grad, self.mean, self.invstd, weight))

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "the fused layer norm is differentiable once; for higher derivatives build the module "
            "with fused=False (the same normalisation in generic ops)")


def layer_norm(x, weight, bias, eps):
    """Layer norm of each row of the Tensor x (rows, F) with weight and bias (F,): see LayerNormRows."""
    return LayerNormRows(eps)(x, weight, bias)


class RMSNormRows(TensorOp):
    """out = x * invrms * weight for inputs (x (rows, F), weight (F,)), with each row's
    invrms = (mean_F(x^2) + eps)^-1/2: a layer norm without the centring and the bias (as in
    LLaMA-style Transformers).

    One kernel each way: the forward keeps invrms, and with xhat = x * invrms and gw = g * weight
    the backward gives dweight = sum_rows g * xhat and dx = invrms * (gw - xhat * mean_F(gw * xhat)).
    """

    def __init__(self, eps):
        self.eps = float(eps)

    def compute(self, x, weight):
        out, invrms = array_api.rmsnorm(x, weight, self.eps)
        return SavedForBackward(out, invrms)

    def gradient(self, out_grad, node):
        x, weight = node.inputs
        if node.saved is None:  # built around a known output: the statistics again
            node.saved = self.compute(*(t.realize_cached_data() for t in node.inputs)).saved
        return _fused_gradients(RMSNormRowsGrad(node.saved), x, weight, out_grad)

    def decompose(self, x, weight):
        """The same normalisation in generic ops (what the compiler and the ONNX exporter know)."""
        from .ops_mathematic import broadcast_to, reshape, summation

        rows, features = x.shape
        mean_square = reshape(summation(x * x, (1,)) / features, (rows, 1))
        invrms = broadcast_to((mean_square + self.eps) ** -0.5, x.shape)
        return x * invrms * broadcast_to(reshape(weight, (1, features)), x.shape)


class RMSNormRowsGrad(TensorTupleOp):
    """(dx, dweight) of RMSNormRows for inputs (x, weight, g), in one fused kernel."""

    def __init__(self, invrms):
        self.invrms = invrms

    def compute(self, x, weight, out_grad):
        return tuple(array_api.rmsnorm_backward(x, out_grad, self.invrms, weight))

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "the fused RMS norm is differentiable once; for higher derivatives write the module's "
            "formula with generic ops (RMSNormRows.decompose)")


def rms_norm(x, weight, eps):
    """RMS norm of each row of the Tensor x (rows, F) with weight (F,): see RMSNormRows."""
    return RMSNormRows(eps)(x, weight)
