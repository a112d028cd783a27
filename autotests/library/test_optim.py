"""Optimizers: the update rules step by step, no graph, no leaked tensors."""
import gc

import numpy as np

import needle_kernels as ndl
from needle_kernels import autograd, nn, optim


def _param(x, grad, device):
    p = nn.Parameter(ndl.Tensor(np.asarray(x, dtype=np.float32), device=device))
    p.grad = ndl.Tensor(np.asarray(grad, dtype=np.float32), device=device, requires_grad=False)
    return p


def test_sgd_plain_and_weight_decay(device):
    p = _param([1.0, -2.0], [0.5, 0.5], device)
    optim.SGD([p], lr=0.1, weight_decay=0.2).step()
    np.testing.assert_allclose(p.numpy(), [1.0, -2.0] - 0.1 * (np.array([0.5, 0.5]) + 0.2 * np.array([1.0, -2.0])),
                               rtol=1e-6)


def test_sgd_momentum_is_an_moving_average(device):
    p = _param([1.0], [1.0], device)
    opt = optim.SGD([p], lr=0.5, momentum=0.9)
    x, u = 1.0, 0.0
    for g in [1.0, 2.0, -1.0]:
        p.grad = ndl.Tensor([g], device=device)
        opt.step()
        u = 0.9 * u + 0.1 * g
        x -= 0.5 * u
        np.testing.assert_allclose(p.numpy(), [x], rtol=1e-6)


def test_adam_matches_the_formula(device):
    p = _param([1.0, 2.0], [0.0, 0.0], device)
    opt = optim.Adam([p], lr=0.1, beta1=0.8, beta2=0.9, eps=1e-8, weight_decay=0.01)
    x = np.array([1.0, 2.0])
    m = v = np.zeros(2)
    for t, g in enumerate([[1.0, -1.0], [0.5, 2.0], [-0.3, 0.1]], start=1):
        p.grad = ndl.Tensor(g, device=device)
        opt.step()
        g = np.array(g) + 0.01 * x
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        x = x - 0.1 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.9 ** t)) + 1e-8)
        np.testing.assert_allclose(p.numpy(), x, rtol=1e-5)


def test_parameters_without_grad_are_skipped(device):
    p = nn.Parameter(ndl.Tensor([1.0], device=device))
    optim.Adam([p]).step()
    optim.SGD([p], momentum=0.5).step()
    np.testing.assert_array_equal(p.numpy(), [1.0])


def _train_steps(model, opt, device, n):
    x = ndl.Tensor(np.random.randn(8, 4), device=device, requires_grad=False)
    y = np.random.randint(0, 3, 8)
    for _ in range(n):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        del loss
    gc.collect()


def test_steps_build_no_graph_and_leak_no_tensors(device):
    for make in [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
                 lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01)]:
        model = nn.Sequential(nn.Linear(4, 8, device=device), nn.ReLU(), nn.Linear(8, 3, device=device))
        opt = make(model.parameters())
        _train_steps(model, opt, device, 2)
        opt.reset_grad()
        gc.collect()
        before = autograd.TENSOR_COUNTER
        _train_steps(model, opt, device, 5)
        opt.reset_grad()
        gc.collect()
        assert autograd.TENSOR_COUNTER == before
        for p in model.parameters():
            assert p.is_leaf() and p.inputs == () and p.requires_grad


def test_a_step_alone_creates_no_tensors(device):
    model = nn.Linear(3, 2, device=device)
    opt = optim.Adam(model.parameters())
    model(ndl.Tensor(np.ones((2, 3)), device=device)).sum().backward()
    opt.step()
    before = autograd.TENSOR_COUNTER
    opt.step()
    assert autograd.TENSOR_COUNTER == before


def test_clip_grad_norm(device):
    a = _param([0.0], [3.0], device)
    b = _param([0.0, 0.0], [4.0, 0.0], device)
    norm = optim.clip_grad_norm([a, b], max_norm=1.0)
    assert abs(norm - 5.0) < 1e-5
    np.testing.assert_allclose(a.grad.numpy(), [0.6], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.8, 0.0], rtol=1e-5)
    optim.SGD([a, b]).clip_grad_norm(10.0)  # already small: unchanged
    np.testing.assert_allclose(a.grad.numpy(), [0.6], rtol=1e-5)


def _unfused_adam(x, grads, lr, b1, b2, eps, wd):
    """Adam written with float32 numpy operations one at a time, as the unfused update does."""
    f = np.float32
    x = x.astype(np.float32)
    m = v = np.zeros_like(x)
    for t, g in enumerate(grads, start=1):
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        g = g + x * f(wd)
        m = m * f(b1) + g * f(1 - b1)
        v = v * f(b2) + (g * g) * f(1 - b2)
        x = x - (m * f(lr / c1)) / ((v * f(1.0 / c2)) ** f(0.5) + f(eps))
    return x


def test_adam_steps_match_the_unfused_float32_update(device):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((37, 11)).astype(np.float32)
    grads = [rng.standard_normal((37, 11)).astype(np.float32) for _ in range(6)]
    p = nn.Parameter(ndl.Tensor(x0, device=device))
    opt = optim.Adam([p], lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.001)
    for g in grads:
        p.grad = ndl.Tensor(g, device=device, requires_grad=False)
        opt.step()
    np.testing.assert_allclose(p.numpy(), _unfused_adam(x0, grads, 0.01, 0.9, 0.999, 1e-8, 0.001), rtol=2e-6, atol=1e-7)


def test_a_step_leaves_earlier_arrays_alone(device):
    """The step gives the parameter a new array: a detached copy taken before keeps its values."""
    for make in [lambda ps: optim.Adam(ps, lr=0.1), lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)]:
        p = _param([1.0, 2.0, 3.0], [1.0, -1.0, 0.5], device)
        before = p.data
        make([p]).step()
        np.testing.assert_array_equal(before.numpy(), [1.0, 2.0, 3.0])
        assert not np.allclose(p.numpy(), [1.0, 2.0, 3.0])


def test_grad_views_are_compacted(device):
    """A gradient that is a strided view (here a transpose) is read element by element correctly."""
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    p = nn.Parameter(ndl.Tensor(x0, device=device))
    p.grad = ndl.Tensor(g, device=device, requires_grad=False).transpose()
    optim.SGD([p], lr=0.5).step()
    np.testing.assert_allclose(p.numpy(), x0 - 0.5 * g.T, rtol=1e-6)
