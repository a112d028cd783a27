"""Multi-head attention and the Transformer, as in needle hw4 (extra).

Attention tensors are laid out (B, heads, T, D). Layers work on (B, T, D)
and flatten to (B*T, D) for the per-position modules (LayerNorm1d, Linear).
"""
import numpy as np

from .. import init, ops
from ..autograd import Tensor
from .nn_basic import Dropout, LayerNorm1d, Linear, Module, ReLU, Sequential
from .nn_sequence import Embedding

__all__ = ["MultiHeadAttention", "AttentionLayer", "TransformerLayer", "Transformer"]


class MultiHeadAttention(Module):
    """Scaled dot-product attention over already-projected heads.

    forward(q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, D)) -> (result (B, H, Tq, D), probs (B, H, Tq, Tk))

        probs = dropout(softmax(q k^T / sqrt(D) + mask)),  result = probs v

    With ``causal`` the mask hides key j from query i when j > i + (Tk - Tq)
    (the queries are the last Tq positions of the keys).
    """

    def __init__(self, *, dropout=0.0, causal=False, device=None, dtype="float32"):
        super().__init__()
        self.device, self.dtype, self.causal = device, dtype, causal
        self.dropout = Dropout(dropout)

    def create_causal_mask(self, i, j, device):
        """(1, 1, i, j) additive mask: 0 where allowed, -max_float where the key lies in the future."""
        mask = -np.finfo(np.float32).max * np.triu(np.ones((1, 1, i, j), dtype=np.float32), j - i + 1)
        return Tensor(mask, device=device, dtype=self.dtype, requires_grad=False)

    def softmax(self, logit):
        """Softmax over the last axis, one op (ops.softmax)."""
        return ops.softmax(logit)

    def forward(self, q, k, v):
        if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
            raise ValueError(f"MultiHeadAttention expects (B, H, T, D) inputs, got q {q.shape}, k {k.shape}, v {v.shape}")
        B, H, Tq, D = q.shape
        Bk, Hk, Tk, Dk = k.shape
        if (Bk, Hk, Dk) != (B, H, D) or tuple(v.shape[:3]) != (B, H, Tk):
            raise ValueError(f"MultiHeadAttention: shapes q {q.shape}, k {k.shape}, v {v.shape} do not agree")
        scores = (q @ ops.transpose(k)) / np.sqrt(D)
        if self.causal:
            scores = scores + self.create_causal_mask(Tq, Tk, q.device).broadcast_to(scores.shape)
        probs = self.dropout(self.softmax(scores))
        return probs @ v, probs


class AttentionLayer(Module):
    """Pre-norm multi-head attention with input and output projections.

    forward(q (B, Tq, Fq), k=None, v=None) -> (B, Tq, out_features); k and v default to q.

        q_h = LN(q) Wq, k_h = LN(k) Wk, v_h = LN(v) Wv  split into heads,
        result = concat_heads(attention(q_h, k_h, v_h)) Wo      (projections without bias)
    """

    def __init__(self, q_features, num_head, dim_head, *, k_features=None, v_features=None,
                 out_features=None, dropout=0.0, causal=True, device=None, dtype="float32"):
        super().__init__()
        self.device, self.dtype = device, dtype
        k_features = q_features if k_features is None else k_features
        v_features = q_features if v_features is None else v_features
        out_features = q_features if out_features is None else out_features
        self.q_features, self.k_features, self.v_features = q_features, k_features, v_features
        self.out_features, self.num_head, self.dim_head = out_features, num_head, dim_head
        self.prenorm_q = LayerNorm1d(q_features, device=device, dtype=dtype)
        self.prenorm_k = LayerNorm1d(k_features, device=device, dtype=dtype)
        self.prenorm_v = LayerNorm1d(v_features, device=device, dtype=dtype)
        inner = num_head * dim_head
        self.q_projection = Linear(q_features, inner, bias=False, device=device, dtype=dtype)
        self.k_projection = Linear(k_features, inner, bias=False, device=device, dtype=dtype)
        self.v_projection = Linear(v_features, inner, bias=False, device=device, dtype=dtype)
        self.attn = MultiHeadAttention(dropout=dropout, causal=causal, device=device, dtype=dtype)
        self.out_projection = Linear(inner, out_features, bias=False, device=device, dtype=dtype)
        self.probs = None

    def _heads(self, x, features, norm, proj, what):
        if len(x.shape) != 3 or x.shape[2] != features:
            raise ValueError(f"AttentionLayer: {what} of shape {tuple(x.shape)}, expected (B, T, {features})")
        B, T, _ = x.shape
        y = proj(norm(x.reshape((B * T, features))))
        return ops.transpose(y.reshape((B, T, self.num_head, self.dim_head)), (1, 2))

    def forward(self, q, k=None, v=None):
        k = q if k is None else k
        v = q if v is None else v
        B, Tq = q.shape[0], q.shape[1]
        qh = self._heads(q, self.q_features, self.prenorm_q, self.q_projection, "q")
        kh = self._heads(k, self.k_features, self.prenorm_k, self.k_projection, "k")
        vh = self._heads(v, self.v_features, self.prenorm_v, self.v_projection, "v")
        out, self.probs = self.attn(qh, kh, vh)
        out = ops.transpose(out, (1, 2)).reshape((B * Tq, self.num_head * self.dim_head))
        return self.out_projection(out).reshape((B, Tq, self.out_features))


