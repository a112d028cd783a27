"""Helpers that make an op test one line: forward against numpy, gradients
against central differences, second derivatives likewise.

    check_op(ndl.exp, np.exp, rand(3, 4), device=device)
    check_gradients(lambda a, b: ndl.conv(a, b, padding=1), x, w, device=device)
"""
import numpy as np

import needle_kernels as ndl
from needle_kernels.gradcheck import numerical_gradients


def rand(*shape, low=-1.0, high=1.0):
    """float32 uniform test data (from numpy's global RNG, seeded per test)."""
    return np.random.uniform(low, high, size=shape).astype(np.float32)


def _tensors(arrays, device):
    return [ndl.Tensor(a, device=device, requires_grad=True) for a in arrays]


def _value(fn, arrays, device, weights):
    """sum(fn(*arrays) * weights), with fn run on float32 Tensors as the test runs it."""
    out = fn(*_tensors([a.astype(np.float32) for a in arrays], device))
    return float((out.numpy().astype(np.float64) * weights).sum())


def check_gradients(fn, *arrays, device, eps=1e-2, rtol=2e-2, atol=2e-2, wrt=None):
    """Compare backward() of ``sum(fn(*inputs) * w)`` (w random) with central differences, for
    both kinds of backward pass: recorded (create_graph=True, needle's default) and not
    (create_graph=False, where ops may compute their gradients as plain arrays).

    ``wrt`` lists the indices of the inputs to check (default: all). Returns the output.
    """
    arrays = [np.asarray(a, dtype=np.float32) for a in arrays]
    weights = numeric = None
    for create_graph in (True, False):
        tensors = _tensors(arrays, device)
        out = fn(*tensors)
        if weights is None:
            weights = np.random.randn(*out.shape)
        for t in tensors:  # fn may itself have run a backward pass (second-order checks)
            t.grad = None
        (out * ndl.Tensor(weights, device=device, requires_grad=False)).sum().backward(create_graph=create_graph)
        if numeric is None:
            numeric = numerical_gradients(lambda *xs: _value(fn, xs, device, weights), arrays, eps)
        for i in (range(len(arrays)) if wrt is None else wrt):
            assert tensors[i].grad is not None, f"input {i} got no gradient (create_graph={create_graph})"
            assert tensors[i].grad.shape == arrays[i].shape, (tensors[i].grad.shape, arrays[i].shape)
            scale = max(1.0, np.abs(numeric[i]).max())
            np.testing.assert_allclose(tensors[i].grad.numpy(), numeric[i], rtol=rtol, atol=atol * scale,
                                       err_msg=f"gradient of input {i}, create_graph={create_graph}")
    return out


def check_op(fn, reference, *arrays, device, rtol=1e-5, atol=1e-5, grad=True, **grad_kw):
    """Forward equal to the numpy ``reference`` (computed in float64), then gradients."""
    arrays = [np.asarray(a, dtype=np.float32) for a in arrays]
    out = fn(*[ndl.Tensor(a, device=device) for a in arrays])
    expected = reference(*[a.astype(np.float64) for a in arrays])
    assert out.shape == np.shape(expected), (out.shape, np.shape(expected))
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol)
    if grad:
        check_gradients(fn, *arrays, device=device, **grad_kw)


def check_second_order(fn, *arrays, device, of=0, **kw):
    """Differentiate a gradient: check d/dx_j sum(grad_{x_of}(sum(fn(x) * w1)) * w2) numerically."""
    w1 = None

    def gradient_of(*tensors):
        nonlocal w1
        out = fn(*tensors)
        if w1 is None:
            w1 = np.random.randn(*out.shape)
        (out * ndl.Tensor(w1, device=device, requires_grad=False)).sum().backward()
        return tensors[of].grad

    return check_gradients(gradient_of, *arrays, device=device, **kw)
