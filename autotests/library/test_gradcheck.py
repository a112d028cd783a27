"""Central differences (needle_kernels.gradcheck) agree with derivatives known in closed form,
and the op checks built on them catch a wrong gradient."""
import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.autograd import TensorOp
from needle_kernels.gradcheck import numerical_gradients, partial_derivative
from op_checks import check_gradients, rand


def test_gradients_of_a_known_function():
    x, y = rand(3, 4), rand(3, 4)
    kept = x.copy()
    gx, gy = numerical_gradients(lambda a, b: np.sum(a ** 2 * b), [x, y], eps=1e-5)
    assert gx.dtype == gy.dtype == np.float64
    np.testing.assert_allclose(gx, 2 * x * y, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(gy, x.astype(np.float64) ** 2, rtol=1e-7, atol=1e-8)
    np.testing.assert_array_equal(x, kept)


def test_one_entry_is_restored_after_its_difference():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert partial_derivative(lambda m: np.sum(np.sin(m)), [a], 0, (1, 0), 1e-6) == pytest.approx(np.cos(3.0))
    np.testing.assert_array_equal(a, [[1.0, 2.0], [3.0, 4.0]])


class _DoubleWithAWrongGradient(TensorOp):
    """out = 2a, whose gradient claims da = g (it is 2g)."""

    def compute(self, a):
        return a * 2

    def gradient(self, out_grad, node):
        return out_grad


def test_a_wrong_gradient_is_caught(device):
    check_gradients(lambda a: ndl.mul_scalar(a, 2), rand(3, 4), device=device)
    with pytest.raises(AssertionError, match="gradient of input 0"):
        check_gradients(lambda a: _DoubleWithAWrongGradient()(a), rand(3, 4), device=device)
