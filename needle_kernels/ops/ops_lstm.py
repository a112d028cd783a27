"""The element-wise part of an LSTM step as one fused op each way.

Written with generic ops, a step after its matmuls is a split into four gates,
three sigmoids, two tanhs, three products and a sum (and about twice as many
ops in the backward pass), each a Python-level op and a pass over memory; a
two-layer model over 40 steps makes thousands of them per batch. Here the step
is one op, ``lstm_cell(z, c0) -> (h, c)``, with one kernel forward and one
backward. ``nn.LSTMCell(..., fused=False)`` keeps the generic version as the
readable reference the tests compare this one with.

``lstm_layer`` goes further for ``nn.LSTM``: a layer's whole recurrence over T steps
is one op, whose backward pass runs back through time on arrays and forms the
recurrent weight's gradient as one product over all steps (depth T*B) instead of
T products of depth B that the graph would sum.
"""
from ..autograd import SavedForBackward, TensorTupleOp
from ..backend_selection import array_api, device_of


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

    def decompose(self, z, c0):
        """(h, c) in generic ops (what the compiler and the ONNX exporter know)."""
        from .ops_mathematic import reshape, sigmoid, split, tanh

        batch, hidden = c0.shape
        i, f, g, o = split(reshape(z, (batch, 4, hidden)), 1)
        c = sigmoid(f) * c0 + sigmoid(i) * tanh(g)
        return sigmoid(o) * tanh(c), c


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


class LSTMLayer(TensorTupleOp):
    """A layer's recurrence in one op: from proj (T, B, 4H), every step's input projection
    with the biases, the initial h0, c0 (B, H) and the recurrent weight W_hh (H, 4H):

        z_t = proj_t + h_{t-1} @ W_hh,   (h_t, c_t) = lstm_cell(z_t, c_{t-1})

    gives (hs (T, B, H), h_T, c_T). The step arithmetic is lstm_cell's kernel; the gradient
    (LSTMLayerGrad) runs back through time with lstm_cell_backward.
    """

    def compute(self, proj, h0, c0, w):
        T, B, G = proj.shape
        if G != 4 * h0.shape[1] or tuple(w.shape) != (h0.shape[1], G) or tuple(c0.shape) != tuple(h0.shape) \
                or h0.shape[0] != B:
            raise ValueError(f"lstm_layer: proj {tuple(proj.shape)} (T, B, 4H), h0 {tuple(h0.shape)}, "
                             f"c0 {tuple(c0.shape)} (B, H) and W_hh {tuple(w.shape)} (H, 4H) do not match")
        H = G // 4
        hs = array_api.empty((T + 1, B, H), dtype=proj.dtype, device=device_of(proj))
        hs[0] = h0  # hs[t] is h_{t-1}: the gradient reads the step inputs from the same array
        zs, cs = [], [c0]
        for t in range(T):
            z = proj[t] + hs[t] @ w
            h, c = array_api.lstm_cell(z, cs[-1])
            hs[t + 1] = h
            zs.append(z)
            cs.append(c)
        return SavedForBackward((hs[1:], hs[T], cs[T]), (hs, zs, cs))

    def gradient(self, out_grad, node):
        proj, h0, c0, w = node.inputs
        if node.saved is None:
            node.saved = self.compute(*(t.realize_cached_data() for t in node.inputs)).saved
        grads = LSTMLayerGrad(node.saved)(w, out_grad[0], out_grad[1], out_grad[2])
        return grads[0], grads[1], grads[2], grads[3]

    def decompose(self, proj, h0, c0, w):
        """(hs, h_T, c_T) in generic ops, one step after another (what the compiler and the
        ONNX exporter know)."""
        from .ops_mathematic import split, stack

        h, c, hs = h0, c0, []
        for p in split(proj, 0):
            h, c = LSTMCellGates().decompose(p + h @ w, c)
            hs.append(h)
        return stack(hs, 0), h, c


class LSTMLayerGrad(TensorTupleOp):
    """(dproj, dh0, dc0, dW_hh) of LSTMLayer for inputs (W_hh, dhs, dh_T, dc_T) and the forward's
    arrays ``saved`` (every h_{t-1}, z_t and c_{t-1}): dz_t from lstm_cell_backward going back in
    time, dh_{t-1} = dz_t @ W_hh^T, and dW_hh = H_prev^T @ dZ over all T*B rows at once."""

    def __init__(self, saved):
        self.saved = saved

    def compute(self, w, dhs, dh_last, dc_last):
        hs, zs, cs = self.saved
        T, B, H = hs.shape[0] - 1, hs.shape[1], hs.shape[2]
        dproj = array_api.empty((T, B, 4 * H), dtype=w.dtype, device=device_of(w))
        w_t = array_api.transpose(w, (1, 0))
        dh, dc = dh_last, dc_last
        for t in reversed(range(T)):
            dz, dc = array_api.lstm_cell_backward(zs[t], cs[t], dhs[t] + dh, dc)
            dproj[t] = dz
            dh = dz @ w_t
        h_prev = array_api.reshape(hs[:T], (T * B, H))
        dw = array_api.transpose(h_prev, (1, 0)) @ array_api.reshape(dproj, (T * B, 4 * H))
        return dproj, dh, dc, dw

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "the fused LSTM layer is differentiable once; for higher derivatives build the LSTM "
            "with fused=False (the same steps in generic ops)")


def lstm_layer(proj, h0, c0, w_hh):
    """(hs, h_T, c_T) of a layer's T LSTM steps, a TensorTuple: see LSTMLayer."""
    return LSTMLayer()(proj, h0, c0, w_hh)
