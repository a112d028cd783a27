"""The autograd engine: graph, topological order, reverse mode, grad of grad, bookkeeping."""
import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels import autograd
from needle_kernels.backend_selection import BACKEND


def T(x, device, requires_grad=True):
    return ndl.Tensor(np.asarray(x, dtype=np.float32), device=device, requires_grad=requires_grad)


def test_topological_order_inputs_first(device):
    a, b = T([1.0], device), T([2.0], device)
    c = a + b
    d = c * a
    e = d + c
    order = autograd.find_topo_sort([e])
    assert order == [a, b, c, d, e]


def test_topological_sort_handles_deep_graphs(device):
    x = T([1.0], device)
    y = x
    for _ in range(3000):  # deeper than Python's recursion limit
        y = y + 1.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])


def test_value_used_twice_accumulates(device):
    x = T([1.0, 2.0, 3.0], device)
    y = (x * x + x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1, 2, 3]) + 1)


@pytest.mark.parametrize("create_graph", [True, False])
def test_values_used_once_twice_and_many_times_sum_their_partials(device, create_graph):
    # the backward pass keeps a node's one partial adjoint as is and starts a list at the second:
    # each count of uses, against the derivative by hand
    a0, b0, c0 = np.array([0.5, -1.0]), np.array([2.0, 3.0]), np.array([1.5, -0.5])
    a, b, c = T(a0, device), T(b0, device), T(c0, device)
    out = a * 3.0 + b * b
    for _ in range(5):
        out = out + c * b
    out.sum().backward(create_graph=create_graph)
    np.testing.assert_allclose(a.grad.numpy(), np.full(2, 3.0), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), 2 * b0 + 5 * c0, rtol=1e-6)
    np.testing.assert_allclose(c.grad.numpy(), 5 * b0, rtol=1e-6)
    assert type(out.inputs) is tuple and out.inputs[0].op is not None


def test_grad_of_grad(device):
    x = T([0.5, -1.0, 2.0], device)
    (x ** 3).sum().backward()
    first = x.grad
    np.testing.assert_allclose(first.numpy(), 3 * x.numpy() ** 2, rtol=1e-6)
    first.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy(), rtol=1e-6)


def test_grad_of_grad_through_nonlinear_ops(device):
    x = T([0.3, -0.7], device)
    (ndl.tanh(x) * ndl.exp(x)).sum().backward()
    g = x.grad
    g.sum().backward()
    xv = x.numpy().astype(np.float64)
    t, e = np.tanh(xv), np.exp(xv)
    # d/dx (tanh' e + tanh e) with tanh' = 1 - t^2, tanh'' = -2 t (1 - t^2)
    expected = (-2 * t * (1 - t ** 2)) * e + 2 * (1 - t ** 2) * e + t * e
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5)


def test_gradients_are_tensors_with_a_graph(device):
    x = T([1.0, 2.0], device)
    (x * x).sum().backward()
    assert isinstance(x.grad, ndl.Tensor)
    assert x.grad.requires_grad and not x.grad.is_leaf()


def test_no_graph_without_requires_grad(device):
    x = T([1.0, 2.0], device, requires_grad=False)
    y = ndl.exp(x) * 2.0
    assert not y.requires_grad and y.is_leaf() and y.inputs == ()
    w = T([1.0, 1.0], device)
    z = (y * w).sum()
    z.backward()
    assert x.grad is None and w.grad is not None


def test_backward_of_non_scalar_uses_an_all_ones_adjoint(device):
    # needle's convention: y.backward() is y.backward(ones_like(y)), the gradient of y.sum()
    x = T([[1.0, 2.0], [3.0, 4.0]], device)
    y = x * x
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())
    x.grad = None
    y.backward(T(np.full((2, 2), 3.0), device, requires_grad=False))
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy())
    with pytest.raises(ValueError, match=r"\(3,\)"):
        y.backward(T(np.ones(3), device, requires_grad=False))


def test_backward_without_out_grad_matches_backward_of_the_sum(device):
    x = T(np.random.randn(3, 4, 5), device)
    w = T(np.random.randn(5, 2), device)
    ndl.tanh(x @ w).backward()
    gx, gw = x.grad.numpy(), w.grad.numpy()
    x.grad = w.grad = None
    ndl.tanh(x @ w).sum().backward()
    np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-6)


def test_backward_of_one_element_tensor(device):
    x = T([[3.0]], device)
    (x * x).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[6.0]])


