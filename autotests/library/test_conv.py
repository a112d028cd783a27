"""Convolution (im2col), its transpose, and pooling: forward against numpy loops, gradients numerically."""
import numpy as np
import pytest

import needle_kernels as ndl
from op_checks import check_gradients, check_op, check_second_order, rand


def np_conv(A, B, stride=1, padding=0):
    """Reference NHWC convolution: a loop over kernel offsets, each a matrix product."""
    A = np.pad(A, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    n, h, w, _ = A.shape
    k = B.shape[0]
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.zeros((n, ho, wo, B.shape[3]))
    for i in range(k):
        for j in range(k):
            out += A[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride, :] @ B[i, j]
    return out


def np_conv_transpose(x, B, stride, padding, output_padding=0):
    """Reference: scatter every input pixel times its kernel (B is (K, K, C_out, C_in))."""
    n, h, w, _ = x.shape
    k = B.shape[0]
    full = np.zeros((n, (h - 1) * stride + k, (w - 1) * stride + k, B.shape[2]))
    for i in range(k):
        for j in range(k):
            full[:, i:i + stride * (h - 1) + 1:stride, j:j + stride * (w - 1) + 1:stride, :] += x @ B[i, j].T
    oh = full.shape[1] - 2 * padding + output_padding
    ow = full.shape[2] - 2 * padding + output_padding
    full = np.pad(full, ((0, 0), (0, output_padding), (0, output_padding), (0, 0)))
    return full[:, padding:padding + oh, padding:padding + ow, :]


def np_pool(x, k, s, reduce):
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = reduce(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


@pytest.fixture(autouse=True, params=["im2col", "implicit"])
def conv_path(request, monkeypatch):
    """Every test twice: convolutions through the im2col matrix, and (where the device has the
    kernels) through the backend's implicit im2col, whatever the size of the matrix."""
    from needle_kernels.ops import ops_conv

    monkeypatch.setattr(ops_conv, "IMPLICIT_MIN_FLOATS", 0 if request.param == "implicit" else 1 << 62)
    return request.param


def distinct(*shape):
    # well separated values: max pooling's argmax cannot move under the finite-difference step
    return (np.random.permutation(int(np.prod(shape))).reshape(shape) * 0.1).astype(np.float32)


@pytest.mark.parametrize("stride, padding", [(1, 0), (1, 1), (2, 1), (2, 0), (3, 2)])
def test_conv(device, stride, padding):
    check_op(lambda a, b: ndl.conv(a, b, stride=stride, padding=padding),
             lambda a, b: np_conv(a, b, stride, padding),
             rand(2, 6, 5, 3), rand(3, 3, 3, 2), device=device, rtol=1e-4, atol=1e-4)


def test_conv_1x1_and_large_kernel(device):
    check_op(lambda a, b: ndl.conv(a, b, padding=0), lambda a, b: np_conv(a, b), rand(1, 3, 3, 4), rand(1, 1, 4, 2), device=device)
    check_op(lambda a, b: ndl.conv(a, b, stride=2, padding=2), lambda a, b: np_conv(a, b, 2, 2),
             rand(1, 7, 7, 2), rand(5, 5, 2, 3), device=device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, k, stride, padding, live", [
    ((2, 1, 1, 3), 3, 1, 1, 1),  # a 3x3 kernel on a 1x1 image reads its centre only
    ((2, 2, 2, 3), 3, 2, 1, 2),  # stride 2 from a 2x2 image: the first row and column of taps meet padding
    ((1, 3, 3, 2), 5, 3, 2, 3),  # 5x5, stride 3: the first two taps only ever meet padding
    ((1, 3, 3, 2), 3, 4, 1, 2),  # and the image's last row is read by no tap: left out of the windows
    ((1, 1, 2, 2), 3, 1, 1, 3),  # different live taps along H and W: the whole kernel, as it is
    ((1, 1, 1, 2), 1, 3, 1, 1),  # no tap ever reads the image: the whole (1x1) kernel, zeros out
])
def test_conv_skips_taps_that_only_meet_padding(device, shape, k, stride, padding, live, monkeypatch, conv_path):
    from needle_kernels.backend_selection import array_api

    check_op(lambda a, b: ndl.conv(a, b, stride=stride, padding=padding),
             lambda a, b: np_conv(a, b, stride, padding), rand(*shape), rand(k, k, shape[3], 3),
             device=device, rtol=1e-4, atol=1e-4)
    a = ndl.Tensor(rand(*shape), device=device)
    b = ndl.Tensor(rand(k, k, shape[3], 3), device=device)
    implicit = conv_path == "implicit" and array_api.conv_implicit_runs_on(a.device)
    if implicit:  # the backend makes no im2col matrix: see the kernel the product ran with
        kernels = []
        monkeypatch.setattr(array_api, "conv_implicit",
                            lambda image, weight, *args, f=array_api.conv_implicit: kernels.append(weight.shape)
                            or f(image, weight, *args))
    out = ndl.conv(a, b, stride=stride, padding=padding)
    _, _, cols = out.saved  # the im2col matrix the op multiplied: one column per live tap and channel
    assert (kernels[0][:2] == (live, live) and cols is None) if implicit else cols.shape[1] == live * live * shape[3]


@pytest.mark.parametrize("shape, padding, grad", [
    ((2, 6, 6, 16), 1, False),  # ResNet-style: same size out
    ((1, 4, 5, 17), 1, True),   # an odd output width: the last tile is half outside the image
    ((2, 5, 4, 16), 0, False),  # no padding: a 3x2 output, a tile half outside along H
    ((1, 3, 4, 16), 2, True),   # padding 2 = K - 1: dA is a convolution without padding
])
def test_conv_3x3_of_many_channels_runs_winograd(device, shape, padding, grad, conv_path, monkeypatch):
    from needle_kernels.backend_selection import array_api
    from needle_kernels.ops import ops_conv

    # maps this small run Winograd only where the backend cannot convolve without an im2col matrix
    implicit = conv_path == "implicit" and array_api.conv_implicit_runs_on(device)
    check_op(lambda a, b: ndl.conv(a, b, stride=1, padding=padding), lambda a, b: np_conv(a, b, 1, padding),
             rand(*shape), rand(3, 3, shape[3], 16), device=device, rtol=1e-4, atol=1e-4, grad=grad)
    out = ndl.conv(ndl.Tensor(rand(*shape), device=device), ndl.Tensor(rand(3, 3, shape[3], 16), device=device),
                   padding=padding)
    _, padded, cols = out.saved  # Winograd makes no im2col matrix in the forward pass, nor a padded image the implicit way
    assert (padded is None and cols is None) if implicit else \
        (padded is not None and (cols is None) == array_api.winograd_runs_on(device))
    monkeypatch.setattr(ops_conv, "WINOGRAD_MIN_PIXELS", 0)  # and on maps of any size, Winograd
    check_op(lambda a, b: ndl.conv(a, b, stride=1, padding=padding), lambda a, b: np_conv(a, b, 1, padding),
             rand(*shape), rand(3, 3, shape[3], 16), device=device, rtol=1e-4, atol=1e-4, grad=grad)
    out = ndl.conv(ndl.Tensor(rand(*shape), device=device), ndl.Tensor(rand(3, 3, shape[3], 16), device=device),
                   padding=padding)
    _, padded, cols = out.saved
    assert padded is not None and (cols is None) == array_api.winograd_runs_on(device)


def test_conv_default_padding_is_one(device):
    a, b = rand(1, 4, 4, 2), rand(3, 3, 2, 2)
    out = ndl.conv(ndl.Tensor(a, device=device), ndl.Tensor(b, device=device))
    np.testing.assert_allclose(out.numpy(), np_conv(a, b, 1, 1), rtol=1e-5, atol=1e-5)


def test_conv_on_a_transposed_view(device):
    # the nn module feeds conv an NCHW->NHWC view: im2col must read its strides
    x = rand(2, 3, 5, 5)
    b = rand(3, 3, 3, 4)
    check_op(lambda x, b: ndl.conv(ndl.transpose(x, (0, 2, 3, 1)), b, stride=2, padding=0),
             lambda x, b: np_conv(x.transpose(0, 2, 3, 1), b, 2, 0), x, b, device=device, rtol=1e-4, atol=1e-4)


def test_conv_second_order(device):
    # dA is linear in B and dB linear in A: differentiate each with respect to the other
    for stride in (1, 2):  # stride 1: dA is itself a conv
        conv = lambda a, b: ndl.conv(a, b, stride=stride, padding=1)
        check_second_order(conv, rand(1, 4, 4, 2), rand(3, 3, 2, 2), device=device, of=0, wrt=(1,))
        check_second_order(conv, rand(1, 4, 4, 2), rand(3, 3, 2, 2), device=device, of=1, wrt=(0,))


def test_im2col_col2im_are_adjoint(device):
    x, g = rand(2, 5, 6, 3), rand(2, 2, 2, 3, 3, 3)
    cols = ndl.im2col(ndl.Tensor(x, device=device), 3, 2).numpy()
    back = ndl.col2im(ndl.Tensor(g, device=device), x.shape, 2).numpy()
    # <im2col(x), g> == <x, col2im(g)>
    np.testing.assert_allclose((cols * g).sum(), (x * back).sum(), rtol=1e-4)


@pytest.mark.parametrize("stride, padding, output_padding", [(1, 0, 0), (2, 1, 1), (2, 0, 0), (3, 1, 2)])
def test_conv_transpose(device, stride, padding, output_padding):
    check_op(lambda x, b: ndl.conv_transpose(x, b, stride, padding, output_padding),
             lambda x, b: np_conv_transpose(x, b, stride, padding, output_padding),
             rand(2, 3, 3, 2), rand(3, 3, 4, 2), device=device, rtol=1e-4, atol=1e-4)


def test_conv_transpose_is_the_input_gradient_of_conv(device):
    x, w = rand(1, 5, 5, 2), rand(3, 3, 2, 3)
    xt = ndl.Tensor(x, device=device)
    out = ndl.conv(xt, ndl.Tensor(w, device=device), stride=2, padding=1)
    g = rand(*out.shape)
    out.backward(ndl.Tensor(g, device=device))
    via_transpose = ndl.conv_transpose(ndl.Tensor(g, device=device), ndl.Tensor(w.transpose(0, 1, 2, 3), device=device),
                                       stride=2, padding=1, output_padding=0)
    np.testing.assert_allclose(via_transpose.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k, s", [(2, 2), (3, 1), (3, 2)])
def test_max_pool2d(device, k, s):
    check_op(lambda x: ndl.max_pool2d(x, k, s), lambda x: np_pool(x, k, s, np.max), distinct(2, 2, 5, 5), device=device)


@pytest.mark.parametrize("k, s", [(2, 2), (3, 1), (3, 2)])
def test_avg_pool2d(device, k, s):
    check_op(lambda x: ndl.avg_pool2d(x, k, s), lambda x: np_pool(x, k, s, np.mean), rand(2, 2, 5, 5), device=device)


def test_pool_padding(device):
    x = distinct(1, 2, 4, 4)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    check_op(lambda t: ndl.max_pool2d(t, 3, 2, padding=1), lambda t: np_pool(padded, 3, 2, np.max), x, device=device)
    zeros = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    check_op(lambda t: ndl.avg_pool2d(t, 3, 2, padding=1), lambda t: np_pool(zeros, 3, 2, np.mean), x, device=device)


def test_conv_module_shapes_and_init(device):
    conv = ndl.nn.Conv(3, 8, 3, stride=2, device=device)
    assert conv.weight.shape == (3, 3, 3, 8) and conv.bias.shape == (8,)
    bound = np.sqrt(2) * np.sqrt(3 / (3 * 3 * 3))
    assert np.abs(conv.weight.numpy()).max() <= bound
    assert np.abs(conv.bias.numpy()).max() <= 1 / np.sqrt(27)
    out = conv(ndl.Tensor(rand(2, 3, 9, 9), device=device))
    assert out.shape == (2, 8, 5, 5)


def test_conv_module_matches_reference(device):
    conv = ndl.nn.Conv(2, 3, 3, stride=1, device=device)
    x = rand(2, 2, 5, 5)
    out = conv(ndl.Tensor(x, device=device)).numpy()
    expected = np_conv(x.transpose(0, 2, 3, 1), conv.weight.numpy(), 1, 1) + conv.bias.numpy()
    np.testing.assert_allclose(out, expected.transpose(0, 3, 1, 2), rtol=1e-4, atol=1e-5)


def np_conv_nchw(x, w, b=None, stride=1, padding=0):
    out = np_conv(x.transpose(0, 2, 3, 1), w, stride, padding) + (0 if b is None else b)
    return out.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("stride, padding", [(1, 1), (2, 1), (2, 0)])
def test_conv_nchw(device, stride, padding):
    """nn.Conv's one op: forward, gradients of x, weight and bias, with and without the bias."""
    check_op(lambda x, w, b: ndl.ops.conv_nchw(x, w, b, stride=stride, padding=padding),
             lambda x, w, b: np_conv_nchw(x, w, b, stride, padding),
             rand(2, 2, 5, 4), rand(3, 3, 2, 3), rand(3), device=device, rtol=1e-4, atol=1e-4)
    check_op(lambda x, w: ndl.ops.conv_nchw(x, w, stride=stride, padding=padding),
             lambda x, w: np_conv_nchw(x, w, None, stride, padding), rand(1, 2, 4, 4), rand(3, 3, 2, 2),
             device=device, rtol=1e-4, atol=1e-4)


def test_conv_nchw_second_order(device):
    conv = lambda x, w, b: ndl.ops.conv_nchw(x, w, b, stride=2, padding=1)
    check_second_order(conv, rand(1, 2, 4, 4), rand(3, 3, 2, 2), rand(2), device=device, of=0, wrt=(1,))
    check_second_order(conv, rand(1, 2, 4, 4), rand(3, 3, 2, 2), rand(2), device=device, of=1, wrt=(0,))


def test_conv_nchw_checks_its_arguments(device):
    x, w = ndl.Tensor(rand(1, 2, 4, 4), device=device), ndl.Tensor(rand(3, 3, 2, 3), device=device)
    with pytest.raises(ValueError, match=r"bias of shape \(2,\) for 3 output channels"):
        ndl.ops.conv_nchw(x, w, ndl.Tensor(rand(2), device=device))
    with pytest.raises(ValueError, match="NCHW"):
        ndl.ops.conv_nchw(ndl.Tensor(rand(2, 4, 4), device=device), w)


# 16 channels on 8x8: Winograd, and without create_graph its weight gradient too
@pytest.mark.parametrize("channels", [(2, 3), (16, 16)])
def test_conv_modules_backward_without_recording(device, channels):
    # backward(create_graph=False) builds the gradient from unrecorded nodes: every gradient
    # must still reach the first layer's weights and the input, as with create_graph=True
    c, c_mid = channels
    x = rand(2, c, 8, 8)
    grads = []
    for create_graph in (True, False):
        np.random.seed(1)
        net = ndl.nn.Sequential(ndl.nn.Conv(c, c_mid, 3, device=device), ndl.nn.ReLU(),
                                ndl.nn.Conv(c_mid, 2, 3, stride=2, device=device))
        xt = ndl.Tensor(x, device=device)
        (net(xt) ** 2).sum().backward(create_graph=create_graph)
        grads.append([xt.grad.numpy()] + [p.grad.numpy() for p in net.parameters()])
    for got, want in zip(grads[1], grads[0]):  # (Winograd's weight gradient sums in another order)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(want).max()))


# backward(create_graph=False) computes Conv's gradients as arrays, without graph nodes: the
# same values as the recorded graph's on each of its paths
@pytest.mark.parametrize("c, size, k, stride, padding", [
    (2, 5, 3, 1, 1),  # im2col; dA as the convolution of g with the flipped kernel
    (2, 5, 3, 1, 0),
    (2, 5, 3, 1, 2),  # padding K - 1: that convolution unpadded
    (2, 5, 3, 2, 1),  # stride 2: dA by col2im, then cropped
    (3, 9, 7, 4, 3),  # a ResNet9-like first layer
    (4, 1, 3, 1, 1),  # a 1x1 map: the kernel cropped to its centre tap
    (2, 2, 3, 2, 1),  # a corner block of taps only
    (16, 8, 3, 1, 1),  # Winograd forward, dA, and its weight gradient (64 pixels)
    (16, 4, 3, 1, 1),  # Winograd forward, weight gradient by im2col on a 4x4 map
])
@pytest.mark.parametrize("need_x", [True, False])
def test_conv_gradients_without_recording_are_the_graphs(device, c, size, k, stride, padding, need_x):
    x, w, b, g = rand(2, c, size, size), rand(k, k, c, 3), rand(3), None
    for layout in ("nchw", "nhwc"):
        grads = []
        for create_graph in (True, False):
            xt = ndl.Tensor(x if layout == "nchw" else x.transpose(0, 2, 3, 1), device=device, requires_grad=need_x)
            wt, bt = ndl.Tensor(w, device=device), ndl.Tensor(b, device=device)
            out = (ndl.ops.conv_nchw(xt, wt, bt, stride=stride, padding=padding) if layout == "nchw"
                   else ndl.conv(xt, wt, stride=stride, padding=padding))
            g = rand(*out.shape) if g is None or g.shape != out.shape else g
            (out * ndl.Tensor(g, device=device)).sum().backward(create_graph=create_graph)
            grads.append([t.grad.numpy() for t in (xt, wt, bt) if t.requires_grad and t.grad is not None])
        assert len(grads[0]) == len(grads[1]) == (2 if layout == "nhwc" else 3) - (not need_x)
        for got, want in zip(grads[1], grads[0]):  # (Winograd's weight gradient sums in another order)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_conv_module_is_the_generic_graph_in_one_op(device):
    # the module's single op against the transposes, conv and broadcast add it stands for
    layer = ndl.nn.Conv(2, 3, 3, stride=2, device=device)
    x = rand(2, 2, 5, 5)
    fused = layer(ndl.Tensor(x, device=device))
    assert isinstance(fused.op, ndl.ops.ConvNCHW)
    generic = ndl.transpose(ndl.conv(ndl.transpose(ndl.Tensor(x, device=device), (0, 2, 3, 1)), layer.weight, 2, 1)
                            + ndl.broadcast_to(ndl.reshape(layer.bias, (1, 1, 1, 3)), (2, 3, 3, 3)), (0, 3, 1, 2))
    np.testing.assert_allclose(fused.numpy(), generic.numpy(), rtol=1e-5, atol=1e-6)


def test_conv_module_channel_mismatch(device):
    with pytest.raises(ValueError, match=r"\(2, 4, 5, 5\)"):
        ndl.nn.Conv(3, 4, 3, device=device)(ndl.Tensor(rand(2, 4, 5, 5), device=device))


def test_conv_transpose_module(device):
    layer = ndl.nn.ConvTranspose(4, 2, 4, stride=2, padding=1, device=device)
    assert layer.weight.shape == (4, 4, 2, 4)
    x = rand(2, 4, 3, 3)
    out = layer(ndl.Tensor(x, device=device))
    assert out.shape == (2, 2, 6, 6)
    expected = np_conv_transpose(x.transpose(0, 2, 3, 1), layer.weight.numpy(), 2, 1) + layer.bias.numpy()
    np.testing.assert_allclose(out.numpy(), expected.transpose(0, 3, 1, 2), rtol=1e-4, atol=1e-5)


def test_pool_modules(device):
    x = ndl.Tensor(rand(1, 2, 4, 4), device=device)
    assert ndl.nn.MaxPool2d(2)(x).shape == (1, 2, 2, 2)
    np.testing.assert_allclose(ndl.nn.AvgPool2d(2)(x).numpy(), np_pool(x.numpy(), 2, 2, np.mean), rtol=1e-5)


def test_conv_on_an_offset_view(device):
    # a cropped input is a view with a non-zero offset: the windows must start there
    check_op(lambda a, b: ndl.conv(ndl.crop(a, ((0, 0), (1, 1), (2, 0), (0, 0))), b, stride=2, padding=0),
             lambda a, b: np_conv(a[:, 1:-1, 2:, :], b, 2, 0), rand(1, 7, 7, 2), rand(3, 3, 2, 2), device=device,
             rtol=1e-4, atol=1e-4)


def test_conv_op_keeps_no_state_between_compute_and_gradient(device):
    A = ndl.Tensor(np.random.randn(2, 5, 5, 3), device=device)
    B = ndl.Tensor(np.random.randn(3, 3, 3, 4), device=device)
    op = ndl.ops.Conv(stride=1, padding=1)
    out = op(A, B)
    assert vars(op) == {"stride": 1, "padding": 1}
    assert out.saved is not None  # the node keeps the padded input and the im2col matrix
    out.backward()
    reference = ndl.conv(ndl.Tensor(A.numpy(), device=device), ndl.Tensor(B.numpy(), device=device), padding=1)
    np.testing.assert_allclose(out.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    # a node nothing will differentiate keeps nothing
    frozen = ndl.conv(ndl.Tensor(A.numpy(), device=device, requires_grad=False),
                      ndl.Tensor(B.numpy(), device=device, requires_grad=False), padding=1)
    assert frozen.saved is None
    # the same op object, reused, differentiates each of its nodes with that node's arrays
    A2 = ndl.Tensor(np.random.randn(1, 4, 4, 3), device=device)
    op(A2, B).sum().backward()
    grad_once = A2.grad.numpy()
    A2.grad = None
    ndl.conv(A2, B, padding=1).sum().backward()
    np.testing.assert_allclose(grad_once, A2.grad.numpy(), rtol=1e-5, atol=1e-5)
