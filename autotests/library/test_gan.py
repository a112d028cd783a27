"""The GAN pieces: ops.softplus, nn.LeakyReLU, nn.BCEWithLogitsLoss, nn.GANLoss and apps.gan.

Values against numpy (float64), gradients against central differences, the losses'
stability at logits of +-1000, the generator and discriminator against their layers
spelled out, the alternating step against the step spelled out (and its fakes detached
for the discriminator), a 2-D Gaussian learned by a linear generator, and PyTorch where
it is installed.
"""
import numpy as np
import pytest

import needle_kernels as ndl
import needle_kernels.nn as nn
from needle_kernels.apps import gan
from op_checks import check_gradients, check_op, check_second_order, rand


def _t(a, device=None, requires_grad=True):
    return ndl.Tensor(np.asarray(a, dtype=np.float32), device=device, requires_grad=requires_grad)


def _softplus_np(a):
    return np.logaddexp(0.0, a)


def _sigmoid_np(a):
    return 0.5 * (np.tanh(0.5 * a) + 1.0)


# ---------------------------------------------------------------- softplus


def test_softplus_values_and_gradients(device):
    check_op(ndl.softplus, _softplus_np, rand(3, 5, low=-6, high=6), device=device)
    check_op(ndl.ops.softplus, _softplus_np, rand(7, low=-3, high=3), device=device)
    check_second_order(ndl.softplus, rand(2, 3, low=-3, high=3), device=device)


def test_softplus_is_stable_at_large_logits(device):
    a = np.array([-1000.0, -100.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 100.0, 1000.0], dtype=np.float32)
    x = _t(a, device)
    out = ndl.softplus(x)
    assert np.all(np.isfinite(out.numpy()))
    np.testing.assert_allclose(out.numpy(), _softplus_np(a.astype(np.float64)), rtol=1e-6, atol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), _sigmoid_np(a.astype(np.float64)), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- LeakyReLU


@pytest.mark.parametrize("slope", [0.2, 0.01, 0.0, 1.5])
def test_leaky_relu(slope, device):
    a = rand(4, 6, low=-2, high=2)
    a[0, :3] = [0.0, 1e-4, -1e-4]
    act = nn.LeakyReLU(slope)
    out = act(_t(a, device))
    np.testing.assert_allclose(out.numpy(), np.where(a > 0, a, slope * a), rtol=1e-6, atol=1e-7)
    x = _t(a, device)
    act(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(a > 0, 1.0, slope), rtol=1e-6)
    # central differences away from the kink
    check_gradients(act, rand(3, 4, low=0.1, high=2) * np.sign(rand(3, 4)), device=device, eps=1e-3)


def test_leaky_relu_defaults_and_errors():
    assert nn.LeakyReLU().negative_slope == 0.01
    assert nn.LeakyReLU().parameters() == []
    with pytest.raises(TypeError, match="negative_slope"):
        nn.LeakyReLU("0.2")


# ---------------------------------------------------------------- the losses


def _bce_np(f, t):
    return np.mean(t * _softplus_np(-f) + (1 - t) * _softplus_np(f))


@pytest.mark.parametrize("shape", [(8, 1), (5,), (3, 4)])
def test_gan_loss_values_and_gradients(shape, device):
    f = rand(*shape, low=-4, high=4)
    for real in (True, False):
        t = 1.0 if real else 0.0
        x = _t(f, device)
        loss = nn.GANLoss()(x, real)
        assert loss.shape == ()
        np.testing.assert_allclose(float(loss.numpy()), _bce_np(f.astype(np.float64), t), rtol=1e-5)
        loss.backward()
        np.testing.assert_allclose(x.grad.numpy(), (_sigmoid_np(f.astype(np.float64)) - t) / f.size, atol=1e-6)
        check_gradients(lambda a: nn.GANLoss()(a, real), f, device=device, eps=1e-3)


def test_gan_loss_is_stable_at_large_logits(device):
    f = np.array([[1000.0], [-1000.0], [80.0], [-80.0]], dtype=np.float32)
    for real, want in ((True, (0.0 + 1000.0 + 0.0 + 80.0) / 4), (False, (1000.0 + 0.0 + 80.0 + 0.0) / 4)):
        x = _t(f, device)
        loss = nn.GANLoss()(x, real)
        np.testing.assert_allclose(float(loss.numpy()), want, rtol=1e-6)
        loss.backward()
        t = 1.0 if real else 0.0
        np.testing.assert_allclose(x.grad.numpy(), (_sigmoid_np(f.astype(np.float64)) - t) / 4, atol=1e-6)


