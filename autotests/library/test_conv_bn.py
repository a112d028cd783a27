"""ResNet9's ConvBN block as one op (ops.conv_batch_norm) against its modules one after another."""
import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.apps.models import ConvBN
from op_checks import rand


@pytest.fixture(autouse=True, params=["im2col", "implicit"])
def conv_path(request, monkeypatch):
    """Every test twice: convolutions through the im2col matrix, and (where the device has the
    kernels) through the backend's implicit im2col, whatever the size of the matrix."""
    from needle_kernels.ops import ops_conv

    monkeypatch.setattr(ops_conv, "IMPLICIT_MIN_FLOATS", 0 if request.param == "implicit" else 1 << 62)
    return request.param


def _modules(a, b, k, s, device, fused):
    """The block spelled out: Conv, BatchNorm2d (generic ops unless ``fused``), ReLU."""
    return ndl.nn.Sequential(ndl.nn.Conv(a, b, k, stride=s, device=device),
                             ndl.nn.BatchNorm2d(b, device=device, fused=fused), ndl.nn.ReLU())


def _run(model, x, c, device, create_graph, need_x=True, steps=2):
    """Outputs, gradients (input, then parameters), running statistics and the evaluation-mode
    output after ``steps`` training-mode passes of sum(model(x) * c)."""
    got = []
    model.train()
    for step in range(steps):
        for p in model.parameters():
            p.grad = None
        xt = ndl.Tensor(x * (step + 1), device=device, requires_grad=need_x)
        out = model(xt)
        (out * ndl.Tensor(c, device=device)).sum().backward(create_graph=create_graph)
        got += [out.numpy()] + ([xt.grad.numpy()] if need_x else []) + [p.grad.numpy() for p in model.parameters()]
    bn = model.bn if isinstance(model, ConvBN) else model.modules[1]
    got += [bn.running_mean.numpy(), bn.running_var.numpy()]
    model.eval()
    return got + [model(ndl.Tensor(x, device=device)).numpy()]


@pytest.mark.parametrize("args, shape", [
    ((3, 4, 3, 1), (2, 3, 6, 6)),
    ((3, 8, 7, 4), (2, 3, 16, 16)),  # ResNet9's first layer, smaller
    ((4, 6, 3, 2), (3, 4, 8, 8)),  # stride 2: dx by col2im
    ((16, 16, 3, 1), (2, 16, 8, 8)),  # Winograd
    ((5, 6, 3, 1), (4, 5, 1, 1)),  # a 1x1 map: the kernel cropped to its centre
])
@pytest.mark.parametrize("create_graph", [False, True])
def test_conv_bn_is_its_modules(device, args, shape, create_graph):
    x = rand(*shape)
    np.random.seed(1)
    block = ConvBN(*args, device=device)
    out = block(ndl.Tensor(x, device=device))
    assert isinstance(out.op, ndl.ops.ConvBatchNorm)  # one node in training
    c = rand(*out.shape)
    np.random.seed(1)
    block = ConvBN(*args, device=device)
    got = _run(block, x, c, device, create_graph)
    for fused in (True, False):
        np.random.seed(1)
        want = _run(_modules(*args, device, fused), x, c, device, create_graph)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(b).max()), err_msg=f"entry {i}")


def test_conv_bn_without_an_input_gradient(device):
    # ResNet9's first layer: the images need no gradient, so none is computed
    x, c = rand(2, 3, 8, 8), rand(2, 4, 4, 4)
    np.random.seed(1)
    got = _run(ConvBN(3, 4, 3, 2, device=device), x, c, device, False, need_x=False)
    np.random.seed(1)
    want = _run(_modules(3, 4, 3, 2, device, True), x, c, device, False, need_x=False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_conv_bn_op_without_conv_bias(device):
    # the op alone, for a convolution without a bias: the conv op and the fused batch norm
    x, w = rand(2, 3, 5, 5), rand(3, 3, 3, 4)
    gamma, beta, c = rand(4), rand(4), rand(2, 4, 5, 5)
    grads = []
    for fused in (True, False):
        ts = [ndl.Tensor(a, device=device) for a in (x, w, gamma, beta)]
        mean, var = ndl.init.zeros(4, device=device).realize_cached_data(), ndl.init.ones(4, device=device).realize_cached_data()
        if fused:
            out, running = ndl.ops.conv_batch_norm(ts[0], ts[1], None, ts[2], ts[3], 1, 1, 1e-5, 0.1, mean, var, relu=False)
        else:
            bn = ndl.nn.BatchNorm2d(4, device=device, fused=False)
            bn.weight, bn.bias = ts[2], ts[3]
            out = bn(ndl.ops.conv_nchw(ts[0], ts[1], None, padding=1))
            running = (bn.running_mean.realize_cached_data(), bn.running_var.realize_cached_data())
        (out * ndl.Tensor(c, device=device)).sum().backward()
        grads.append([out.numpy()] + [t.grad.numpy() for t in ts] + [ndl.Tensor.make_const(r).numpy() for r in running])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_conv_bn_falls_back_to_its_modules(device):
    # evaluation mode and a batch norm of generic ops run the modules, not the one op
    x = ndl.Tensor(rand(2, 3, 5, 5), device=device)
    block = ConvBN(3, 4, 3, 1, device=device)
    block.eval()
    assert not isinstance(block(x).op, ndl.ops.ConvBatchNorm)
    block.train()
    block.bn.fused = False
    assert not isinstance(block(x).op, ndl.ops.ConvBatchNorm)


def test_conv_bn_checks_its_arguments(device):
    block = ConvBN(3, 4, 3, 1, device=device)
    with pytest.raises(ValueError, match=r"ConvBN: expected input \(N, 3, H, W\), got shape \(2, 4, 5, 5\)"):
        block(ndl.Tensor(rand(2, 4, 5, 5), device=device))
    x, w = ndl.Tensor(rand(2, 3, 5, 5), device=device), ndl.Tensor(rand(3, 3, 3, 4), device=device)
    mean, var = block.bn.running_mean.realize_cached_data(), block.bn.running_var.realize_cached_data()
    short = ndl.Tensor(rand(3), device=device)
    with pytest.raises(ValueError, match=r"bn_weight of shape \(3,\) for 4 output channels"):
        ndl.ops.conv_batch_norm(x, w, None, short, block.bn.bias, 1, 1, 1e-5, 0.1, mean, var)
    with pytest.raises(ValueError, match="needs an NCHW array"):
        ndl.ops.conv_batch_norm(ndl.Tensor(rand(3, 5, 5), device=device), w, None, block.bn.weight, block.bn.bias,
                                1, 1, 1e-5, 0.1, mean, var)


def test_conv_bn_is_differentiable_once(device):
    block = ConvBN(2, 3, 3, 1, device=device)
    x = ndl.Tensor(rand(2, 2, 4, 4), device=device)
    (block(x) ** 2).sum().backward(create_graph=True)
    with pytest.raises(NotImplementedError, match="fused=False"):
        x.grad.sum().backward()
