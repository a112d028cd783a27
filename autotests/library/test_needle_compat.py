"""Code written for CMU's needle runs unchanged: its test idioms, written as needle's own tests write them.

``gradient_check`` (hw1) and ``backward_check`` (hw4) are needle's helpers,
verbatim: they perturb an input in place through
``realize_cached_data().flat[j] += eps``, which needs ``flat`` to be a view
that writes through (an NDArray view, or numpy's own ``flat`` in numpy mode).
The float64 checks at 1e-6 exist only where the array API keeps float64
(``NEEDLE_BACKEND=np``); float32 cannot resolve a 1e-4 step to that accuracy.
"""
import numpy as np
import pytest

import needle_kernels as ndl
import needle_kernels.backend_ndarray as nd
from needle_kernels.apps.models import LanguageModel
from needle_kernels.backend_selection import BACKEND

# Tensor tests take the library's ``device`` fixture (conftest.py: every device of the array API);
# NDArray tests run on the NDArray devices whatever array API Tensors use
_ND_DEVICES = [
    pytest.param(nd.cpu(), id="cpu"),
    pytest.param(nd.cpu_numpy(), id="cpu_numpy"),
    pytest.param(nd.cuda(), id="cuda",
                 marks=[pytest.mark.gpu, pytest.mark.skipif(not nd.cuda().enabled(), reason="No GPU")]),
]


# ---------------------------------------------------------------- needle's helpers, verbatim

def gradient_check(f, *args, tol=1e-6, backward=False, **kwargs):
    eps = 1e-4
    numerical_grads = [np.zeros(a.shape) for a in args]
    for i in range(len(args)):
        for j in range(args[i].realize_cached_data().size):
            args[i].realize_cached_data().flat[j] += eps
            f1 = float(f(*args, **kwargs).numpy().sum())
            args[i].realize_cached_data().flat[j] -= 2 * eps
            f2 = float(f(*args, **kwargs).numpy().sum())
            args[i].realize_cached_data().flat[j] += eps
            numerical_grads[i].flat[j] = (f1 - f2) / (2 * eps)
    if not backward:
        out = f(*args, **kwargs)
        computed_grads = [
            x.numpy()
            for x in out.op.gradient_as_tuple(ndl.Tensor(np.ones(out.shape)), out)
        ]
    else:
        out = f(*args, **kwargs).sum()
        out.backward()
        computed_grads = [a.grad.numpy() for a in args]
    error = sum(
        np.linalg.norm(computed_grads[i] - numerical_grads[i]) for i in range(len(args))
    )
    assert error < tol
    return computed_grads


def backward_check(f, *args, **kwargs):
    eps = 1e-5
    out = f(*args, **kwargs)
    c = np.random.randn(*out.shape)
    numerical_grad = [np.zeros(a.shape) for a in args]
    num_args = len(args)
    for i in range(num_args):
        for j in range(args[i].realize_cached_data().size):
            args[i].realize_cached_data().flat[j] += eps
            f1 = (f(*args, **kwargs).numpy() * c).sum()
            args[i].realize_cached_data().flat[j] -= 2 * eps
            f2 = (f(*args, **kwargs).numpy() * c).sum()
            args[i].realize_cached_data().flat[j] += eps
            numerical_grad[i].flat[j] = (f1 - f2) / (2 * eps)
    backward_grad = out.op.gradient_as_tuple(ndl.Tensor(c, device=args[0].device), out)
    error = sum(
        np.linalg.norm(backward_grad[i].numpy() - numerical_grad[i])
        for i in range(len(args))
    )
    assert error < 4.2e-1
    return [g.numpy() for g in backward_grad]


# ---------------------------------------------------------------- hw4: backward_check over the ops

# needle's bound (0.42 on the summed error norms) with a 1e-5 step holds in float32 only while
# few outputs depend on each input: the shapes are small for that reason.
@pytest.mark.parametrize("a_shape, b_shape, stride, padding", [
    ((2, 4, 4, 1), (3, 3, 1, 2), 1, 1),
    ((1, 5, 5, 2), (3, 3, 2, 2), 2, 1),
    ((1, 4, 4, 3), (1, 1, 3, 2), 1, 0),
    ((1, 3, 3, 2), (2, 2, 2, 2), 1, 0),
])
def test_conv_backward_check(device, a_shape, b_shape, stride, padding):
    A = ndl.Tensor(np.random.randn(*a_shape), device=device)
    B = ndl.Tensor(np.random.randn(*b_shape), device=device)
    backward_check(ndl.conv, A, B, stride=stride, padding=padding)