def test_gan_loss_errors():
    with pytest.raises(TypeError, match="target_is_real"):
        nn.GANLoss()(_t(np.zeros((2, 1))), 1.0)
    with pytest.raises(TypeError, match="target_is_real"):
        nn.GANLoss()(_t(np.zeros((2, 1))), _t(np.ones((2, 1))))


def test_bce_with_logits(device):
    f = rand(6, 3, low=-5, high=5)
    t = np.random.rand(6, 3).astype(np.float32)      # soft targets are allowed
    t[0] = [0.0, 1.0, 1.0]
    loss = nn.BCEWithLogitsLoss()
    for target in (t, _t(t, device, requires_grad=False)):
        value = loss(_t(f, device), target)
        np.testing.assert_allclose(float(value.numpy()), _bce_np(f.astype(np.float64), t.astype(np.float64)), rtol=1e-5)
    check_gradients(lambda a: loss(a, t), f, device=device, eps=1e-3)
    # with hard targets it is GANLoss
    ones = np.ones((6, 3), dtype=np.float32)
    np.testing.assert_allclose(float(loss(_t(f, device), ones).numpy()), float(nn.GANLoss()(_t(f, device), True).numpy()),
                               rtol=1e-6)
    big = np.array([[1000.0, -1000.0]], dtype=np.float32)
    np.testing.assert_allclose(float(loss(_t(big, device), np.array([[0.0, 1.0]])).numpy()), 1000.0, rtol=1e-6)
    with pytest.raises(ValueError, match=r"target shape \(6,\) does not match logits \(6, 3\)"):
        loss(_t(f, device), np.zeros(6))


