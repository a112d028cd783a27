"""Recurrent modules (RNN, LSTM) and the Embedding, as in needle hw4.

Layouts are sequence-first: inputs X (T, B, I), hidden states (L, B, H).
Weights are stored input-major so a step is ``X @ W_ih + h @ W_hh``:
``W_ih (I, g*H)``, ``W_hh (H, g*H)``, biases ``(g*H,)`` with g = 1 (RNN) or
4 (LSTM, gates i, f, g, o side by side), all uniform in [-1/sqrt(H), 1/sqrt(H)].
"""
import numpy as np

from .. import init, ops
from ..autograd import Tensor
from ..ops.ops_embedding import EmbeddingGather, EmbeddingScatter
from .nn_basic import Module, Parameter

__all__ = ["RNNCell", "RNN", "LSTMCell", "LSTM", "Embedding", "EmbeddingGather", "EmbeddingScatter"]


def _check_input(X, ndim, last, what):
    if len(X.shape) != ndim or X.shape[-1] != last:
        want = "(T, B, %d)" % last if ndim == 3 else "(B, %d)" % last
        raise ValueError(f"{what}: input of shape {tuple(X.shape)} does not match {want}")


def _uniform_param(shape, k, device, dtype):
    return Parameter(init.rand(*shape, low=-k, high=k, device=device, dtype=dtype, requires_grad=True))


class _RecurrentCell(Module):
    """Weights and the step ``act(X @ W_ih + b_ih + h @ W_hh + b_hh)`` shared by RNNCell and LSTMCell."""

    gates = 1

    def __init__(self, input_size, hidden_size, bias, device, dtype):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.device, self.dtype = device, dtype
        k = 1.0 / np.sqrt(hidden_size)
        gh = self.gates * hidden_size
        self.W_ih = _uniform_param((input_size, gh), k, device, dtype)
        self.W_hh = _uniform_param((hidden_size, gh), k, device, dtype)
        if bias:
            self.bias_ih = _uniform_param((gh,), k, device, dtype)
            self.bias_hh = _uniform_param((gh,), k, device, dtype)
        else:
            self.bias_ih = self.bias_hh = None

    def input_projection(self, X):
        """``X @ W_ih`` plus both biases, for X (N, I); the part of a step that does not need h."""
        _check_input(X, 2, self.input_size, type(self).__name__)
        out = X @ self.W_ih
        if self.bias:
            n, gh = out.shape
            b = (self.bias_ih + self.bias_hh).reshape((1, gh)).broadcast_to((n, gh))
            out = out + b
        return out

    def _zeros(self, bs):
        return init.zeros(bs, self.hidden_size, device=self.device, dtype=self.dtype)