def test_tensor_counter_counts_live_tensors(device):
    before = autograd.TENSOR_COUNTER
    a = T([1.0], device)
    b = a + 1.0
    assert autograd.TENSOR_COUNTER == before + 2
    del a, b
    assert autograd.TENSOR_COUNTER == before


def test_detach_and_data(device):
    x = T([1.0, 2.0], device)
    d = x.detach()
    assert d.is_leaf() and not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), x.numpy())
    y = x * 3.0
    assert y.data.is_leaf() and not y.data.requires_grad
    x.data = T([5.0, 6.0], device, requires_grad=False)
    np.testing.assert_array_equal(x.numpy(), [5.0, 6.0])
    assert x.requires_grad
    with pytest.raises(TypeError):
        x.data = np.zeros(2)


def test_tensor_basics(device):
    x = T(np.arange(6).reshape(2, 3), device)
    assert x.shape == (2, 3) and x.dtype == "float32" and x.device == device
    assert isinstance(x.numpy(), np.ndarray) and x.numpy().dtype == np.float32
    y = ndl.Tensor(x)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert "needle.Tensor(" in repr(x)
    assert x.sum().shape == ()
    assert x.reshape((3, 2)).shape == (3, 2) and x.transpose().shape == (3, 2)
    assert x.broadcast_to((4, 2, 3)).shape == (4, 2, 3)
    if BACKEND == "np":  # numpy mode keeps the dtype asked for, as needle's numpy backend does
        assert ndl.Tensor([1.0], device=device, dtype="float64").dtype == np.float64
    else:  # NDArrays are float32: asking for another dtype is an error, not a silent cast
        with pytest.raises(ValueError, match="float32"):
            ndl.Tensor([1.0], device=device, dtype="float64")


def test_tuple_values(device):
    a, b = T([1.0], device), T([2.0, 3.0], device)
    t = ndl.make_tuple(a, b)
    assert isinstance(t, ndl.TensorTuple) and len(t) == 2
    assert t[1].shape == (2,)
    s = t + t
    np.testing.assert_allclose(s[1].numpy(), [4.0, 6.0])
    (s[0].sum() + s[1].sum()).backward()
    np.testing.assert_allclose(b.grad.numpy(), [2.0, 2.0])


def test_lazy_mode(device, monkeypatch):
    monkeypatch.setattr(autograd, "LAZY_MODE", True)
    x = T([1.0, 2.0], device)
    y = x * 2.0
    assert y.cached_data is None
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0])


def test_make_from_op_makes_the_node_calling_the_op_makes(device):
    a, b = T([1.0, 2.0], device), T([3.0, 4.0], device)
    node = ndl.Tensor.make_from_op(ndl.ops.EWiseAdd(), [a, b])
    assert type(node.op) is ndl.ops.EWiseAdd and node.inputs == (a, b)
    np.testing.assert_allclose(node.numpy(), [4.0, 6.0])
    node.backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 1.0])
    with pytest.raises(TypeError, match="TensorTuple.make_from_op: a EWiseAdd makes a Tensor"):
        ndl.TensorTuple.make_from_op(ndl.ops.EWiseAdd(), [a, b])


class _SendsToBoth(autograd.TensorOp):
    """out = a + b, whose gradient also makes a partial for b, whether b needs it or not."""

    def __init__(self, made):
        self.made = made

    def compute(self, a, b):
        return a + b

    def gradient(self, out_grad, node):
        to_b = out_grad * 2.0
        self.made.append(weakref.ref(to_b))
        return out_grad, to_b


class _Looks(autograd.TensorOp):
    """out = a, whose gradient first runs ``look``."""

    def __init__(self, look):
        self.look = look

    def compute(self, a):
        return a

    def gradient(self, out_grad, node):
        self.look()
        return out_grad


def test_a_partial_for_an_input_that_needs_no_gradient_goes_before_the_next_node(device):
    made, alive = [], []
    x, c = T([1.0, 2.0], device), T([3.0, 4.0], device, requires_grad=False)
    y = _SendsToBoth(made)(_Looks(lambda: alive.append(made[0]() is not None))(x), c)
    y.backward(create_graph=False)
    assert alive == [False]
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])


def _run(code, backend):
    env = dict(os.environ, NEEDLE_BACKEND=backend)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_unknown_backend_is_a_clear_error():
    result = _run("import needle_kernels", "torch")
    assert result.returncode != 0 and "NEEDLE_BACKEND='torch'" in result.stderr


