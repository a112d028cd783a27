"""Forward and backward against PyTorch (skipped where torch is not installed)."""
import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels import nn, optim
from op_checks import rand

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def T(x, device):
    return ndl.Tensor(np.asarray(x, dtype=np.float32), device=device)


def tt(x):
    return torch.tensor(np.asarray(x, dtype=np.float32), requires_grad=True)


def close(a, b, rtol=1e-4, atol=1e-5):
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a, b,
                               rtol=rtol, atol=atol)


@pytest.mark.parametrize("k, stride", [(3, 1), (3, 2), (5, 2), (1, 1)])
def test_conv_module(device, k, stride):
    x, g = rand(2, 3, 9, 9), None
    ours = nn.Conv(3, 4, k, stride=stride, device=device)
    ref = torch.nn.Conv2d(3, 4, k, stride=stride, padding=k // 2)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(ours.weight.numpy().transpose(3, 2, 0, 1)))
        ref.bias.copy_(torch.tensor(ours.bias.numpy()))
    xo, xt = T(x, device), tt(x)
    out_o, out_t = ours(xo), ref(xt)
    close(out_o, out_t)
    g = rand(*out_o.shape)
    out_o.backward(T(g, device))
    out_t.backward(torch.tensor(g))
    close(xo.grad, xt.grad)
    close(ours.weight.grad, ref.weight.grad.permute(2, 3, 1, 0), rtol=1e-4, atol=1e-4)
    close(ours.bias.grad, ref.bias.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, padding, output_padding", [(2, 1, 1), (1, 0, 0), (2, 0, 1)])
def test_conv_transpose_module(device, stride, padding, output_padding):
    ours = nn.ConvTranspose(3, 2, 4 if stride == 2 else 3, stride=stride, padding=padding,
                            output_padding=output_padding, device=device)
    ref = torch.nn.ConvTranspose2d(3, 2, ours.kernel_size, stride=stride, padding=padding,
                                   output_padding=output_padding)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(ours.weight.numpy().transpose(3, 2, 0, 1)))
        ref.bias.copy_(torch.tensor(ours.bias.numpy()))
    x = rand(2, 3, 4, 4)
    xo, xt = T(x, device), tt(x)
    out_o, out_t = ours(xo), ref(xt)
    assert out_o.shape == tuple(out_t.shape)
    close(out_o, out_t)
    g = rand(*out_o.shape)
    out_o.backward(T(g, device))
    out_t.backward(torch.tensor(g))
    close(xo.grad, xt.grad)
    close(ours.weight.grad, ref.weight.grad.permute(2, 3, 1, 0), atol=1e-4)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k, s, p", [(2, 2, 0), (3, 2, 1), (3, 1, 0)])
def test_pooling(device, kind, k, s, p):
    x = rand(2, 3, 7, 7)
    xo, xt = T(x, device), tt(x)
    if kind == "max":
        out_o, out_t = ndl.max_pool2d(xo, k, s, p), torch.nn.functional.max_pool2d(xt, k, s, p)
    else:
        out_o, out_t = ndl.avg_pool2d(xo, k, s, p), torch.nn.functional.avg_pool2d(xt, k, s, p)
    close(out_o, out_t)
    g = rand(*out_o.shape)
    out_o.backward(T(g, device))
    out_t.backward(torch.tensor(g))
    close(xo.grad, xt.grad)


@pytest.mark.parametrize("dims", [1, 2])
def test_batchnorm(device, dims):
    shape = (8, 5) if dims == 1 else (4, 5, 3, 3)
    ours = (nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d)(5, momentum=0.2, device=device)
    ref = (torch.nn.BatchNorm1d if dims == 1 else torch.nn.BatchNorm2d)(5, momentum=0.2)
    w, b = rand(5) + 1, rand(5)
    ours.weight.data, ours.bias.data = T(w, device), T(b, device)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(w))
        ref.bias.copy_(torch.tensor(b))
    x = rand(*shape) * 2
    xo, xt = T(x, device), tt(x)
    out_o, out_t = ours(xo), ref(xt)
    close(out_o, out_t, atol=1e-4)
    g = rand(*shape)
    out_o.backward(T(g, device))
    out_t.backward(torch.tensor(g))
    close(xo.grad, xt.grad, atol=1e-4)
    close(ours.weight.grad, ref.weight.grad, atol=1e-4)
    close(ours.bias.grad, ref.bias.grad, atol=1e-4)
    close(ours.running_mean, ref.running_mean)
    # needle keeps the biased batch variance in running_var, torch the unbiased one
    n = x.size // 5
    expected_var = 0.8 + 0.2 * (ref.running_var.numpy() - 0.8) / 0.2 * (n - 1) / n
    close(ours.running_var, expected_var)
    ours.eval()
    ref.eval()
    ref.running_var.copy_(torch.tensor(ours.running_var.numpy()))
    close(ours(T(x, device)), ref(torch.tensor(x)), atol=1e-4)