@pytest.mark.parametrize("shape, d, axes", [((2, 3), 1, (0,)), ((2, 3, 3, 4), 2, (1, 2)), ((3, 3, 6, 4), 0, (0, 1))])
def test_dilate_backward_check(device, shape, d, axes):
    backward_check(ndl.dilate, ndl.Tensor(np.random.randn(*shape), device=device), dilation=d, axes=axes)


@pytest.mark.parametrize("shape, axes", [((2, 3, 3, 4), (0,)), ((2, 3, 3, 4), (1, 2)), ((3, 3, 6, 4), (0, 1, 2, 3))])
def test_flip_backward_check(device, shape, axes):
    backward_check(ndl.flip, ndl.Tensor(np.random.randn(*shape), device=device), axes=axes)


@pytest.mark.parametrize("shape, axes", [((5, 4), (1,)), ((5, 4), (0,)), ((2, 3, 4), (0, 2)), ((3, 4), None)])
def test_summation_backward_check(device, shape, axes):
    backward_check(ndl.summation, ndl.Tensor(np.random.randn(*shape), device=device), axes=axes)


def test_tanh_backward_check(device):
    backward_check(ndl.tanh, ndl.Tensor(np.random.randn(5, 4), device=device))


@pytest.mark.parametrize("shape, axis, n", [((5, 4), 0, 1), ((5, 4), 1, 2), ((3, 2, 4), 2, 3)])
def test_stack_gradient_check(device, shape, axis, n):
    # Stack's one input is the tuple of its arguments, so needle checks it through backward()
    args = [ndl.Tensor(np.random.randn(*shape), device=device) for _ in range(n)]
    tol = 1e-6 if args[0].dtype == np.float64 else 1e-1  # float32 sums resolve a 1e-4 step to ~1e-2
    gradient_check(lambda *xs: ndl.stack(list(xs), axis=axis), *args, tol=tol, backward=True)


# ---------------------------------------------------------------- hw3: NDArray idioms

class _ShapeAndSlices(nd.NDArray):
    def __getitem__(self, idxs):
        idxs = tuple([self.process_slice(s, i) if isinstance(s, slice) else slice(s, s + 1, 1)
                      for i, s in enumerate(idxs)])
        return self.shape, idxs


def ShapeAndSlices(*shape):
    return _ShapeAndSlices(np.ones(shape))