def test_numpy_mode_runs_a_training_step():
    code = (
        "import numpy as np, needle_kernels as ndl\n"
        "assert ndl.backend_selection.BACKEND == 'np'\n"
        "m = ndl.nn.Linear(3, 2); x = ndl.Tensor(np.ones((4, 3), dtype=np.float32))\n"
        "assert isinstance(x.cached_data, np.ndarray) and x.cached_data.dtype == np.float32\n"
        "assert ndl.Tensor(np.ones(2)).dtype == np.float64 and ndl.Tensor([1, 2]).dtype == np.float32\n"
        "loss = ndl.nn.SoftmaxLoss()(m(x), ndl.Tensor([0, 1, 0, 1])); loss.backward()\n"
        "ndl.optim.SGD(m.parameters(), lr=0.1).step(); print(str(ndl.cpu()), ndl.cuda().enabled())\n"
    )
    result = _run(code, "np")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu()", "False"]


def test_graph_pictures(device):
    x = T(np.ones((2, 3)), device)
    w = T(np.ones((3, 4)), device)
    y = ndl.relu(x @ w).sum()
    text = ndl.viz.graph_text(y)
    assert text.splitlines() == [
        "%0 = leaf  shape (2, 3), requires_grad",
        "%1 = leaf  shape (3, 4), requires_grad",
        "%2 = MatMul(%0, %1)  shape (2, 4)",
        "%3 = ReLU(%2)  shape (2, 4)",
        "%4 = Summation(%3)  shape ()",
    ]
    dot = ndl.viz.graph_dot(y)
    assert dot.startswith("digraph") and dot.count("->") == 4
    fig = ndl.viz.draw_graph(y, backend="matplotlib")
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_text()]  # arrows are empty annotations
    assert len(labels) == 5 and labels[2].startswith("%2 MatMul")
    with pytest.raises(ValueError):
        ndl.viz.draw_graph(y, backend="ascii")


@pytest.mark.parametrize("scalar", [2, 2.5, np.float32(2.5), np.float64(-1.5), np.int64(3), np.array(0.5),
                                    np.array([1.25])], ids=lambda s: type(s).__name__ + str(np.shape(s)))
def test_scalar_ops_take_numbers_numpy_scalars_and_one_element_arrays(device, scalar):
    x_np = np.random.rand(2, 3).astype(np.float32) + 0.5
    c = float(np.asarray(scalar).reshape(()))
    cases = [
        (ndl.divide_scalar, lambda x: x / c, lambda x: np.full_like(x, 1 / c)),
        (ndl.mul_scalar, lambda x: x * c, lambda x: np.full_like(x, c)),
        (ndl.add_scalar, lambda x: x + c, lambda x: np.ones_like(x)),
        (ndl.power_scalar, lambda x: x ** c, lambda x: c * x ** (c - 1)),
    ]
    for op, value, derivative in cases:
        x = T(x_np, device)
        y = op(x, scalar)
        np.testing.assert_allclose(y.numpy(), value(x_np), rtol=1e-5, err_msg=op.__name__)
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), derivative(x_np), rtol=1e-5, err_msg=op.__name__)
    # the operators reach the same ops
    x = T(x_np, device)
    np.testing.assert_allclose((x / scalar).numpy(), x_np / c, rtol=1e-6)
    np.testing.assert_allclose((x - scalar).numpy(), x_np - c, rtol=1e-6)


def test_scalar_ops_refuse_arrays_of_several_elements(device):
    with pytest.raises(TypeError, match="one-element"):
        ndl.divide_scalar(T([1.0, 2.0], device), np.array([1.0, 2.0]))


if BACKEND == "np":
    def test_numpy_mode_keeps_float64_through_ops_and_gradients():
        x = ndl.Tensor(np.random.randn(3, 4))
        w = ndl.Tensor(np.random.randn(4, 2))
        assert x.dtype == np.float64 and x.realize_cached_data().dtype == np.float64
        y = ndl.logsumexp(ndl.tanh(x @ w) / 3.0, axes=(1,)) ** 2
        assert y.dtype == np.float64
        y.backward()
        assert x.grad.dtype == np.float64 and w.grad.dtype == np.float64
        f32 = ndl.Tensor(np.ones((2, 2), dtype=np.float32))
        assert (ndl.relu(f32) * 2.0).dtype == np.float32
else:
    def test_ndarray_mode_converts_float64_input_to_float32(device):
        x = ndl.Tensor(np.random.randn(3, 4), device=device)
        assert x.dtype == "float32" and x.numpy().dtype == np.float32
        x = ndl.Tensor(x, device=device, dtype="float32")
        assert x.dtype == "float32"


