"""Gradients that are ops of their own (Conv's, MatMulBias's, Softmax's): differentiated again
with respect to every input they read, the output's adjoint included, against central differences."""
import numpy as np
import pytest

import needle_kernels as ndl
from op_checks import check_gradients, rand


@pytest.fixture(params=["im2col", "implicit"])
def conv_path(request, monkeypatch):
    """Convolutions through the im2col matrix, and (where the device has the kernels) through the
    backend's implicit im2col, whatever the size of the matrix."""
    from needle_kernels.ops import ops_conv

    monkeypatch.setattr(ops_conv, "IMPLICIT_MIN_FLOATS", 0 if request.param == "implicit" else 1 << 62)
    return request.param


def second_order(first, shapes, device, wrt=None):
    """Check d/d(inputs) of sum_i <grad_i, W_i>, where grad_i are the gradients of sum(first(*inputs) * G)
    taken with create_graph=True, G (the output's adjoint) the last input and W_i fixed random arrays;
    ``wrt``: the inputs that sum depends on (default: all)."""
    *inputs, out_shape = shapes
    weights = [rand(*s) for s in inputs]

    def gradients(*tensors):
        *args, g = tensors
        (first(*args) * g).sum().backward(create_graph=True)
        return sum(((t.grad * ndl.Tensor(w, device=device)).sum() for t, w in zip(args, weights)), start=0)

    check_gradients(gradients, *[rand(*s) for s in inputs], rand(*out_shape), device=device, wrt=wrt)


# conv is bilinear, its gradients ConvInputGradient (linear in B and g) and ConvWeightGradient (in A and g)
@pytest.mark.parametrize("shape, k, stride, padding", [
    ((1, 5, 5, 2), 3, 2, 1),  # stride 2 and padding: dA by col2im, then cropped
    ((1, 4, 4, 2), 3, 1, 1),  # stride 1: dA is itself a convolution
    ((2, 2, 2, 2), 3, 2, 1),  # a corner block of taps only (the others meet padding alone)
    ((1, 1, 1, 2), 3, 1, 1),  # a 1x1 image: the kernel cropped to its centre tap
    ((1, 3, 3, 2), 5, 3, 2),  # a kernel larger than the image, its first two taps only on padding
])
@pytest.mark.parametrize("winograd", [False, True])
def test_conv_second_order(device, conv_path, shape, k, stride, padding, winograd, monkeypatch):
    from needle_kernels.ops import ops_conv

    if winograd:  # every 3x3 stride-1 convolution and weight gradient by Winograd, where the device has it
        for name in ("WINOGRAD_MIN_CHANNELS", "WINOGRAD_MIN_PIXELS", "WINOGRAD_DW_MIN_PIXELS"):
            monkeypatch.setattr(ops_conv, name, 0)
    conv = lambda a, b: ndl.conv(a, b, stride=stride, padding=padding)
    b_shape = (k, k, shape[3], 3)
    out_shape = conv(ndl.Tensor(rand(*shape), device=device), ndl.Tensor(rand(*b_shape), device=device)).shape
    second_order(conv, [shape, b_shape, out_shape], device)


def test_conv_nchw_second_order(device, conv_path):
    conv = lambda x, w, b: ndl.ops.conv_nchw(x, w, b, stride=2, padding=1)
    # no gradient depends on the bias
    second_order(conv, [(2, 2, 4, 4), (3, 3, 2, 3), (3,), (2, 3, 2, 2)], device, wrt=(0, 1, 3))


def test_matmul_bias_second_order(device):
    # no gradient depends on the bias
    second_order(ndl.matmul_bias, [(4, 3), (3, 5), (5,), (4, 5)], device, wrt=(0, 1, 3))
    second_order(ndl.matmul_bias, [(4, 3), (3, 5), (1, 5), (4, 5)], device, wrt=(0, 1, 3))


def test_softmax_second_order(device):
    second_order(ndl.softmax, [(3, 5), (3, 5)], device)
    second_order(ndl.softmax, [(2, 3, 4), (2, 3, 4)], device)