class TransformerLayer(Module):
    """A pre-norm Transformer block on x (B, T, F):

        x = x + dropout(attention(x))
        x = x + dropout(linear2(dropout(relu(linear1(layernorm(x))))))
    """

    def __init__(self, q_features, num_head, dim_head, hidden_size, *, dropout=0.0, causal=True,
                 device=None, dtype="float32"):
        super().__init__()
        self.device, self.dtype, self.q_features = device, dtype, q_features
        self.attn = AttentionLayer(q_features, num_head, dim_head, dropout=dropout, causal=causal,
                                   device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.layernorm = LayerNorm1d(q_features, device=device, dtype=dtype)
        self.linear1 = Linear(q_features, hidden_size, device=device, dtype=dtype)
        self.relu = ReLU()
        self.linear2 = Linear(hidden_size, q_features, device=device, dtype=dtype)

    def forward(self, x):
        if len(x.shape) != 3 or x.shape[2] != self.q_features:
            raise ValueError(f"TransformerLayer: input of shape {tuple(x.shape)}, expected (B, T, {self.q_features})")
        B, T, F = x.shape
        x = x + self.dropout(self.attn(x))
        y = self.layernorm(x.reshape((B * T, F)))
        y = self.linear2(self.dropout(self.relu(self.linear1(y))))
        return x + self.dropout(y).reshape((B, T, F))


class Transformer(Module):
    """A stack of TransformerLayers with a learned positional embedding.

    forward(x, h=None) -> (output, init_state): x is (T, B, E), or (B, T, E)
    with ``batch_first``; output has the same layout. The model has no
    recurrent state; ``init_state`` is zeros shaped like the output, so
    Transformer can stand where an RNN/LSTM does.
    """

    def __init__(self, embedding_size, hidden_size, num_layers, *, num_head=8, dim_head=32, dropout=0.0,
                 causal=True, device=None, dtype="float32", batch_first=False, sequence_len=2048):
        super().__init__()
        self.device, self.dtype = device, dtype
        self.embedding_size, self.batch_first, self.sequence_len = embedding_size, batch_first, sequence_len
        self.pos_embedding = Embedding(sequence_len, embedding_size, device=device, dtype=dtype)
        self.layers = Sequential(*[
            TransformerLayer(embedding_size, num_head, dim_head, hidden_size, dropout=dropout, causal=causal,
                             device=device, dtype=dtype)
            for _ in range(num_layers)
        ])

    def forward(self, x, h=None):
        if len(x.shape) != 3 or x.shape[2] != self.embedding_size:
            layout = "(B, T, E)" if self.batch_first else "(T, B, E)"
            raise ValueError(f"Transformer: input of shape {tuple(x.shape)}, expected {layout} with E = {self.embedding_size}")
        if not self.batch_first:
            x = ops.transpose(x, (0, 1))
        B, T, _ = x.shape
        if T > self.sequence_len:
            raise ValueError(f"Transformer: sequence length {T} exceeds sequence_len={self.sequence_len}")
        positions = np.broadcast_to(np.arange(T, dtype=np.float32)[:, None], (T, B))
        pos = self.pos_embedding(Tensor(np.ascontiguousarray(positions), device=x.device, requires_grad=False))
        x = self.layers(x + ops.transpose(pos, (0, 1)))
        if not self.batch_first:
            x = ops.transpose(x, (0, 1))
        return x, init.zeros_like(x)