class RNNCell(_RecurrentCell):
    """h' = tanh(X W_ih + b_ih + h W_hh + b_hh) (or ReLU); X (B, I), h (B, H) -> (B, H)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype="float32"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def step(self, proj, h):
        """One step from the input projection ``proj`` (B, H) and the previous state h (B, H)."""
        z = proj + h @ self.W_hh
        return ops.tanh(z) if self.nonlinearity == "tanh" else ops.relu(z)

    def forward(self, X, h=None):
        if h is None:
            h = self._zeros(X.shape[0])
        return self.step(self.input_projection(X), h)


class LSTMCell(_RecurrentCell):
    """One LSTM step. X (B, I), h = (h0, c0) each (B, H) or None -> (h', c').

        i, f, g, o = split(X W_ih + b_ih + h0 W_hh + b_hh)      (each (B, H))
        c' = sigmoid(f) * c0 + sigmoid(i) * tanh(g);  h' = sigmoid(o) * tanh(c')

    ``fused=True`` (the default) runs the second line as one fused op each way
    (``ops.lstm_cell``); ``fused=False`` uses generic ops, differentiable more than once.
    A forward traced by ``compile.trace`` is always generic: the traced graph keeps ops
    that ``compile`` can fuse and export to ONNX.
    """

    gates = 4

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype="float32", fused=True):
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.fused = fused

    def step(self, proj, h):
        h0, c0 = h
        bs, H = h0.shape
        if self.fused:  # the element-wise part in one op (ops.lstm_cell)
            out = ops.lstm_cell(proj + h0 @ self.W_hh, c0)
            return out[0], out[1]
        z = (proj + h0 @ self.W_hh).reshape((bs, 4, H))
        i, f, g, o = ops.split(z, 1)
        c = ops.sigmoid(f) * c0 + ops.sigmoid(i) * ops.tanh(g)
        return ops.sigmoid(o) * ops.tanh(c), c

    def forward(self, X, h=None):
        if h is None:
            h = (self._zeros(X.shape[0]), self._zeros(X.shape[0]))
        return self.step(self.input_projection(X), h)


def _run_layer(cell, X, state):
    """Run one layer over X (T, B, I); returns the outputs (T, B, H) and the final state.

    The input projection of all T steps is one (T*B, I) @ (I, gH) product;
    only the recurrent part is sequential (and, for a fused LSTM cell, one op).
    """
    T, B, _ = X.shape
    proj = cell.input_projection(X.reshape((T * B, cell.input_size)))
    proj = proj.reshape((T, B, cell.gates * cell.hidden_size))
    if isinstance(cell, LSTMCell) and cell.fused:
        # the whole recurrence as one op (ops.lstm_layer): its backward forms W_hh's gradient in one product
        out = ops.lstm_layer(proj, state[0], state[1], cell.W_hh)
        return out[0], (out[1], out[2])
    outs = []
    for p in ops.split(proj, 0):
        state = cell.step(p, state)
        outs.append(state[0] if isinstance(state, tuple) else state)
    return ops.stack(outs, 0), state


def _check_state(h, L, B, H, what):
    if tuple(h.shape) != (L, B, H):
        raise ValueError(f"{what}: initial state of shape {tuple(h.shape)}, expected (L, B, H) = {(L, B, H)}")


class RNN(Module):
    """A multi-layer Elman RNN. forward(X (T, B, I), h0 (L, B, H) or None) -> (output (T, B, H), h_n (L, B, H))."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, nonlinearity="tanh",
                 device=None, dtype="float32"):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.device, self.dtype = device, dtype
        self.rnn_cells = [
            RNNCell(input_size if l == 0 else hidden_size, hidden_size, bias, nonlinearity, device, dtype)
            for l in range(num_layers)
        ]

    def forward(self, X, h0=None):
        _check_input(X, 3, self.input_size, "RNN")
        T, B, _ = X.shape
        L, H = self.num_layers, self.hidden_size
        if h0 is None:
            h0 = init.zeros(L, B, H, device=self.device, dtype=self.dtype)
        _check_state(h0, L, B, H, "RNN")
        hs = list(ops.split(h0, 0))
        for l, cell in enumerate(self.rnn_cells):
            X, hs[l] = _run_layer(cell, X, hs[l])
        return X, ops.stack(hs, 0)


class LSTM(Module):
    """A multi-layer LSTM.

    forward(X (T, B, I), h = (h0, c0) each (L, B, H), or None)
        -> (output (T, B, H), (h_n, c_n) each (L, B, H))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, device=None, dtype="float32", fused=True):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.device, self.dtype = device, dtype
        self.lstm_cells = [
            LSTMCell(input_size if l == 0 else hidden_size, hidden_size, bias, device, dtype, fused=fused)
            for l in range(num_layers)
        ]

    def forward(self, X, h=None):
        _check_input(X, 3, self.input_size, "LSTM")
        T, B, _ = X.shape
        L, H = self.num_layers, self.hidden_size
        if h is None:
            h = (init.zeros(L, B, H, device=self.device, dtype=self.dtype),
                 init.zeros(L, B, H, device=self.device, dtype=self.dtype))
        h0, c0 = h
        _check_state(h0, L, B, H, "LSTM h0")
        _check_state(c0, L, B, H, "LSTM c0")
        hs, cs = list(ops.split(h0, 0)), list(ops.split(c0, 0))
        for l, cell in enumerate(self.lstm_cells):
            X, (hs[l], cs[l]) = _run_layer(cell, X, (hs[l], cs[l]))
        return X, (ops.stack(hs, 0), ops.stack(cs, 0))


class Embedding(Module):
    """A lookup table: x (T, B) of integer ids -> (T, B, D) rows of ``weight`` (N, D), weight ~ N(0, 1).

    The result is ``one_hot(x) @ weight``, computed as a row gather, so the
    gradient of ``weight`` is ``one_hot(x)^T @ out_grad``: each row receives
    the sum of the gradients of the positions that used it.
    """

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype="float32"):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.device, self.dtype = device, dtype
        self.weight = Parameter(init.randn(num_embeddings, embedding_dim, device=device, dtype=dtype,
                                           requires_grad=True))

    def forward(self, x):
        shape = tuple(x.shape)
        idx = (x.numpy() if isinstance(x, Tensor) else np.asarray(x)).reshape(-1)
        ids = idx.astype(np.int64)
        if np.any(ids != idx) or (ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings)):
            raise ValueError(
                f"Embedding: indices must be integers in [0, {self.num_embeddings}), "
                f"got values in [{idx.min()}, {idx.max()}] (input shape {shape})"
            )
        return EmbeddingGather(ids)(self.weight).reshape((*shape, self.embedding_dim))