def test_layernorm(device):
    ours = nn.LayerNorm1d(6, device=device)
    ref = torch.nn.LayerNorm(6)
    w, b = rand(6) + 1, rand(6)
    ours.weight.data, ours.bias.data = T(w, device), T(b, device)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(w))
        ref.bias.copy_(torch.tensor(b))
    x = rand(3, 4, 6) * 3
    xo, xt = T(x, device), tt(x)
    out_o, out_t = ours(xo), ref(xt)
    close(out_o, out_t, atol=1e-4)
    g = rand(3, 4, 6)
    out_o.backward(T(g, device))
    out_t.backward(torch.tensor(g))
    close(xo.grad, xt.grad, atol=1e-4)
    close(ours.weight.grad, ref.weight.grad, atol=1e-4)


def test_rmsnorm(device):
    ours = nn.RMSNorm1d(6, eps=1e-5, device=device)
    ref = torch.nn.RMSNorm(6, eps=1e-5)
    w = rand(6) + 1
    ours.weight.data = T(w, device)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(w))
    x = rand(3, 4, 6) * 3
    xo, xt = T(x, device), tt(x)
    out_o, out_t = ours(xo), ref(xt)
    close(out_o, out_t, atol=1e-4)
    g = rand(3, 4, 6)
    out_o.backward(T(g, device))
    out_t.backward(torch.tensor(g))
    close(xo.grad, xt.grad, atol=1e-4)
    close(ours.weight.grad, ref.weight.grad, atol=1e-4)


def test_softmax_loss_and_logsumexp(device):
    z, y = rand(6, 5) * 4, np.array([0, 4, 2, 2, 1, 3])
    zo, zt = T(z, device), tt(z)
    lo = nn.SoftmaxLoss()(zo, y)
    lt = torch.nn.functional.cross_entropy(zt, torch.tensor(y))
    close(lo, lt)
    lo.backward()
    lt.backward()
    close(zo.grad, zt.grad)
    close(ndl.logsumexp(T(z, device), axes=(1,)), torch.logsumexp(torch.tensor(z), 1))


def _train(opt_ours, opt_torch, device, steps=5):
    np.random.seed(1)
    w0 = rand(4, 3)
    x, y = rand(10, 4), np.random.randint(0, 3, 10)
    wo = nn.Parameter(T(w0, device))
    wt = torch.nn.Parameter(torch.tensor(w0))
    oo, ot = opt_ours([wo]), opt_torch([wt])
    for _ in range(steps):
        oo.reset_grad()
        ot.zero_grad()
        nn.SoftmaxLoss()(T(x, device) @ wo, y).backward()
        torch.nn.functional.cross_entropy(torch.tensor(x) @ wt, torch.tensor(y)).backward()
        oo.step()
        ot.step()
    close(wo, wt, rtol=1e-4, atol=1e-5)


def test_adam(device):
    _train(lambda p: optim.Adam(p, lr=0.1, weight_decay=0.01),
           lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.01), device)


def test_sgd(device):
    _train(lambda p: optim.SGD(p, lr=0.5, weight_decay=0.01),
           lambda p: torch.optim.SGD(p, lr=0.5, weight_decay=0.01), device)


# SGD momentum is not cross-checked: needle's EMA starts from u = 0 ((1 - b) g on the
# first step) while torch starts its buffer at g; test_optim checks the formula.


def test_clip_grad_norm(device):
    g1, g2 = rand(3, 2), rand(4)
    a, b = nn.Parameter(T(np.zeros((3, 2)), device)), nn.Parameter(T(np.zeros(4), device))
    a.grad, b.grad = T(g1, device), T(g2, device)
    ta, tb = torch.zeros(3, 2, requires_grad=True), torch.zeros(4, requires_grad=True)
    ta.grad, tb.grad = torch.tensor(g1), torch.tensor(g2)
    n1 = optim.clip_grad_norm([a, b], 0.5)
    n2 = torch.nn.utils.clip_grad_norm_([ta, tb], 0.5)
    assert abs(n1 - float(n2)) < 1e-5
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


def test_matmul_broadcast_gradients(device):
    a, b = rand(2, 1, 3, 4), rand(5, 4, 2)
    ao, bo, at, bt = T(a, device), T(b, device), tt(a), tt(b)
    (ao @ bo).sum().backward()
    (at @ bt).sum().backward()
    close(ao.grad, at.grad)
    close(bo.grad, bt.grad)
