"""The element-wise part of an LSTM step as one fused op each way.

Written with generic ops, a step after its matmuls is a split into four gates,
three sigmoids, two tanhs, three products and a sum (and about twice as many
ops in the backward pass), each a Python-level op and a pass over memory; a
two-layer model over 40 steps makes thousands of them per batch. Here the step
is one op, ``lstm_cell(z, c0) -> (h, c)``, with one kernel forward and one
backward. ``nn.LSTMCell(..., fused=False)`` keeps the generic version as the
readable reference the tests compare this one with.
"""
from ..autograd import TensorTupleOp
from ..backend_selection import array_api


class LSTMCellGates(TensorTupleOp):
    """(h, c) = one LSTM step from gate pre-activations z (B, 4H), laid out [i | f | g | o], and c0 (B, H):

        c = sigmoid(f) * c0 + sigmoid(i) * tanh(g),   h = sigmoid(o) * tanh(c)

    The gradient is one kernel (LSTMCellGatesGrad) that recomputes the gates from z.
    """

    def compute(self, z, c0):
        return tuple(array_api.lstm_cell(z, c0))

    def gradient(self, out_grad, node):
        z, c0 = node.inputs
        grads = LSTMCellGatesGrad()(z, c0, out_grad[0], out_grad[1])
        return grads[0], grads[1]


class LSTMCellGatesGrad(TensorTupleOp):
    """(dz, dc0) of LSTMCellGates for inputs (z, c0, dh, dc), in one fused kernel."""

    def compute(self, z, c0, dh, dc):
        return tuple(array_api.lstm_cell_backward(z, c0, dh, dc))

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "the fused LSTM cell is differentiable once; for higher derivatives build the cell "
            "with fused=False (the same step in generic ops)")


def lstm_cell(z, c0):
    """(h, c) of one LSTM step, a TensorTuple: see LSTMCellGates."""
    return LSTMCellGates()(z, c0)
