"""Activation checkpointing: keep a segment's inputs, recompute its insides when differentiating.

A network of N layers normally keeps every layer's output alive until the backward pass
uses it: O(N) activations. Cut it into segments and checkpoint each one: the forward pass
runs a segment without recording its graph, so only the segment's output stays (its
inside activations are freed at once), and the backward pass runs the segment again, this
time recording, just before its gradient is needed. With N/K segments of K layers the
peak is about N/K kept outputs plus the K activations of the one segment being redone,
O(N/K + K), smallest (O(sqrt N)) at K = sqrt N, for one extra forward pass.

    y = ndl.checkpoint(block, x)                 # block: a Module (its parameters get gradients)
    y = ndl.checkpoint(fn, x, params=[w, b])     # any function of Tensors, with the Tensors it closes over
    model = nn.Sequential(*[nn.Checkpoint(b) for b in blocks])

Gradients equal those of the plain forward (the segment runs the same ops on the same
values twice). A segment must be deterministic: Dropout inside one would draw a new mask
when recomputed.
"""
from contextlib import contextmanager

from .autograd import Tensor, TensorOp, compute_gradient_of_variables, recording


@contextmanager
def _not_recording(params):
    """Parameters stop asking for gradients, so the ops that use them keep no graph."""
    saved = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad = False
    try:
        yield
    finally:
        for p, flag in zip(params, saved):
            p.requires_grad = flag


class Checkpoint(TensorOp):
    """out = fn(*inputs), recomputed in ``gradient``; the adjoints of the inputs and of
    ``params`` come from differentiating the recomputed segment."""

    def __init__(self, fn, n_inputs, params):
        self.fn, self.n_inputs, self.params = fn, n_inputs, list(params)

    def compute(self, *arrays):
        inputs = [Tensor.make_const(a) for a in arrays[:self.n_inputs]]
        with _not_recording(self.params):
            out = self.fn(*inputs)
        if not isinstance(out, Tensor):
            raise TypeError(f"checkpoint: the segment must return one Tensor, got {type(out).__name__}")
        return out.realize_cached_data()

    def gradient(self, out_grad, node):
        inputs = [Tensor.make_const(x.realize_cached_data(), requires_grad=x.requires_grad)
                  for x in node.inputs[:self.n_inputs]]
        saved = [p.grad for p in self.params]
        try:
            with recording(True):  # the segment's graph, even in a backward pass that records nothing
                out = self.fn(*inputs)
            compute_gradient_of_variables(out, Tensor.make_const(out_grad.realize_cached_data()))
            leaves = inputs + self.params
            grads = tuple(_zeros_like(x) if x.grad is None else x.grad.detach() for x in leaves)
        finally:
            for p, g in zip(self.params, saved):
                p.grad = g
            # An input's .grad is built from the recomputed nodes, which lead back to the
            # input: a reference cycle that would keep the whole recomputed segment alive
            # until the cyclic garbage collector happened to run.
            for x in inputs:
                x.grad = None
        return grads


def _zeros_like(t):
    from . import init

    return init.zeros(*t.shape, device=t.device, dtype=t.dtype)


def checkpoint(fn, *inputs, params=None):
    """``fn(*inputs)`` that keeps only ``inputs`` now and recomputes the rest in backward.

    ``params``: the Tensors ``fn`` uses besides its inputs that need gradients; by default
    ``fn.parameters()`` when ``fn`` is a Module, else none.
    """
    if params is None:
        params = fn.parameters() if hasattr(fn, "parameters") else []
    params = [p for p in params if isinstance(p, Tensor)]
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise TypeError(f"checkpoint: input {i} must be a Tensor, got {type(x).__name__}")
    return Checkpoint(fn, len(inputs), params)(*inputs, *params)
