"""What the test cells of assignments check with, imported afresh by every test cell.

A test cell starts with ``from coursekit.checks import *``: its ``np``, ``ndl``, ``Tensor``,
``grading`` and checking functions are then the course's, whatever the notebook defined
under those names before. Messages name the case that failed (op, shapes, axes), so a
student sees where they stand even when the inputs are hidden.
"""
import numpy as np

import needle_kernels as ndl
from needle_kernels import gradcheck
from needle_kernels.autograd import Tensor

from . import record
from .withhold import grading, reference

__all__ = ["np", "ndl", "Tensor", "grading", "reference", "case", "close", "numerical_gradients",
           "check_op", "is_topological"]


class case:
    """One of a test cell's independent cases: the cell earns its points per case that passes.

    In JupyterLab and ``grader validate`` the first failing case raises, as any check does. In a
    graded run a failing case is reported and the cell goes on to the next one, and the grader
    scores the cell by the share of the instructor's cases that pass (each with every check the
    instructor's run made in it), naming the failing cases in the feedback.
    """

    def __init__(self, label):
        self.label = label

    def __enter__(self):
        record.begin_case(self.label)
        return self

    def __exit__(self, kind, error, traceback):
        record.begin_case(None)
        if error is None or not isinstance(error, Exception) or not record.recording():
            return False
        record.failure(self.label, error)
        return True     # the case failed; the grader decides the cell


def close(actual, expected, tol=1e-5, what="result", derived=False):
    """``actual`` (a Tensor or an array) equals ``expected`` within ``tol``, with a readable failure.

    ``derived``: ``expected`` is made in this run from objects the submission's code takes part
    in (a model built of the library's modules beside the student's, a first call's result), so
    it differs from the instructor's run by more than rounding; the grader then compares the two
    values this run reports. Every other check is judged against the instructor's run.
    """
    actual = actual.numpy() if isinstance(actual, Tensor) else np.asarray(actual)
    expected = expected.numpy() if isinstance(expected, Tensor) else np.asarray(expected)
    record.check(what, actual, expected, tol, derived)    # the grader decides from this, outside the process
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape}, expected {expected.shape}")
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, err_msg=what)


def numerical_gradients(op, arrays, out_grad, eps=1e-6):
    """d/d(input) of sum(out_grad * op.compute(*inputs)), by central differences in float64."""
    return gradcheck.numerical_gradients(lambda *xs: np.sum(out_grad * op.compute(*xs)), arrays, eps)


def check_op(op, arrays, expected=None, tol=1e-4, seed=0):
    """``op.compute`` against ``expected`` and ``op.gradient`` against finite differences.

    The gradient is taken of sum(out_grad * op(inputs)) for a random ``out_grad``, so every
    entry of every adjoint is checked, not only their sum.
    """
    name = type(op).__name__
    arrays = [np.asarray(a, dtype=np.float32) for a in arrays]
    case = f"{name} on inputs of shapes {[a.shape for a in arrays]}"
    out = op(*[Tensor(a) for a in arrays])
    if expected is not None:
        close(out, np.asarray(expected, dtype=np.float32), tol=1e-5, what=f"{case}: compute")
    out_grad = np.random.default_rng(seed).standard_normal(out.shape).astype(np.float32)
    grads = op.gradient_as_tuple(Tensor(out_grad, requires_grad=False), out)
    if len(grads) != len(arrays):
        raise AssertionError(f"{case}: gradient returned {len(grads)} adjoints for {len(arrays)} inputs")
    for i, (g, num, a) in enumerate(zip(grads, numerical_gradients(op, arrays, out_grad), arrays)):
        if not isinstance(g, Tensor):
            raise AssertionError(f"{case}: gradient must return Tensors, got {type(g).__name__}")
        if g.shape != a.shape:
            raise AssertionError(f"{case}: adjoint {i} has shape {g.shape}, the input has {a.shape}")
        close(g, num, tol=tol, what=f"{case}: adjoint {i}")
    return out


def is_topological(order, roots):
    """``order`` holds every node reachable from ``roots`` once, each after its inputs."""
    pos = {n: i for i, n in enumerate(order)}
    if len(pos) != len(order):
        raise AssertionError("a node appears twice in the order")
    stack, reach = list(roots), set()
    while stack:
        n = stack.pop()
        if n not in reach:
            reach.add(n)
            stack.extend(n.inputs)
    if set(order) != reach:
        raise AssertionError(f"the order has {len(order)} nodes; {len(reach)} are reachable from the roots")
    for n in order:
        for i in n.inputs:
            if pos[i] >= pos[n]:
                raise AssertionError("an input comes after the node that uses it")
