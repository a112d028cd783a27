"""Every op: forward against numpy and gradients against central differences, one line each."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import needle_kernels as ndl
from op_checks import check_op, check_second_order, rand


def pos(*shape):
    return rand(*shape, low=0.5, high=2.0)


def away_from_zero(*shape):
    # |x| >= 0.2 keeps relu's kink away from the finite-difference step
    x = rand(*shape)
    return np.where(np.abs(x) < 0.2, np.sign(x + 1e-9) * 0.2 + x, x).astype(np.float32)


def np_logsumexp(x, axes):
    m = x.max(axis=axes, keepdims=True)
    return (np.log(np.exp(x - m).sum(axis=axes, keepdims=True)) + m).squeeze(axis=axes)


# ---------------------------------------------------------------- element-wise
def test_add(device): check_op(ndl.add, np.add, rand(3, 4), rand(3, 4), device=device)
def test_add_broadcast(device): check_op(ndl.add, np.add, rand(2, 3, 4), rand(3, 1), device=device)
def test_add_scalar(device): check_op(lambda a: ndl.add_scalar(a, 1.5), lambda a: a + 1.5, rand(3, 4), device=device)
def test_multiply(device): check_op(ndl.multiply, np.multiply, rand(3, 4), rand(3, 4), device=device)
def test_multiply_broadcast(device): check_op(ndl.multiply, np.multiply, rand(4), rand(3, 4), device=device)
def test_mul_scalar(device): check_op(lambda a: ndl.mul_scalar(a, -2.5), lambda a: a * -2.5, rand(3, 4), device=device)
def test_power(device): check_op(ndl.power, np.power, pos(3, 4), rand(3, 4), device=device, rtol=1e-4)
def test_power_scalar(device): check_op(lambda a: ndl.power_scalar(a, 3), lambda a: a ** 3, rand(3, 4), device=device)
def test_power_scalar_fraction(device): check_op(lambda a: ndl.power_scalar(a, -0.5), lambda a: a ** -0.5, pos(3, 4), device=device)
def test_divide(device): check_op(ndl.divide, np.divide, rand(3, 4), pos(3, 4), device=device)
def test_divide_broadcast(device): check_op(ndl.divide, np.divide, rand(3, 4), pos(3, 1), device=device)
def test_divide_scalar(device): check_op(lambda a: ndl.divide_scalar(a, 4.0), lambda a: a / 4.0, rand(3, 4), device=device)
def test_negate(device): check_op(ndl.negate, np.negative, rand(3, 4), device=device)
def test_log(device): check_op(ndl.log, np.log, pos(3, 4), device=device)
def test_exp(device): check_op(ndl.exp, np.exp, rand(3, 4), device=device)
def test_relu(device): check_op(ndl.relu, lambda a: np.maximum(a, 0), away_from_zero(3, 4), device=device)
def test_tanh(device): check_op(ndl.tanh, np.tanh, rand(3, 4), device=device)
def test_sigmoid(device): check_op(ndl.sigmoid, lambda a: 1 / (1 + np.exp(-a)), rand(3, 4) * 4, device=device)
def test_relu_backward(device): check_op(ndl.relu_backward, lambda g, a: g * (a > 0), rand(3, 4), away_from_zero(3, 4), device=device)
def test_tanh_backward(device): check_op(ndl.tanh_backward, lambda g, y: g * (1 - y * y), rand(3, 4), rand(3, 4), device=device)
def test_sigmoid_backward(device): check_op(ndl.sigmoid_backward, lambda g, y: g * y * (1 - y), rand(3, 4), rand(3, 4), device=device)
def test_matmul_bias(device): check_op(ndl.matmul_bias, lambda x, w, b: x @ w + b, rand(4, 3), rand(3, 5), rand(1, 5), device=device, rtol=1e-4)
def test_matmul_bias_flat_bias(device): check_op(ndl.matmul_bias, lambda x, w, b: x @ w + b, rand(4, 3), rand(3, 5), rand(5), device=device, rtol=1e-4)


def test_matmul_bias_refuses_misfits(device):
    with pytest.raises(ValueError, match=r"matmul_bias: shapes \(4, 3\), \(2, 5\) and bias \(5,\)"):
        ndl.matmul_bias(*(ndl.Tensor(rand(*s), device=device) for s in ((4, 3), (2, 5), (5,))))


def test_linear_uses_matmul_bias_and_equals_the_generic_layer(device):
    np.random.seed(0)
    layer = ndl.nn.Linear(6, 4, device=device)
    x = ndl.Tensor(rand(5, 6), device=device)
    out = layer(x)
    assert isinstance(out.op, ndl.ops.MatMulBias)
    generic = x @ layer.weight + layer.bias.broadcast_to((5, 4))
    np.testing.assert_allclose(out.numpy(), generic.numpy(), rtol=1e-5, atol=1e-6)


def test_add_n(device): check_op(ndl.add_n, lambda *xs: sum(xs), rand(3, 4), rand(3, 4), rand(3, 4), rand(3, 4), device=device)


def test_add_n_refuses_mixed_shapes(device):
    with pytest.raises(ValueError, match=r"add_n: array 1 has shape \(4, 3\)"):
        ndl.add_n(ndl.Tensor(np.ones((3, 4)), device=device), ndl.Tensor(np.ones((4, 3)), device=device))


def test_adjoints_of_a_reused_value_are_one_add_n_node(device):
    # y is used by four ops: its adjoint is one add_n of the four partials, not three adds
    x = ndl.Tensor(rand(3, 4), device=device)
    y = ndl.Tensor(rand(3, 4), device=device)
    ((y * x + y) * y + ndl.tanh(y)).sum().backward()
    xn, yn = x.numpy().astype(np.float64), y.numpy().astype(np.float64)
    expected = 2 * yn * xn + 2 * yn + (1 - np.tanh(yn) ** 2)
    np.testing.assert_allclose(y.grad.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert isinstance(y.grad.op, ndl.ops.AddN) and len(y.grad.inputs) == 4


def test_sigmoid_extreme_values_do_not_overflow(device):
    out = ndl.sigmoid(ndl.Tensor([-200.0, 0.0, 200.0], device=device)).numpy()
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, [0.0, 0.5, 1.0], atol=1e-6)


# ---------------------------------------------------------------- operators
def test_tensor_operators(device):
    a, b = rand(2, 3), pos(2, 3)
    check_op(lambda x, y: (x - y) * 2 / y + 1 - x ** 2, lambda x, y: (x - y) * 2 / y + 1 - x ** 2, a, b, device=device)
    check_op(lambda x: 3 - x, lambda x: 3 - x, a, device=device)
    check_op(lambda x: 1 / x, lambda x: 1 / x, b, device=device)
    check_op(lambda x: -x @ ndl.transpose(x), lambda x: -x @ x.T, a, device=device)
    check_op(lambda x: np.float64(2.0) * x, lambda x: 2.0 * x, a, device=device)


# ---------------------------------------------------------------- shapes
def test_reshape(device): check_op(lambda a: ndl.reshape(a, (4, 3)), lambda a: a.reshape(4, 3), rand(3, 4), device=device)
def test_reshape_minus_one(device): check_op(lambda a: ndl.reshape(a, (2, -1)), lambda a: a.reshape(2, -1), rand(2, 3, 2), device=device)
def test_broadcast_to(device): check_op(lambda a: ndl.broadcast_to(a, (2, 3, 4)), lambda a: np.broadcast_to(a, (2, 3, 4)), rand(3, 1), device=device)
def test_broadcast_to_new_axes(device): check_op(lambda a: ndl.broadcast_to(a, (3, 4)), lambda a: np.broadcast_to(a, (3, 4)), rand(4), device=device)
def test_summation_all(device): check_op(ndl.summation, np.sum, rand(3, 4), device=device)
def test_summation_axis(device): check_op(lambda a: ndl.summation(a, axes=1), lambda a: a.sum(axis=1), rand(3, 4, 2), device=device)
def test_summation_axes(device): check_op(lambda a: ndl.summation(a, axes=(0, 2)), lambda a: a.sum(axis=(0, 2)), rand(3, 4, 2), device=device)
def test_transpose_default(device): check_op(ndl.transpose, lambda a: np.swapaxes(a, -1, -2), rand(2, 3, 4), device=device)
def test_transpose_pair(device): check_op(lambda a: ndl.transpose(a, (0, 2)), lambda a: np.swapaxes(a, 0, 2), rand(2, 3, 4), device=device)
def test_transpose_permutation(device): check_op(lambda a: ndl.transpose(a, (2, 0, 1)), lambda a: a.transpose(2, 0, 1), rand(2, 3, 4), device=device)
def test_amax(device): check_op(lambda a: ndl.amax(a, axes=(1,)), lambda a: a.max(axis=1), np.random.permutation(12).reshape(3, 4) * 0.1, device=device)


# ---------------------------------------------------------------- matmul
def test_matmul(device): check_op(ndl.matmul, np.matmul, rand(3, 4), rand(4, 5), device=device)
def test_matmul_batched(device): check_op(ndl.matmul, np.matmul, rand(2, 3, 4), rand(2, 4, 5), device=device)
def test_matmul_broadcast_left(device): check_op(ndl.matmul, np.matmul, rand(3, 4), rand(2, 4, 2), device=device)
def test_matmul_broadcast_right(device): check_op(ndl.matmul, np.matmul, rand(2, 2, 3, 4), rand(4, 2), device=device)
def test_matmul_broadcast_batch_dims(device): check_op(ndl.matmul, np.matmul, rand(2, 1, 2, 3), rand(3, 3, 2), device=device)
def test_matmul_vector(device): check_op(ndl.matmul, np.matmul, rand(3, 4), rand(4), device=device)


# ---------------------------------------------------------------- softmax family
def test_logsumexp_all(device): check_op(ndl.logsumexp, lambda a: np_logsumexp(a, (0, 1)), rand(3, 4), device=device)
def test_logsumexp_axis(device): check_op(lambda a: ndl.logsumexp(a, axes=(1,)), lambda a: np_logsumexp(a, (1,)), rand(3, 4, 2), device=device)
def test_logsumexp_axes(device): check_op(lambda a: ndl.logsumexp(a, axes=(0, 2)), lambda a: np_logsumexp(a, (0, 2)), rand(3, 4, 2), device=device)
def test_logsoftmax(device): check_op(ndl.logsoftmax, lambda a: a - np_logsumexp(a, (1,))[:, None], rand(3, 5), device=device)
def test_softmax(device): check_op(ndl.softmax, lambda a: np.exp(a - np_logsumexp(a, (a.ndim - 1,))[..., None]), rand(2, 3, 5), device=device)
def test_softmax_of_a_row(device): check_op(ndl.softmax, lambda a: np.exp(a - np_logsumexp(a, (0,))), rand(7), device=device)


LABELS = np.array([2, 0, 4])
def np_xent(z, y): return np_logsumexp(z, (1,)) - z[np.arange(len(z)), y]
def test_softmax_cross_entropy(device): check_op(lambda a: ndl.softmax_cross_entropy(a, LABELS), lambda a: np_xent(a, LABELS), rand(3, 5) * 3, device=device)


def test_softmax_cross_entropy_is_the_unfused_formula(device):
    # the fused op equals logsumexp(z) - (z * one_hot(y)).sum(1), in value and in gradient
    z = rand(4, 7) * 50
    y = np.array([6, 0, 3, 3])
    a, b = ndl.Tensor(z, device=device), ndl.Tensor(z, device=device)
    fused = ndl.softmax_cross_entropy(a, y)
    plain = ndl.logsumexp(b, (1,)) - (b * ndl.init.one_hot(7, y, device=device)).sum((1,))
    np.testing.assert_allclose(fused.numpy(), plain.numpy(), rtol=1e-5, atol=1e-4)
    w = rand(4)
    (fused * ndl.Tensor(w, device=device)).sum().backward()
    (plain * ndl.Tensor(w, device=device)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="label 7"):
        ndl.softmax_cross_entropy(a, np.array([7, 0, 0, 0]))


def test_logsumexp_is_stable(device):
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]], dtype=np.float32)
    out = ndl.logsumexp(ndl.Tensor(x, device=device), axes=(1,)).numpy()
    np.testing.assert_allclose(out, [1000 + np.log(2), -1000 + np.log(2)], rtol=1e-6)
    ls = ndl.logsoftmax(ndl.Tensor(x, device=device)).numpy()
    np.testing.assert_allclose(ls, np.full((2, 2), -np.log(2)), rtol=1e-6)


# ---------------------------------------------------------------- stack / split / tuples
def test_stack(device): check_op(lambda a, b: ndl.stack([a, b], 1), lambda a, b: np.stack([a, b], 1), rand(3, 4), rand(3, 4), device=device)
def test_split(device): check_op(lambda a: ndl.split(a, 1)[1] * ndl.split(a, 1)[2], lambda a: a[:, 1] * a[:, 2], rand(2, 3, 2), device=device)
def test_split_then_stack(device): check_op(lambda a: ndl.stack(ndl.split(a, 0), 1), lambda a: np.swapaxes(a, 0, 1), rand(3, 4), device=device)
def test_fused_add_scalars(device): check_op(lambda a: ndl.fused_add_scalars(a, 1.0, 2.0)[0] * ndl.fused_add_scalars(a, 1.0, 2.0)[1], lambda a: (a + 1) * (a + 2), rand(3), device=device)


def test_split_items_each_read_once_gives_full_gradient(device):
    x = ndl.Tensor(rand(5, 3), device=device)
    parts = ndl.split(x, 0)
    total = parts[0]
    for i in range(1, 5):
        total = total + parts[i] * float(i + 1)
    total.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.repeat(np.arange(1, 6)[:, None], 3, 1))


# ---------------------------------------------------------------- flip / dilate / pad
def test_flip(device): check_op(lambda a: ndl.flip(a, (0, 2)), lambda a: np.flip(a, (0, 2)), rand(2, 3, 4), device=device)


def np_dilate(a, axes, d):
    shape = [n * (d + 1) if i in axes else n for i, n in enumerate(a.shape)]
    out = np.zeros(shape)
    out[tuple(slice(None, None, d + 1) if i in axes else slice(None) for i in range(a.ndim))] = a
    return out


def test_dilate(device): check_op(lambda a: ndl.dilate(a, (0, 1), 2), lambda a: np_dilate(a, (0, 1), 2), rand(2, 3, 2), device=device)
def test_undilate(device): check_op(lambda a: ndl.undilate(a, (1,), 1), lambda a: a[:, ::2], rand(2, 6), device=device)
def test_pad(device): check_op(lambda a: ndl.pad(a, ((1, 0), (2, 1))), lambda a: np.pad(a, ((1, 0), (2, 1))), rand(2, 3), device=device)
def test_crop(device): check_op(lambda a: ndl.crop(a, ((1, 0), (2, 1))), lambda a: a[1:, 2:-1], rand(3, 5), device=device)


def test_dilate_matches_needle_shape(device):
    out = ndl.dilate(ndl.Tensor(np.ones((2, 3)), device=device), (1,), 1)
    assert out.shape == (2, 6)
    np.testing.assert_array_equal(out.numpy()[0], [1, 0, 1, 0, 1, 0])


# ---------------------------------------------------------------- shape errors
@pytest.mark.parametrize("fn, shapes", [
    (ndl.add, [(2, 3), (3, 2)]),
    (ndl.multiply, [(2, 3), (4,)]),
    (ndl.divide, [(5,), (4,)]),
    (ndl.matmul, [(2, 3), (2, 3)]),
    (ndl.matmul, [(2, 2, 3), (3, 3, 2)]),
    (lambda a: ndl.reshape(a, (4, 4)), [(2, 3)]),
    (lambda a: ndl.broadcast_to(a, (2, 4)), [(2, 3)]),
    (lambda a, b: ndl.stack([a, b], 0), [(2, 3), (3, 2)]),
    (lambda a, b: ndl.conv(a, b), [(1, 5, 5, 3), (3, 3, 2, 4)]),
])
def test_shape_mismatch_names_the_shapes(fn, shapes, device):
    tensors = [ndl.Tensor(np.ones(s), device=device) for s in shapes]
    with pytest.raises(ValueError) as info:
        fn(*tensors)
    message = str(info.value)
    for s in shapes:
        assert str(tuple(s)) in message, message


def test_summation_bad_axis(device):
    with pytest.raises(ValueError, match="axis 2"):
        ndl.summation(ndl.Tensor(np.ones((2, 3)), device=device), axes=(2,))


# ---------------------------------------------------------------- second derivatives
def test_second_order_elementwise(device):
    check_second_order(lambda x: ndl.exp(x) * ndl.tanh(x) + ndl.sigmoid(x) * x ** 3, rand(3, 2), device=device)


def test_second_order_through_the_activation_adjoints(device):
    # differentiates relu_backward, tanh_backward and sigmoid_backward in both their inputs
    check_second_order(lambda x: ndl.relu(x) * x * x + ndl.tanh(x) * x + ndl.sigmoid(x) * x, away_from_zero(3, 2), device=device)


def test_second_order_matmul_bias(device):
    check_second_order(lambda x, w, b: ndl.tanh(ndl.matmul_bias(x, w, b)), rand(3, 2), rand(2, 4), rand(1, 4), device=device)


def test_second_order_softmax(device):
    check_second_order(lambda x: ndl.softmax(x) * x, rand(3, 4), device=device)


def test_softmax_of_a_masked_row(device):
    # an attention row with future keys masked by -max_float: exact zeros there, no NaN
    x = rand(2, 5)
    x[:, 3:] = -np.finfo(np.float32).max
    out = ndl.softmax(ndl.Tensor(x, device=device)).numpy()
    e = np.exp(x[:, :3] - x[:, :3].max(1, keepdims=True))
    np.testing.assert_allclose(out[:, :3], e / e.sum(1, keepdims=True), rtol=1e-5)
    assert (out[:, 3:] == 0).all()


def test_second_order_add_n(device):
    check_second_order(lambda x: ndl.add_n(x * x, ndl.exp(x), x), rand(3, 2), device=device)


def test_second_order_log_divide(device):
    check_second_order(lambda x, y: ndl.log(x) / y, pos(3), pos(3), device=device)


def test_second_order_matmul_and_logsumexp(device):
    check_second_order(lambda x, w: ndl.logsumexp(x @ w, axes=(1,)), rand(2, 3), rand(3, 4), device=device)


def test_second_order_softmax_cross_entropy(device):
    check_second_order(lambda x, w: ndl.softmax_cross_entropy(x @ w, LABELS), rand(3, 3), rand(3, 5), device=device)


def test_second_order_logsoftmax(device):
    check_second_order(ndl.logsoftmax, rand(2, 4), device=device)


# ---------------------------------------------------------------- property tests over shapes
_settings = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_dims = st.lists(st.integers(1, 3), min_size=1, max_size=3)


@st.composite
def broadcastable_pair(draw):
    shape = draw(_dims)
    other = [1 if draw(st.booleans()) else n for n in shape]
    other = other[draw(st.integers(0, len(other) - 1)):]
    return (tuple(shape), tuple(other)) if draw(st.booleans()) else (tuple(other), tuple(shape))


@_settings
@given(shapes=broadcastable_pair(), op=st.sampled_from(["add", "multiply", "divide"]))
def test_broadcasting_binary_ops(device, shapes, op):
    a, b = rand(*shapes[0]), pos(*shapes[1])
    check_op(getattr(ndl, op), getattr(np, op), a, b, device=device)


@_settings
@given(shape=_dims, data=st.data())
def test_summation_any_axes(device, shape, data):
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    check_op(lambda a: ndl.summation(a, axes), lambda a: a.sum(axis=axes), rand(*shape), device=device)


@_settings
@given(shape=st.lists(st.integers(1, 3), min_size=3, max_size=4), data=st.data())
def test_transpose_any_permutation(device, shape, data):
    # two axes always mean "swap these two" (needle), so permutations start at 3-D
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    check_op(lambda a: ndl.transpose(a, perm), lambda a: a.transpose(perm), rand(*shape), device=device)


_view_ops = {
    "exp": (ndl.exp, np.exp),
    "sum": (lambda a: ndl.summation(a, (1,)), lambda a: a.sum(1)),
    "logsumexp": (lambda a: ndl.logsumexp(a, (0,)), lambda a: np_logsumexp(a, (0,))),
    "matmul": (lambda a: a @ ndl.transpose(a), lambda a: a @ a.T),
    "reshape": (lambda a: ndl.reshape(a, (-1,)), lambda a: a.reshape(-1)),
}


@_settings
@given(rows=st.integers(2, 4), cols=st.integers(2, 4), op=st.sampled_from(sorted(_view_ops)))
def test_ops_on_strided_views(device, rows, cols, op):
    # transposed and cropped inputs are non-compact views: strides and offsets must be honoured
    fn, ref = _view_ops[op]
    view = lambda a: ndl.crop(ndl.transpose(a), ((1, 0), (0, 1)))
    check_op(lambda a: fn(view(a)), lambda a: ref(a.T[1:, :-1]), rand(rows + 1, cols + 1), device=device,
             rtol=1e-5, atol=1e-5)