def _textbook_gradients(output, out_grad):
    # needle's hw1 reference algorithm, with no special case for tuples: partial adjoints
    # (TensorTuples included) are summed with + and sent on through op.gradient_as_tuple
    grads = {output: [out_grad]}
    for node in reversed(autograd.find_topo_sort([output])):
        adjoint = autograd.sum_node_list(grads[node])
        node.grad = adjoint
        if node.op is None:
            continue
        for inp, partial in zip(node.inputs, node.op.gradient_as_tuple(adjoint, node)):
            grads.setdefault(inp, []).append(partial)


def test_tuple_adjoints_sum_slot_by_slot_like_the_textbook_engine(device):
    x_np = np.random.randn(4, 3, 2).astype(np.float32)

    def graph():
        x = T(x_np, device)
        parts = ndl.split(x, 0)
        out = parts[0] * parts[3] + ndl.tanh(parts[1]) + parts[0]  # parts[2] unread, parts[0] read twice
        return x, out

    x, out = graph()
    out.backward()
    x2, out2 = graph()
    _textbook_gradients(out2, ndl.Tensor(np.ones(out2.shape), device=device, requires_grad=False))
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-6)
    expected = np.zeros_like(x_np)
    expected[0] = x_np[3] + 1
    expected[1] = 1 - np.tanh(x_np[1]) ** 2
    expected[3] = x_np[0]
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5)


def test_tuple_get_item_gradient_is_a_tuple_with_zeros_elsewhere(device):
    t = ndl.make_tuple(T(np.ones((2, 3)), device), T(np.ones(4), device))
    item = ndl.ops.TupleGetItem(1)(t, fold_const=False)
    g = T(np.full(4, 2.0), device, requires_grad=False)
    (adjoint,) = item.op.gradient_as_tuple(g, item)
    assert isinstance(adjoint, ndl.TensorTuple) and len(adjoint) == 2
    np.testing.assert_array_equal(adjoint[0].numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(adjoint[1].numpy(), np.full(4, 2.0))
    summed = adjoint + adjoint
    np.testing.assert_array_equal(summed[1].numpy(), np.full(4, 4.0))
    assert [a.shape for a in adjoint.realize_cached_data()] == [(2, 3), (4,)]


def test_any_tuple_valued_partial_adjoint_reaches_each_slot(device):
    # the general rule: stack sends its tuple input split(g), a TensorTuple of another op
    a, b = T(np.random.randn(3), device), T(np.random.randn(3), device)
    pair = ndl.make_tuple(a, b)
    out = ndl.stack(pair, 0) * T(np.arange(6.0).reshape(2, 3), device, requires_grad=False)
    out.backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0, 1, 2])
    np.testing.assert_array_equal(b.grad.numpy(), [3, 4, 5])


def _mlp_grads(device, create_graph):
    np.random.seed(11)
    model = ndl.nn.Sequential(*[ndl.nn.Sequential(ndl.nn.Linear(32, 32, device=device), ndl.nn.Tanh())
                                for _ in range(6)])
    x = ndl.Tensor(np.random.randn(64, 32).astype(np.float32), device=device)
    loss = (model(x) * model(x)).sum()
    loss.backward(create_graph=create_graph)
    return x, [p.grad for p in model.parameters()]


def test_backward_without_create_graph_gives_the_same_gradients_as_constants(device):
    x0, want = _mlp_grads(device, True)
    x1, got = _mlp_grads(device, False)
    for g, w in zip([x1.grad] + got, [x0.grad] + want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
        assert g.op is None and not g.requires_grad  # nothing recorded: not differentiable again
    assert any(w.op is not None for w in want)  # the default records the gradients' graph
    assert ndl.autograd.RECORDING  # switched back on after the pass


if BACKEND != "np":  # the allocator's byte counters belong to the NDArray backends
    def test_backward_without_create_graph_frees_adjoints_as_it_goes():
        device = ndl.cpu()
        peaks = {}
        for create_graph in (True, False):
            gc.collect()
            gc.disable()  # reference counting alone must free them
            try:
                device.reset_peak_memory()
                base = device.memory_stats()["live_bytes"]
                x, grads = _mlp_grads(device, create_graph)
                peaks[create_graph] = device.memory_stats()["peak_bytes"] - base
                del x, grads
            finally:
                gc.enable()
        assert peaks[False] < 0.75 * peaks[True], peaks
