"""A convolution, the batch norm after it and (optionally) a ReLU, in training: one op each way.

``Conv -> BatchNorm2d -> ReLU`` (ResNet9's ConvBN) is already two fused ops, ``conv_nchw``
and ``batch_norm_rows``; as two they cost two graph nodes, and between them the NCHW Tensor
the convolution hands to the batch norm is taken apart into NHWC rows and put back together
again, each way. As one op the batch norm runs on the rows the convolution has just written
(its NHWC output seen as (N*Ho*Wo, C), no view to undo), and the backward is one op: the batch
norm's kernel, then the convolution's gradients (its gradient ops' kernels) on the result.

The computation is exactly the two ops': the same kernels in the same order (conv, bias,
batch statistics, fold, apply; then the batch norm's backward and the convolution's), so the
block trains the same as its modules one after another. The two-op form stays what a traced
model and an evaluation-mode block run, and what the tests compare this op with.
"""
from .. import autograd
from ..autograd import SavedForBackward, Tensor, TensorOp, TensorTupleOp
from ..backend_selection import array_api, device_of
from .ops_conv import Conv


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
        x, weight, bn_weight = node.inputs[:3]
        grad_op = ConvBatchNormGradient(self.conv, node.saved, node.realize_cached_data() if self.relu else None,
                                        x.requires_grad, len(node.inputs) == 5)
        inputs = (x, weight, bn_weight, out_grad)
        if autograd.RECORDING:  # one tuple node, so that differentiating again meets its refusal
            grads = grad_op(*inputs)
            grads = [grads[i] for i in range(len(grads))]
        else:  # nothing will differentiate them: the arrays, without a tuple node and its items
            grads = [Tensor.make_const(a) for a in grad_op.compute(*(t.realize_cached_data() for t in inputs))]
        return (grads[0] if x.requires_grad else None, *grads[1:])


class ConvBatchNormGradient(TensorTupleOp):
    """(dx, dweight, dbn_weight, dbn_bias[, dbias]) of a ConvBatchNorm node for inputs (x, weight,
    bn_weight, g): the batch norm's fused backward (batchnorm_backward) on the rows its forward
    kept, giving dbn_weight, dbn_bias and the convolution's output gradient G (dbias = G summed
    over N, H and W), then the convolution's own gradients of G, ConvInputGradient (dx) and
    ConvWeightGradient (dweight), on the NHWC views the forward used.

    ``saved``: the node's arrays; ``relu_out``: its output, when it has a ReLU; ``need_x``: False
    leaves dx zero (a data batch's gradient costs a col2im). Differentiable once, like the fused
    batch norm.
    """

    def __init__(self, conv, saved, relu_out, need_x, with_bias):
        self.conv, self.saved, self.relu_out = conv, saved, relu_out
        self.need_x, self.with_bias = need_x, with_bias

    def compute(self, x, weight, bn_weight, out_grad):
        conv_saved, rows, mean, invstd = self.saved
        g = array_api.transpose(out_grad, (0, 2, 3, 1))
        relu_rows = None
        if self.relu_out is not None:
            relu_rows = array_api.reshape(array_api.transpose(self.relu_out, (0, 2, 3, 1)), rows.shape)
        dconv, dbn_weight, dbn_bias = array_api.batchnorm_backward(
            rows, array_api.reshape(g, rows.shape), mean, invstd, bn_weight, True, relu_rows)
        dconv = array_api.reshape(dconv, g.shape)
        image = conv_saved[0]  # x as the NHWC view the convolution read
        input_gradient, weight_gradient = self.conv.gradient_ops(image.shape, weight.shape[0], conv_saved)
        dweight = weight_gradient.compute(image, dconv)
        if self.need_x:
            dx = array_api.transpose(input_gradient.compute(weight, dconv), (0, 3, 1, 2))
        else:
            dx = array_api.broadcast_to(array_api.full((1, 1, 1, 1), 0.0, dtype=x.dtype, device=device_of(x)), x.shape)
        dbias = (array_api.sum(dconv, axis=(0, 1, 2)),) if self.with_bias else ()
        return (dx, dweight, dbn_weight, dbn_bias) + dbias

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "conv_batch_norm is differentiable once; for higher derivatives use the modules one after "
            "another with the batch norm's fused=False")


def conv_batch_norm(x, weight, bias, bn_weight, bn_bias, stride, padding, eps, momentum, running_mean,
                    running_var, relu=True):
    """``(out, (new_running_mean, new_running_var))``: the training-mode block of ConvBatchNorm
    on the Tensors x, weight, bias (or None), bn_weight and bn_bias, with the running averages
    given and returned as arrays."""
    op = ConvBatchNorm(stride, padding, eps, momentum, running_mean, running_var, relu)
    out = op(x, weight, bn_weight, bn_bias) if bias is None else op(x, weight, bn_weight, bn_bias, bias)
    return out, op.running
