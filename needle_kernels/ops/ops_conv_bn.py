"""A convolution, the batch norm after it and (optionally) a ReLU, in training: one op each way.

``Conv -> BatchNorm2d -> ReLU`` (ResNet9's ConvBN) is already two fused ops, ``conv_nchw``
and ``batch_norm_rows``; as two they cost two graph nodes, and between them the NCHW Tensor
the convolution hands to the batch norm is taken apart into NHWC rows and put back together
again, each way. As one op the batch norm runs on the rows the convolution has just written
(its NHWC output seen as (N*Ho*Wo, C), no view to undo), and the backward is one call: the
batch norm's kernel, then the convolution's gradient on the result, both on arrays.

The computation is exactly the two ops': the same kernels in the same order (conv, bias,
batch statistics, fold, apply; then the batch norm's backward and the convolution's), so the
block trains the same as its modules one after another. The two-op form stays what a traced
model and an evaluation-mode block run, and what the tests compare this op with.
"""
from .. import autograd
from ..autograd import SavedForBackward, Tensor, TensorOp
from ..backend_selection import array_api
from .ops_conv import Conv, ConvNCHW
from .ops_norm import BatchNormRows


class ConvBatchNorm(TensorOp):
    """out = relu?(batch_norm(conv_nchw(x, weight, bias))) in training mode, for inputs
    (x (N, C_in, H, W), weight (K, K, C_in, C_out), bn_weight (C_out,), bn_bias (C_out,)) and,
    with ``bias``, the convolution's bias (C_out,) last.

    The batch norm uses the batch's statistics; the running averages it updates
    (``running_mean``, ``running_var``: arrays given to the op) are left in ``self.running``
    for the module that owns them. Differentiable once, like the fused batch norm.
    """

    def __init__(self, stride, padding, eps, momentum, running_mean, running_var, relu=True):
        self.conv = Conv(stride, padding)
        self.eps, self.momentum, self.relu = float(eps), float(momentum), bool(relu)
        self.running = (running_mean, running_var)

    def compute(self, x, weight, bn_weight, bn_bias, bias=None):
        if x.ndim != 4:
            raise ValueError(f"conv_batch_norm: needs an NCHW array, got shape {tuple(x.shape)}")
        result = self.conv.compute(array_api.transpose(x, (0, 2, 3, 1)), weight)
        nhwc = result.output
        c = nhwc.shape[3]
        for name, v in (("bias", bias), ("bn_weight", bn_weight), ("bn_bias", bn_bias)):
            if v is not None and tuple(v.shape) != (c,):
                raise ValueError(f"conv_batch_norm: {name} of shape {tuple(v.shape)} for {c} output channels")
        rows = array_api.reshape(nhwc, (-1, c))  # a view: the convolution's output is compact NHWC
        if bias is not None:
            rows = array_api.bias_add(rows, bias, in_place=True)  # its own output
        mean, var = array_api.batchnorm_stats(rows)
        invstd, scale, shift, running_mean, running_var = array_api.batchnorm_fold(
            mean, var, bn_weight, bn_bias, *self.running, self.eps, self.momentum)
        self.running = (running_mean, running_var)
        out = array_api.reshape(array_api.batchnorm_apply(rows, scale, shift, self.relu), nhwc.shape)
        return SavedForBackward(array_api.transpose(out, (0, 3, 1, 2)), (result.saved, rows, mean, invstd))

    def gradient(self, out_grad, node):
        if node.saved is None:  # built around a known output (make_with_data): compute the arrays
            node.saved = self.compute(*(t.realize_cached_data() for t in node.inputs)).saved
        if autograd.RECORDING:
            return self._recorded_gradient(out_grad, node)
        conv_saved, rows, mean, invstd = node.saved
        x, weight, bn_weight = node.inputs[:3]
        n, c_in, h, w = x.shape
        g = array_api.transpose(out_grad.realize_cached_data(), (0, 2, 3, 1))
        relu_out = None
        if self.relu:
            relu_out = array_api.reshape(array_api.transpose(node.realize_cached_data(), (0, 2, 3, 1)), rows.shape)
        dconv, dbn_weight, dbn_bias = array_api.batchnorm_backward(
            rows, array_api.reshape(g, rows.shape), mean, invstd, bn_weight.realize_cached_data(), True, relu_out)
        dconv = array_api.reshape(dconv, g.shape)
        d_nhwc, dweight = self.conv.gradient_arrays((n, h, w, c_in), weight.realize_cached_data(), dconv,
                                                    conv_saved, x.requires_grad, weight.requires_grad)
        grads = (None if d_nhwc is None else array_api.transpose(d_nhwc, (0, 3, 1, 2)), dweight, dbn_weight, dbn_bias)
        if len(node.inputs) == 5:  # the convolution's bias
            grads += (array_api.sum(dconv, axis=(0, 1, 2)),)
        return tuple(None if d is None else Tensor.make_const(d) for d in grads)

    def _recorded_gradient(self, out_grad, node):
        """The gradients as graph nodes (backward with create_graph=True): the two ops' own
        gradients, around nodes rebuilt from the arrays this op computed."""
        conv_saved, rows, mean, invstd = node.saved
        x, weight, bn_weight, bn_bias = node.inputs[:4]
        conv_op = ConvNCHW(self.conv.stride, self.conv.padding)
        n, c, ho, wo = node.realize_cached_data().shape
        conv_out = array_api.transpose(array_api.reshape(rows, (n, ho, wo, c)), (0, 3, 1, 2))
        conv_node = Tensor.make_with_data(conv_op, [x, weight] + node.inputs[4:], conv_out)
        conv_node.saved = conv_saved
        bn_op = BatchNormRows(mean, invstd, True, nchw=True, relu=self.relu)
        bn_node = Tensor.make_with_data(bn_op, [conv_node, bn_weight, bn_bias], node.realize_cached_data())
        dconv, dbn_weight, dbn_bias = bn_op.gradient(out_grad, bn_node)
        conv_grads = conv_op.gradient(dconv, conv_node)
        return (conv_grads[0], conv_grads[1], dbn_weight, dbn_bias) + tuple(conv_grads[2:])


def conv_batch_norm(x, weight, bias, bn_weight, bn_bias, stride, padding, eps, momentum, running_mean,
                    running_var, relu=True):
    """``(out, (new_running_mean, new_running_var))``: the training-mode block of ConvBatchNorm
    on the Tensors x, weight, bias (or None), bn_weight and bn_bias, with the running averages
    given and returned as arrays."""
    op = ConvBatchNorm(stride, padding, eps, momentum, running_mean, running_var, relu)
    out = op(x, weight, bn_weight, bn_bias) if bias is None else op(x, weight, bn_weight, bn_bias, bias)
    return out, op.running