def test_losses_against_torch():
    torch = pytest.importorskip("torch")
    f = rand(9, 2, low=-20, high=20)
    t = (np.random.rand(9, 2) > 0.5).astype(np.float32)
    tf = torch.tensor(f, requires_grad=True)
    ref = torch.nn.functional.binary_cross_entropy_with_logits(tf, torch.tensor(t))
    ref.backward()
    x = _t(f)
    ours = nn.BCEWithLogitsLoss()(x, t)
    ours.backward()
    np.testing.assert_allclose(float(ours.numpy()), float(ref.detach()), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tf.grad.numpy(), atol=1e-7)
    np.testing.assert_allclose(ndl.softplus(_t(f)).numpy(), torch.nn.functional.softplus(torch.tensor(f)).numpy(),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(nn.LeakyReLU(0.2)(_t(f)).numpy(),
                               torch.nn.functional.leaky_relu(torch.tensor(f), 0.2).numpy(), rtol=1e-6)


# ---------------------------------------------------------------- generator and discriminator


def _mlp_np(x, params, act):
    """x through (W, b) pairs with ``act`` between them."""
    for i, (W, b) in enumerate(params):
        if i:
            x = act(x)
        x = x @ W + b
    return x


def _pairs(module):
    ps = [p.numpy().astype(np.float64) for p in module.parameters()]
    return list(zip(ps[0::2], ps[1::2]))


def test_generator(device):
    np.random.seed(3)
    G = gan.Generator(2, 2, device=device)
    np.random.seed(3)
    ref = nn.Linear(2, 2, device=device)
    assert len(G.parameters()) == 2
    for p, q in zip(G.parameters(), ref.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    z = rand(5, 2)
    np.testing.assert_allclose(G(_t(z, device)).numpy(), _mlp_np(z, _pairs(G), None), rtol=1e-5, atol=1e-6)
    np.random.seed(4)
    G = gan.Generator(3, 2, hidden=(6, 4), device=device)
    assert [p.shape for p in G.parameters()] == [(3, 6), (1, 6), (6, 4), (1, 4), (4, 2), (1, 2)]
    z = rand(5, 3)
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    np.testing.assert_allclose(G(_t(z, device)).numpy(), _mlp_np(z, _pairs(G), relu), rtol=1e-5, atol=1e-6)
    check_gradients(G, z, device=device, eps=1e-3)


def test_discriminator(device):
    np.random.seed(5)
    D = gan.Discriminator(2, device=device)
    assert [p.shape for p in D.parameters()] == [(2, 20), (1, 20), (20, 10), (1, 10), (10, 1), (1, 1)]
    np.random.seed(5)
    layers = [nn.Linear(2, 20, device=device), nn.Linear(20, 10, device=device), nn.Linear(10, 1, device=device)]
    for p, q in zip(D.parameters(), [p for layer in layers for p in layer.parameters()]):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    x = rand(6, 2, low=-3, high=3)
    leaky = lambda a: np.where(a > 0, a, 0.2 * a)  # noqa: E731
    out = D(_t(x, device))
    assert out.shape == (6, 1)
    np.testing.assert_allclose(out.numpy(), _mlp_np(x, _pairs(D), leaky), rtol=1e-5, atol=1e-6)
    D = gan.Discriminator(3, hidden=(4,), negative_slope=0.1, device=device)
    x = rand(4, 3)
    check_gradients(D, x, device=device, eps=1e-3)
    # the gradient of a parameter, through the loss
    W = D.parameters()[0]
    loss = lambda: nn.GANLoss()(D(_t(x, device)), True)  # noqa: E731
    W.grad = None
    loss().backward()
    analytic = W.grad.numpy()
    base = W.numpy().astype(np.float64)
    eps = 1e-3
    for idx in [(0, 0), (2, 3), (1, 1)]:
        vals = []
        for sign in (1, -1):
            pert = base.copy()
            pert[idx] += sign * eps
            W.data = ndl.Tensor(pert.astype(np.float32), device=device)
            vals.append(float(loss().numpy()))
        W.data = ndl.Tensor(base.astype(np.float32), device=device)
        assert abs((vals[0] - vals[1]) / (2 * eps) - analytic[idx]) < 2e-3


def test_generator_discriminator_errors():
    with pytest.raises(ValueError, match=r"expected \(B, 2\)"):
        gan.Generator(2, 3)(_t(np.zeros((4, 3))))
    with pytest.raises(ValueError, match=r"expected \(B, 3\)"):
        gan.Discriminator(3)(_t(np.zeros((4, 2))))
    with pytest.raises(ValueError, match="positive integers"):
        gan.Discriminator(2, hidden=(0,))
    with pytest.raises(ValueError, match="positive integers"):
        gan.Generator(2, 2.5)


# ---------------------------------------------------------------- the training step


def _spelled_out_step(G, D, opt_g, opt_d, x, z):
    loss = nn.GANLoss()
    fake = G(z)
    opt_d.reset_grad()
    loss_d = loss(D(x), True) + loss(D(fake.detach()), False)
    loss_d.backward()
    opt_d.step()
    opt_g.reset_grad()
    loss_g = loss(D(fake), True)
    loss_g.backward()
    opt_g.step()
    return float(loss_d.numpy()), float(loss_g.numpy())


def _pair(seed, device):
    np.random.seed(seed)
    G = gan.Generator(3, 2, hidden=(5,), device=device)
    D = gan.Discriminator(2, hidden=(6,), device=device)
    return G, D, ndl.optim.Adam(G.parameters(), lr=0.05, beta1=0.5), ndl.optim.SGD(D.parameters(), lr=0.1)


def test_gan_train_step_is_the_step_spelled_out(device):
    rng = np.random.default_rng(0)
    mine, ref = _pair(1, device), _pair(1, device)
    for _ in range(3):
        x = _t(rng.standard_normal((8, 2)), device, requires_grad=False)
        z = _t(rng.standard_normal((8, 3)), device, requires_grad=False)
        np.testing.assert_allclose(gan.gan_train_step(*mine, x, z), _spelled_out_step(*ref, x, z), rtol=1e-5)
    for a, b in zip(mine[0].parameters() + mine[1].parameters(), ref[0].parameters() + ref[1].parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_gan_train_step_moves_each_network_by_its_own_loss(device):
    """D's update follows only L_D, G's only L_G: compared with single SGD steps on each loss."""
    rng = np.random.default_rng(1)
    x = _t(rng.standard_normal((6, 2)), device, requires_grad=False)
    z = _t(rng.standard_normal((6, 2)), device, requires_grad=False)
    np.random.seed(2)
    G, D = gan.Generator(2, 2, device=device), gan.Discriminator(2, hidden=(4,), device=device)
    g0, d0 = [p.numpy().copy() for p in G.parameters()], [p.numpy().copy() for p in D.parameters()]
    loss = nn.GANLoss()
    # L_D's gradient of D's parameters at the start
    (loss(D(x), True) + loss(D(G(z).detach()), False)).backward()
    grad_d = [p.grad.numpy().copy() for p in D.parameters()]
    for p in G.parameters() + D.parameters():
        p.grad = None
    gan.gan_train_step(G, D, ndl.optim.SGD(G.parameters(), lr=0.5), ndl.optim.SGD(D.parameters(), lr=0.5), x, z)
    for p, before, g in zip(D.parameters(), d0, grad_d):
        np.testing.assert_allclose(p.numpy(), before - 0.5 * g, rtol=1e-5, atol=1e-6)
    # L_G's gradient of G's parameters, through the updated D
    G2 = gan.Generator(2, 2, device=device)
    for p, v in zip(G2.parameters(), g0):
        p.data = ndl.Tensor(v, device=device)
    loss(D(G2(z)), True).backward()
    for p, q, before in zip(G.parameters(), G2.parameters(), g0):
        np.testing.assert_allclose(p.numpy(), before - 0.5 * q.grad.numpy(), rtol=1e-5, atol=1e-6)


class _CountBackward(ndl.autograd.TensorOp):
    """The identity, counting how often a gradient flows back through it."""

    calls = 0

    def compute(self, a):
        return a

    def gradient(self, out_grad, node):
        _CountBackward.calls += 1
        return out_grad


def test_gan_train_step_detaches_the_fakes_for_the_discriminator():
    class Counted(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, z):
            return _CountBackward()(self.inner(z))

    np.random.seed(0)
    G, D = Counted(gan.Generator(2, 2)), gan.Discriminator(2, hidden=(3,))
    _CountBackward.calls = 0
    x, z = _t(np.random.randn(4, 2), requires_grad=False), _t(np.random.randn(4, 2), requires_grad=False)
    gan.gan_train_step(G, D, ndl.optim.SGD(G.parameters()), ndl.optim.SGD(D.parameters()), x, z)
    assert _CountBackward.calls == 1, "the generator's graph is back-propagated once, for L_G only"


def test_gan_train_step_uses_the_loss_given():
    calls = []

    class Recorded(nn.Module):
        def forward(self, logits, target_is_real):
            calls.append(target_is_real)
            return nn.GANLoss()(logits, target_is_real)

    np.random.seed(0)
    G, D = gan.Generator(2, 2), gan.Discriminator(2, hidden=(3,))
    x, z = _t(np.random.randn(4, 2), requires_grad=False), _t(np.random.randn(4, 2), requires_grad=False)
    gan.gan_train_step(G, D, ndl.optim.SGD(G.parameters()), ndl.optim.SGD(D.parameters()), x, z, loss_fn=Recorded())
    assert calls == [True, False, True]


def test_linear_generator_learns_a_gaussian():
    """x = eps A + mu: after training, the generator's mean b and covariance W^T W are the target's."""
    A = np.array([[1.0, 2.0], [-0.2, 0.5]], dtype=np.float32)
    mu = np.array([1.0, 2.0], dtype=np.float32)
    np.random.seed(0)
    G, D = gan.Generator(2, 2), gan.Discriminator(2)
    opt_g = ndl.optim.Adam(G.parameters(), lr=0.02, beta1=0.5)
    opt_d = ndl.optim.Adam(D.parameters(), lr=0.02, beta1=0.5)
    covs, means, steps = [], [], 1000
    for step in range(steps):
        if step in (600, 800):                       # smaller steps at the end calm the wobble
            opt_g.lr = opt_d.lr = {600: 0.02 / 3, 800: 0.002}[step]
        x = ndl.Tensor(np.random.randn(256, 2).astype(np.float32) @ A + mu, requires_grad=False)
        z = ndl.Tensor(np.random.randn(256, 2).astype(np.float32), requires_grad=False)
        gan.gan_train_step(G, D, opt_g, opt_d, x, z)
        if step >= 800:
            W, b = (p.numpy().astype(np.float64) for p in G.parameters())
            covs.append(W.T @ W)
            means.append(b.reshape(-1))
    cov, mean = np.mean(covs, axis=0), np.mean(means, axis=0)
    np.testing.assert_allclose(mean, mu, atol=0.15)
    np.testing.assert_allclose(cov, A.T @ A, atol=0.3)
