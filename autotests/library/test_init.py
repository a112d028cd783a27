"""Initializers: seeded draws equal numpy's float64 stream cast to float32, and the right bounds."""
import math

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels import init


def test_rand_and_randn_follow_numpys_global_rng(device):
    np.random.seed(3)
    expected_u = (np.random.rand(2, 3) * 4 - 1).astype(np.float32)
    expected_n = (np.random.randn(4) * 2 + 1).astype(np.float32)
    np.random.seed(3)
    u = init.rand(2, 3, low=-1, high=3, device=device)
    n = init.randn(4, mean=1, std=2, device=device)
    np.testing.assert_array_equal(u.numpy(), expected_u)
    np.testing.assert_array_equal(n.numpy(), expected_n)
    assert u.device == device and u.dtype == "float32" and not u.requires_grad


def test_constants(device):
    np.testing.assert_array_equal(init.constant(2, 3, c=7, device=device).numpy(), np.full((2, 3), 7))
    np.testing.assert_array_equal(init.ones(3, device=device).numpy(), np.ones(3))
    np.testing.assert_array_equal(init.zeros(2, 2, device=device, requires_grad=True).numpy(), np.zeros((2, 2)))
    assert init.zeros(2, requires_grad=True, device=device).requires_grad
    x = init.rand(2, 5, device=device)
    assert init.zeros_like(x).shape == (2, 5) and init.ones_like(x).numpy().sum() == 10
    assert init.zeros_like(x).device == device


def test_randb(device):
    np.random.seed(1)
    expected = np.random.rand(1000) <= 0.3
    np.random.seed(1)
    b = init.randb(1000, p=0.3, device=device).numpy()
    np.testing.assert_array_equal(b, expected.astype(np.float32))


def test_one_hot(device):
    oh = init.one_hot(4, [1, 3, 0], device=device)
    np.testing.assert_array_equal(oh.numpy(), np.eye(4)[[1, 3, 0]])
    oh2 = init.one_hot(3, ndl.Tensor([[0, 2]], device=device), device=device)
    assert oh2.shape == (1, 2, 3)
    with pytest.raises(ValueError):
        init.one_hot(3, [3])


def test_one_hot_never_builds_the_identity(device):
    # a language model's vocabulary: eye(n) would be n * n floats (4 TB here) on every call
    n = 1_000_000
    oh = init.one_hot(n, [7, n - 1], device=device).numpy()
    assert oh.shape == (2, n) and oh.sum() == 2 and oh[0, 7] == 1 and oh[1, n - 1] == 1
    assert np.asarray(device.one_hot(n, np.array([3])))[0, 3] == 1


def test_xavier(device):
    np.random.seed(0)
    a = math.sqrt(6 / (20 + 30)) * 2.0
    expected = (np.random.rand(20, 30) * 2 * a - a).astype(np.float32)
    np.random.seed(0)
    w = init.xavier_uniform(20, 30, gain=2.0, device=device).numpy()
    np.testing.assert_allclose(w, expected, rtol=1e-6)
    n = init.xavier_normal(200, 300, device=device).numpy()
    assert abs(n.std() - math.sqrt(2 / 500)) < 0.003


def test_kaiming(device):
    np.random.seed(0)
    bound = math.sqrt(2) * math.sqrt(3 / 50)
    expected = (np.random.rand(50, 10) * 2 * bound - bound).astype(np.float32)
    np.random.seed(0)
    w = init.kaiming_uniform(50, 10, device=device).numpy()
    np.testing.assert_allclose(w, expected, rtol=1e-6)
    shaped = init.kaiming_uniform(27, 72, shape=(3, 3, 3, 8), device=device)
    assert shaped.shape == (3, 3, 3, 8)
    n = init.kaiming_normal(400, 300, device=device).numpy()
    assert abs(n.std() - math.sqrt(2 / 400)) < 0.003
    with pytest.raises(ValueError, match="nonlinearity"):
        init.kaiming_uniform(3, 3, nonlinearity="swish")


def test_shape_as_a_tuple(device):
    assert init.rand((2, 3), device=device).shape == (2, 3)
