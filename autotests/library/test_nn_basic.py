"""nn modules: initialization as needle, forward against numpy, gradients numerically."""
import math

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels import nn
from op_checks import check_gradients, rand


def T(x, device, requires_grad=True):
    return ndl.Tensor(np.asarray(x, dtype=np.float32), device=device, requires_grad=requires_grad)


def test_linear_init_matches_needle(device):
    np.random.seed(5)
    bw = math.sqrt(2) * math.sqrt(3 / 4)
    w = (np.random.rand(4, 3) * 2 * bw - bw).astype(np.float32)
    bb = math.sqrt(2) * math.sqrt(3 / 3)
    b = (np.random.rand(3, 1) * 2 * bb - bb).astype(np.float32).reshape(1, 3)
    np.random.seed(5)
    layer = nn.Linear(4, 3, device=device)
    np.testing.assert_allclose(layer.weight.numpy(), w, rtol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), b, rtol=1e-6)
    assert isinstance(layer.weight, nn.Parameter) and layer.weight.requires_grad
    assert layer.parameters() == [layer.weight, layer.bias]


def test_linear_forward(device):
    layer = nn.Linear(4, 3, device=device)
    x = rand(5, 4)
    expected = x @ layer.weight.numpy() + layer.bias.numpy()
    np.testing.assert_allclose(layer(T(x, device)).numpy(), expected, rtol=1e-5, atol=1e-6)
    x3 = rand(2, 5, 4)
    np.testing.assert_allclose(layer(T(x3, device)).numpy(), x3 @ layer.weight.numpy() + layer.bias.numpy(),
                               rtol=1e-5, atol=1e-6)
    assert nn.Linear(4, 3, bias=False, device=device).parameters()[0].shape == (4, 3)


def test_linear_shape_error(device):
    with pytest.raises(ValueError, match=r"\(5, 7\)"):
        nn.Linear(4, 3, device=device)(T(rand(5, 7), device))


def test_linear_gradients(device):
    layer = nn.Linear(3, 2, device=device)
    check_gradients(lambda x, w, b: x @ w + ndl.broadcast_to(b, (4, 2)), rand(4, 3), layer.weight.numpy(),
                    layer.bias.numpy(), device=device)
    x = T(rand(4, 3), device)
    layer(x).sum().backward()
    np.testing.assert_allclose(layer.bias.grad.numpy(), np.full((1, 2), 4.0))


def test_activations_and_containers(device):
    x = rand(3, 4)
    t = T(x, device)
    np.testing.assert_allclose(nn.ReLU()(t).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(nn.Tanh()(t).numpy(), np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(nn.Sigmoid()(t).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-6)
    np.testing.assert_array_equal(nn.Identity()(t).numpy(), x)
    np.testing.assert_allclose(nn.Residual(nn.ReLU())(t).numpy(), np.maximum(x, 0) + x)
    np.testing.assert_allclose(nn.Sequential(nn.ReLU(), nn.Tanh())(t).numpy(), np.tanh(np.maximum(x, 0)), rtol=1e-6)
    assert nn.Flatten()(T(rand(2, 3, 4), device)).shape == (2, 12)


def test_parameters_are_found_recursively_once(device):
    shared = nn.Linear(2, 2, device=device)
    model = nn.Sequential(shared, nn.ReLU(), nn.Residual(nn.Sequential(nn.Linear(2, 2, device=device))), shared)
    params = model.parameters()
    assert len(params) == 4 and len({id(p) for p in params}) == 4
    model.eval()
    assert not model.training and not shared.training and not model.modules[2].fn.training
    model.train()
    assert all(m.training for m in model._children())


def test_parameters_keep_attribute_order_and_a_module_own_list(device):
    class Listed(nn.Module):  # says itself which parameters it has: the second linear's only
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 3, device=device), nn.Linear(3, 2, device=device)

        def parameters(self):
            return self.b.parameters()

    inner = Listed()
    model = nn.Sequential(nn.Linear(2, 2, device=device), {"x": inner, "y": [inner.a]}, inner.b)
    first = model.modules[0]
    want = [first.weight, first.bias, inner.b.weight, inner.b.bias, inner.a.weight, inner.a.bias]
    assert [id(p) for p in model.parameters()] == [id(p) for p in want]


def test_softmax_loss(device):
    z, y = rand(5, 4) * 3, np.array([0, 3, 1, 1, 2])
    shifted = z - z.max(1, keepdims=True)
    expected = np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(5), y])
    loss = nn.SoftmaxLoss()(T(z, device), ndl.Tensor(y, device=device))
    assert loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
    check_gradients(lambda t: nn.SoftmaxLoss()(t, y), z, device=device)
    with pytest.raises(ValueError, match=r"\(4,\)"):
        nn.SoftmaxLoss()(T(z, device), np.array([0, 1, 2, 3]))


def np_batchnorm(x, axes, w, b, eps=1e-5):
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