@pytest.mark.parametrize("params", [
    {"lhs": ShapeAndSlices(4, 5, 6)[1:2, 0, 0], "rhs": ShapeAndSlices(7, 7, 7)[1:2, 0, 0]},
    {"lhs": ShapeAndSlices(4, 5, 6)[1:4:2, 0, 0], "rhs": ShapeAndSlices(7, 7, 7)[1:3, 0, 0]},
    {"lhs": ShapeAndSlices(4, 5, 6)[1:3, 2:5, 2:6], "rhs": ShapeAndSlices(7, 7, 7)[:2, :3, :4]},
])
@pytest.mark.parametrize("device", _ND_DEVICES)
def test_setitem_ewise(params, device):
    lhs_shape, lhs_slices = params["lhs"]
    rhs_shape, rhs_slices = params["rhs"]
    _A = np.random.randn(*lhs_shape)
    _B = np.random.randn(*rhs_shape)
    A = nd.array(_A, device=device)
    B = nd.array(_B, device=device)
    start_ptr = A._handle.ptr()
    A[lhs_slices] = B[rhs_slices]
    _A[lhs_slices] = _B[rhs_slices]
    end_ptr = A._handle.ptr()
    assert start_ptr == end_ptr, "you should modify in-place"
    np.testing.assert_allclose(A.numpy(), _A, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("params", [
    {"lhs": ShapeAndSlices(4, 5, 6)[1:2, 0, 0]},
    {"lhs": ShapeAndSlices(4, 5, 6)[1:4:2, 0, 0]},
    {"lhs": ShapeAndSlices(4, 5, 6)[1:3, 2:5, 2:6]},
])
@pytest.mark.parametrize("device", _ND_DEVICES)
def test_setitem_scalar(params, device):
    shape, slices = params["lhs"]
    _A = np.random.randn(*shape)
    A = nd.array(_A, device=device)
    start_ptr = A._handle.ptr()
    _A[slices] = 4.0
    A[slices] = 4.0
    end_ptr = A._handle.ptr()
    assert start_ptr == end_ptr, "you should modify in-place"
    np.testing.assert_allclose(A.numpy(), _A, atol=1e-5, rtol=1e-5)


def compare_strides(a_np, a_nd):
    size = a_np.itemsize
    assert tuple([x // size for x in a_np.strides]) == a_nd.strides


@pytest.mark.parametrize("device", _ND_DEVICES)
def test_as_strided_and_make_views(device):
    _A = np.random.randn(6, 6).astype(np.float32)
    A = nd.array(_A, device=device)
    # 3x3 sliding windows of the rows, as im2col builds them
    lhs = A.as_strided((4, 4, 3, 3), (6, 1, 6, 1))
    rhs = np.lib.stride_tricks.as_strided(_A, (4, 4, 3, 3), tuple(s * 4 for s in (6, 1, 6, 1)))
    np.testing.assert_allclose(lhs.numpy(), rhs)
    compare_strides(rhs, lhs)
    assert lhs._handle.ptr() == A._handle.ptr()
    view = nd.NDArray.make((3, 2), strides=(12, 2), device=device, handle=A._handle, offset=7)
    np.testing.assert_allclose(view.numpy(), _A.reshape(-1)[7:].reshape(-1)[np.add.outer([0, 12, 24], [0, 2])])
    assert not view.is_compact()
    assert view.compact().strides == nd.NDArray.compact_strides((3, 2)) == (2, 1)
    view.compact()  # a copy: the buffer under A is untouched
    np.testing.assert_allclose(A.numpy(), _A)


@pytest.mark.parametrize("device", _ND_DEVICES)
def test_reduce_through_reduce_view_out(device):
    _A = np.random.randn(3, 4, 5).astype(np.float32)
    A = nd.array(_A, device=device)
    for axis in (0, 1, 2):
        view, out = A.reduce_view_out(axis)
        device.reduce_sum(view.compact()._handle, out._handle, view.shape[-1])
        np.testing.assert_allclose(out.numpy(), _A.sum(axis), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- hw4: backward() of non-scalar outputs

@pytest.mark.parametrize("num_layers", [1, 2])
def test_language_model_lstm_backward_of_its_output(device, num_layers):
    seq_length, batch_size, output_size = 5, 3, 11
    model = LanguageModel(6, output_size, 4, num_layers, seq_model="lstm", device=device)
    x = ndl.Tensor(np.random.randint(0, output_size, (seq_length, batch_size)).astype(np.float32), device=device)
    output, (h, c) = model(x)
    assert output.shape == (seq_length * batch_size, output_size)
    assert h.shape == c.shape == (num_layers, batch_size, 4)
    output.backward()  # needle's test: an all-ones adjoint of the (T*B, V) logits
    grads = [p.grad.numpy() for p in model.parameters()]
    assert all(g is not None for g in grads)
    for p in model.parameters():
        p.grad = None
    model(x)[0].sum().backward()
    for g, p in zip(grads, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)
    # a state is non-scalar too
    for p in model.parameters():
        p.grad = None
    model(x)[1][0].backward()
    assert model.parameters()[0].grad is not None


def test_lstm_backward_of_output_and_state(device):
    lstm = ndl.nn.LSTM(3, 4, num_layers=2, device=device)
    x = ndl.Tensor(np.random.randn(5, 2, 3), device=device)
    output, (h, c) = lstm(x)
    (output.sum() + h.sum() + c.sum()).backward()
    expected = [p.grad.numpy() for p in lstm.parameters()]
    for p in lstm.parameters():
        p.grad = None
    output, (h, c) = lstm(x)
    # one backward pass from a (3,) output: its all-ones adjoint sums the three
    ndl.stack([output.sum(), h.sum(), c.sum()], 0).backward()
    for g, p in zip(expected, lstm.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- hw1: scalar ops with numpy scalars

def test_divide_scalar_with_a_numpy_scalar(device):
    _A = np.random.randn(5, 4).astype(np.float32)
    for scalar in (np.random.randn(1), np.float32(1.7), np.float64(-0.6), np.array(2.5)):
        A = ndl.Tensor(_A, device=device)
        out = ndl.divide_scalar(A, scalar=scalar)
        s = float(np.asarray(scalar).reshape(()))
        np.testing.assert_allclose(out.numpy(), _A / s, rtol=1e-5, atol=1e-6)
        out.backward()
        np.testing.assert_allclose(A.grad.numpy(), np.full((5, 4), 1 / s), rtol=1e-5)
        np.testing.assert_allclose((A / scalar).numpy(), _A / s, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- hw1: float64 gradient checks at 1e-6

# Only the numpy array API keeps float64, so only numpy mode defines these tests (no skips elsewhere).
if BACKEND == "np":
    @pytest.mark.parametrize("op, shapes, kwargs", [
        # ((shape), shift): needle's tests keep a divisor or a log's argument away from 0
        pytest.param(ndl.divide, [(5, 4), ((5, 4), 5.0)], {}, id="divide"),
        pytest.param(ndl.divide_scalar, [(5, 4)], {"scalar": np.random.randn(1)}, id="divide_scalar"),
        pytest.param(ndl.divide_scalar, [(5, 4)], {"scalar": np.float64(1.3)}, id="divide_numpy_scalar"),
        pytest.param(ndl.mul_scalar, [(5, 4)], {"scalar": np.random.randn(1)}, id="mul_scalar"),
        pytest.param(ndl.power_scalar, [(5, 4)], {"scalar": np.random.randint(1)}, id="power_scalar_0"),
        pytest.param(ndl.power_scalar, [(5, 4)], {"scalar": np.int64(3)}, id="power_scalar_3"),
        pytest.param(ndl.matmul, [(5, 4), (4, 5)], {}, id="matmul"),
        pytest.param(ndl.matmul, [(6, 5, 4), (4, 3)], {}, id="matmul_batched"),
        pytest.param(ndl.summation, [(5, 4)], {"axes": (1,)}, id="summation"),
        pytest.param(ndl.summation, [(5, 4, 1)], {"axes": (0, 1)}, id="summation_axes"),
        pytest.param(ndl.broadcast_to, [(3, 1)], {"shape": (3, 3)}, id="broadcast_to"),
        pytest.param(ndl.reshape, [(5, 4)], {"shape": (4, 5)}, id="reshape"),
        pytest.param(ndl.negate, [(5, 4)], {}, id="negate"),
        pytest.param(ndl.transpose, [(3, 5, 4)], {"axes": (1, 2)}, id="transpose"),
        pytest.param(ndl.exp, [(5, 4)], {}, id="exp"),
        pytest.param(ndl.log, [((5, 4), 5.0)], {}, id="log"),
        pytest.param(ndl.tanh, [(5, 4)], {}, id="tanh"),
        pytest.param(ndl.logsumexp, [(3, 4, 5)], {"axes": (1, 2)}, id="logsumexp"),
        pytest.param(ndl.logsumexp, [(3, 4, 5)], {"axes": None}, id="logsumexp_all"),
        pytest.param(ndl.flip, [(2, 3, 4)], {"axes": (0, 2)}, id="flip"),
        pytest.param(ndl.dilate, [(2, 3)], {"dilation": 1, "axes": (1,)}, id="dilate"),
        pytest.param(ndl.conv, [(1, 5, 5, 2), (3, 3, 2, 2)], {"padding": 1}, id="conv"),
    ])
    def test_float64_gradient_check_at_1e6(op, shapes, kwargs):
        def make():
            specs = [s if isinstance(s[0], tuple) else (s, 0.0) for s in shapes]
            return [ndl.Tensor(shift + np.random.randn(*shape)) for shape, shift in specs]

        args = make()
        assert all(a.dtype == np.float64 for a in args)
        gradient_check(op, *args, **kwargs)
        gradient_check(op, *make(), backward=True, **kwargs)