@pytest.mark.parametrize("fused", [True, False])
def test_batchnorm1d(device, fused):
    bn = nn.BatchNorm1d(3, device=device, fused=fused)
    bn.weight.data = T([1.0, 2.0, 0.5], device)
    bn.bias.data = T([0.0, -1.0, 1.0], device)
    x = rand(6, 3) * 2 + 1
    out = bn(T(x, device))
    np.testing.assert_allclose(out.numpy(), np_batchnorm(x, 0, [1, 2, 0.5], [0, -1, 1]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(0), rtol=1e-5)
    bn.eval()
    expected = (x - bn.running_mean.numpy()) / np.sqrt(bn.running_var.numpy() + 1e-5) * [1, 2, 0.5] + [0, -1, 1]
    np.testing.assert_allclose(bn(T(x, device)).numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_batchnorm1d_gradients(device, fused):
    def f(x, w, b):
        bn = nn.BatchNorm1d(3, device=device, fused=fused)
        bn.weight, bn.bias = w, b
        return bn(x)
    check_gradients(f, rand(5, 3), rand(3) + 1, rand(3), device=device)


@pytest.mark.parametrize("fused", [True, False])
def test_batchnorm2d(device, fused):
    bn = nn.BatchNorm2d(2, device=device, fused=fused)
    x = rand(3, 2, 4, 4) * 3
    out = bn(T(x, device))
    np.testing.assert_allclose(out.numpy(), np_batchnorm(x, (0, 2, 3), 1, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean((0, 2, 3)), rtol=1e-5, atol=1e-7)

    def f(x, w, b):
        m = nn.BatchNorm2d(2, device=device, fused=fused)
        m.weight, m.bias = w, b
        return m(x)
    check_gradients(f, rand(2, 2, 2, 3), rand(2) + 1, rand(2), device=device)
    with pytest.raises(ValueError, match=r"\(3, 3, 4, 4\)"):
        bn(T(rand(3, 3, 4, 4), device))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("create_graph", [True, False])
def test_fused_batchnorm_is_the_generic_one(device, training, create_graph):
    # the fused kernels against the same formulas in generic ops: outputs, every gradient, running
    # stats; without create_graph the fused gradient is computed as arrays, with no graph nodes
    x, g = rand(4, 5, 3, 2) * 3 + 1, rand(4, 5, 3, 2)
    running_mean, running_var = rand(5), rand(5) ** 2 + 0.5
    results = []
    for fused in (True, False):
        bn = nn.BatchNorm2d(5, device=device, fused=fused)
        bn.weight.data, bn.bias.data = T([0.5, 1, 2, -1, 3], device), T([1, 0, -2, 0.5, 0], device)
        bn.running_mean.data, bn.running_var.data = T(running_mean, device), T(running_var, device)
        if not training:
            bn.eval()
        xt = ndl.Tensor(x, device=device, requires_grad=True)
        (bn(xt) * T(g, device)).sum().backward(create_graph=create_graph)
        results.append([bn(ndl.Tensor(x, device=device)).numpy(), xt.grad.numpy(), bn.weight.grad.numpy(),
                        bn.bias.grad.numpy(), bn.running_mean.numpy(), bn.running_var.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("create_graph", [True, False])
def test_batchnorm_with_its_relu_is_relu_of_batchnorm(device, training, fused, create_graph):
    # bn(x, relu=True): one op (fused, in training) against the ReLU module after the batch norm
    x, g = rand(4, 5, 3, 2) * 3 - 1, rand(4, 5, 3, 2)
    results = []
    for together in (True, False):
        bn = nn.BatchNorm2d(5, device=device, fused=fused)
        bn.weight.data, bn.bias.data = T([0.5, 1, 2, -1, 3], device), T([1, 0, -2, 0.5, 0], device)
        if not training:
            bn.eval()
        xt = ndl.Tensor(x, device=device, requires_grad=True)
        out = bn(xt, relu=True) if together else nn.ReLU()(bn(xt))
        (out * T(g, device)).sum().backward(create_graph=create_graph)
        results.append([out.numpy(), xt.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy()])
    assert (results[0][0] >= 0).all() and (results[0][0] == 0).any()
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fused_batchnorm_recomputes_a_stale_fold(device):
    # scale and shift worked out for other weight and bias arrays are not used: the op's own inputs are
    x = ndl.Tensor(rand(6, 3) * 2, device=device)
    w, b = T([0.5, 2, -1], device), T([1, 0, 3], device)
    mean, var = ndl.ops.batch_statistics(x)
    old_w, old_b = T([1, 1, 1], device).realize_cached_data(), T([0, 0, 0], device).realize_cached_data()
    invstd = (var + 1e-5) ** -0.5
    stale = (old_w, old_b, invstd, old_w * invstd, old_b - mean * (old_w * invstd))
    got = ndl.ops.batch_norm_rows(x, w, b, mean, var, 1e-5, True, folded=stale).numpy()
    want = ndl.ops.batch_norm_rows(x, w, b, mean, var, 1e-5, True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    xs = x.numpy()
    np.testing.assert_allclose(got, (xs - xs.mean(0)) / np.sqrt(xs.var(0) + 1e-5) * [0.5, 2, -1] + [1, 0, 3],
                               rtol=1e-4, atol=1e-4)


def test_fused_batchnorm2d_of_nhwc_memory(device):
    # a convolution's output: NCHW seen through a transpose of NHWC memory, which the one
    # fused op reads as (N*H*W, C) rows in place; the same values as the generic ops
    x, g = rand(3, 4, 4, 5) * 2, rand(3, 5, 4, 4)
    results = []
    for fused in (True, False):
        bn = nn.BatchNorm2d(5, device=device, fused=fused)
        xt = ndl.Tensor(x, device=device, requires_grad=True)
        out = bn(ndl.transpose(xt, (0, 3, 1, 2)))
        (out * T(g, device)).sum().backward()
        results.append([out.numpy(), xt.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"nchw needs an \(N, C, H, W\) input"):
        ndl.ops.batch_statistics(ndl.Tensor(rand(4, 5), device=device), nchw=True)


def test_fused_batchnorm_says_it_is_differentiable_once(device):
    x = ndl.Tensor(rand(4, 3), device=device, requires_grad=True)
    grads = ndl.ops.BatchNormRowsGrad(*ndl.ops.batch_statistics(x), True)(x, T(np.ones(3), device), x)
    with pytest.raises(NotImplementedError, match="fused=False"):
        grads[0].sum().backward()


@pytest.mark.parametrize("fused", [True, False])
def test_layernorm1d(device, fused):
    ln = nn.LayerNorm1d(4, device=device, fused=fused)
    x = rand(2, 3, 4) * 2
    np.testing.assert_allclose(ln(T(x, device)).numpy(), np_batchnorm(x, -1, 1, 0), rtol=1e-4, atol=1e-4)

    def f(x, w, b):
        m = nn.LayerNorm1d(4, device=device, fused=fused)
        m.weight, m.bias = w, b
        return m(x)
    check_gradients(f, rand(3, 4), rand(4) + 1, rand(4), device=device)
    check_gradients(f, rand(2, 3, 4) * 3 + 1, rand(4) + 1, rand(4), device=device)


@pytest.mark.parametrize("shape", [(5,), (7, 5), (3, 4, 5)])
@pytest.mark.parametrize("create_graph", [True, False])
def test_fused_layernorm_is_the_generic_one(device, shape, create_graph):
    # one kernel each way against the same formulas in generic ops: output and every gradient
    x, g = rand(*shape) * 3 + 1, rand(*shape)
    results = []
    for fused in (True, False):
        ln = nn.LayerNorm1d(5, device=device, fused=fused)
        ln.weight.data, ln.bias.data = T([0.5, 1, 2, -1, 3], device), T([1, 0, -2, 0.5, 0], device)
        xt = ndl.Tensor(x, device=device, requires_grad=True)
        out = ln(xt)
        (out * T(g, device)).sum().backward(create_graph=create_graph)
        results.append([out.numpy(), xt.grad.numpy(), ln.weight.grad.numpy(), ln.bias.grad.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_fused_layernorm_is_one_op_and_differentiable_once(device):
    x = T(rand(6, 4), device)
    ln = nn.LayerNorm1d(4, device=device)
    out = ln(x)
    assert isinstance(out.op, ndl.ops.LayerNormRows) and out.inputs[0] is x
    assert not isinstance(nn.LayerNorm1d(4, device=device, fused=False)(x).op, ndl.ops.LayerNormRows)
    out.sum().backward()  # recorded: one LayerNormRowsGrad node, which refuses a second derivative
    with pytest.raises(NotImplementedError, match="fused=False"):
        x.grad.sum().backward()


def test_dropout(device):
    x = np.ones((200, 50), dtype=np.float32)
    drop = nn.Dropout(0.3)
    np.random.seed(2)
    out = drop(T(x, device)).numpy()
    np.random.seed(2)
    keep = np.random.rand(200, 50) <= 0.7
    np.testing.assert_allclose(out, keep / 0.7, rtol=1e-6)
    assert abs((out == 0).mean() - 0.3) < 0.02
    drop.eval()
    np.testing.assert_array_equal(drop(T(x, device)).numpy(), x)
    with pytest.raises(ValueError):
        nn.Dropout(1.0)


def test_mlp_trains(device):
    np.random.seed(0)
    x = rand(64, 4)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    model = nn.Sequential(nn.Linear(4, 16, device=device), nn.ReLU(), nn.BatchNorm1d(16, device=device),
                          nn.Linear(16, 2, device=device))
    opt = ndl.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()
    losses = []
    for _ in range(30):
        opt.reset_grad()
        loss = loss_fn(model(T(x, device, requires_grad=False)), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    assert losses[-1] < 0.3 * losses[0]
