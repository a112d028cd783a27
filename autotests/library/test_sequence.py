"""RNN, LSTM, Embedding, attention and the Transformer: shapes, numerical gradients, and PyTorch."""
import numpy as np
import pytest

import needle_kernels as ndl
import needle_kernels.nn as nn
from needle_kernels.gradcheck import partial_derivative


def _t(a, device=None, requires_grad=True):
    return ndl.Tensor(np.asarray(a, dtype=np.float32), device=device, requires_grad=requires_grad)


def _torch():
    return pytest.importorskip("torch")


def numerical_grad_check(f, tensors, eps=1e-2, n_checks=6, rtol=2e-2, atol=2e-3, seed=0):
    """Compare backward() of the scalar f() with central differences at a few entries of each tensor.

    Entries are perturbed through ``.data`` so module parameters can be checked in place.
    """
    for t in tensors:
        t.grad = None
    f().backward()
    analytic = [t.grad.numpy().copy() for t in tensors]
    base = [t.numpy().astype(np.float64) for t in tensors]

    def set_values(*arrays):
        for t, a in zip(tensors, arrays):
            t.data = ndl.Tensor(a.astype(np.float32), device=t.device)

    def f_at(*arrays):
        set_values(*arrays)
        return float(f().numpy())

    rng = np.random.default_rng(seed)
    try:
        for i, g in enumerate(analytic):
            for _ in range(n_checks):
                idx = tuple(int(rng.integers(0, n)) for n in g.shape)
                num = partial_derivative(f_at, base, i, idx, eps)
                np.testing.assert_allclose(g[idx], num, rtol=rtol, atol=atol, err_msg=f"tensor {i}, grad at {idx}")
    finally:
        set_values(*base)


# ---------------------------------------------------------------- shapes and errors


@pytest.mark.parametrize("layers", [1, 2])
def test_rnn_lstm_shapes(layers):
    np.random.seed(0)
    X = _t(np.random.randn(5, 3, 4))
    rnn = nn.RNN(4, 6, num_layers=layers)
    out, h = rnn(X)
    assert out.shape == (5, 3, 6) and h.shape == (layers, 3, 6)
    assert len(rnn.rnn_cells) == layers and len(rnn.parameters()) == 4 * layers
    assert rnn.rnn_cells[0].W_ih.shape == (4, 6) and rnn.rnn_cells[0].bias_hh.shape == (6,)
    lstm = nn.LSTM(4, 6, num_layers=layers)
    out, (h, c) = lstm(X)
    assert out.shape == (5, 3, 6) and h.shape == c.shape == (layers, 3, 6)
    assert lstm.lstm_cells[0].W_ih.shape == (4, 24) and lstm.lstm_cells[0].W_hh.shape == (6, 24)
    assert all(c.W_ih.shape == (6, 24) for c in lstm.lstm_cells[1:])
    assert len(nn.LSTM(4, 6, layers, bias=False).parameters()) == 2 * layers


def test_init_ranges():
    np.random.seed(1)
    cell = nn.LSTMCell(30, 25)
    k = 1 / np.sqrt(25)
    for p in (cell.W_ih, cell.W_hh, cell.bias_ih, cell.bias_hh):
        a = p.numpy()
        assert a.min() >= -k and a.max() <= k and a.max() > 0.8 * k
    w = nn.Embedding(200, 50).weight.numpy()
    assert abs(w.mean()) < 0.05 and abs(w.std() - 1) < 0.05


def test_sequence_errors():
    rnn = nn.RNN(4, 6, num_layers=2)
    with pytest.raises(ValueError, match=r"\(5, 3, 3\)"):
        rnn(_t(np.zeros((5, 3, 3))))
    with pytest.raises(ValueError, match=r"\(1, 3, 6\).*\(2, 3, 6\)"):
        rnn(_t(np.zeros((5, 3, 4))), _t(np.zeros((1, 3, 6))))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNNCell(3, 4, nonlinearity="sigmoid")
    emb = nn.Embedding(10, 3)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        emb(_t([[1, 10]]))
    mha = nn.MultiHeadAttention()
    with pytest.raises(ValueError, match="do not agree"):
        mha(_t(np.zeros((1, 2, 3, 4))), _t(np.zeros((1, 2, 3, 5))), _t(np.zeros((1, 2, 3, 4))))


def test_embedding_lookup_and_grad():
    np.random.seed(0)
    emb = nn.Embedding(7, 3)
    x = np.array([[1, 2], [1, 6], [0, 1]], dtype=np.float32)
    out = emb(_t(x, requires_grad=False))
    W = emb.weight.numpy()
    assert out.shape == (3, 2, 3)
    np.testing.assert_allclose(out.numpy(), W[x.astype(int)], rtol=1e-6)
    G = np.random.randn(3, 2, 3).astype(np.float32)
    (out * _t(G, requires_grad=False)).sum().backward()
    expect = np.zeros_like(W)
    np.add.at(expect, x.astype(int).reshape(-1), G.reshape(-1, 3))
    np.testing.assert_allclose(emb.weight.grad.numpy(), expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ids", [[3, 3, 3, 3], [0, 5, 2, 5, 0, 5, 1], [1, 0, 1, 0, 1, 0, 2], [4], []])
def test_embedding_gradient_sums_repeats_as_add_at(ids):
    # repeated ids (a word twice in a batch, a position in every sequence) sum their rows as
    # np.add.at does: bitwise for mostly distinct ids, to rounding for mostly repeated ones
    ids = np.array(ids, dtype=np.int64)
    G = (np.random.default_rng(len(ids)).standard_normal((len(ids), 3)) * 1e3).astype(np.float32)
    got = ndl.nn.nn_sequence.EmbeddingScatter(ids, 6)(_t(G, requires_grad=False)).numpy()
    expect = np.zeros((6, 3), np.float32)
    np.add.at(expect, ids, G)
    if 2 * len(set(ids.tolist())) >= len(ids):
        np.testing.assert_array_equal(got, expect)
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------------- numerical gradients


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_numerical_gradient(nonlinearity):
    np.random.seed(2)
    rnn = nn.RNN(3, 4, num_layers=2, nonlinearity=nonlinearity)
    X = _t(np.random.randn(4, 2, 3))
    h0 = _t(np.random.randn(2, 2, 4) * 0.5)
    R = _t(np.random.randn(4, 2, 4), requires_grad=False)
    Rh = _t(np.random.randn(2, 2, 4), requires_grad=False)

    def f():
        out, h = rnn(X, h0)
        return (out * R).sum() + (h * Rh).sum()

    cells = rnn.rnn_cells
    numerical_grad_check(f, [X, h0, cells[0].W_ih, cells[1].W_hh, cells[1].bias_ih])


def test_lstm_numerical_gradient():
    np.random.seed(3)
    lstm = nn.LSTM(3, 4, num_layers=2)
    X = _t(np.random.randn(3, 2, 3))
    h0 = _t(np.random.randn(2, 2, 4) * 0.5)
    c0 = _t(np.random.randn(2, 2, 4) * 0.5)
    R = _t(np.random.randn(3, 2, 4), requires_grad=False)
    Rc = _t(np.random.randn(2, 2, 4), requires_grad=False)

    def f():
        out, (h, c) = lstm(X, (h0, c0))
        return (out * R).sum() + (c * Rc).sum() + h.sum()

    cells = lstm.lstm_cells
    numerical_grad_check(f, [X, h0, c0, cells[0].W_hh, cells[1].W_ih, cells[0].bias_hh])


def test_attention_layer_numerical_gradient():
    np.random.seed(4)
    layer = nn.AttentionLayer(6, 2, 3, causal=True)
    x = _t(np.random.randn(2, 4, 6))
    R = _t(np.random.randn(2, 4, 6), requires_grad=False)
    numerical_grad_check(lambda: (layer(x) * R).sum(), [x, layer.q_projection.weight, layer.out_projection.weight])


def test_transformer_numerical_gradient():
    np.random.seed(5)
    model = nn.Transformer(6, 8, 1, num_head=2, dim_head=3)
    x = _t(np.random.randn(4, 2, 6))
    R = _t(np.random.randn(4, 2, 6), requires_grad=False)
    layer = model.layers.modules[0] if hasattr(model.layers, "modules") else model.layers[0]
    numerical_grad_check(lambda: (model(x)[0] * R).sum(), [x, model.pos_embedding.weight, layer.linear1.weight])


# ---------------------------------------------------------------- attention semantics (numpy reference)


def _np_softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("causal", [False, True])
def test_multihead_attention_matches_numpy(causal):
    np.random.seed(6)
    q, k, v = (np.random.randn(2, 3, 5, 4).astype(np.float32) for _ in range(3))
    mha = nn.MultiHeadAttention(causal=causal)
    result, probs = mha(_t(q), _t(k), _t(v))
    s = q @ k.transpose(0, 1, 3, 2) / 2.0
    if causal:
        s = s + np.triu(np.full((5, 5), -np.inf), 1)
    p = _np_softmax(s)
    np.testing.assert_allclose(probs.numpy(), p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.numpy(), p @ v, rtol=1e-5, atol=1e-5)
    if causal:
        assert np.all(probs.numpy()[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0)


def test_attention_mask_with_fewer_queries():
    """With Tq < Tk the queries are the last Tq positions: query i sees keys up to i + Tk - Tq."""
    np.random.seed(7)
    q = np.random.randn(1, 1, 2, 3).astype(np.float32)
    k = np.random.randn(1, 1, 4, 3).astype(np.float32)
    _, probs = nn.MultiHeadAttention(causal=True)(_t(q), _t(k), _t(k))
    p = probs.numpy()[0, 0]
    assert p[0, 3] == 0 and p[0, 2] > 0 and p[1, 3] > 0


def test_transformer_is_causal_and_layouts_agree():
    np.random.seed(8)
    model = nn.Transformer(8, 16, 2, num_head=2, dim_head=4, sequence_len=10)
    model.eval()
    x = np.random.randn(6, 3, 8).astype(np.float32)
    out, h = model(_t(x))
    assert out.shape == (6, 3, 8) and h.shape == (6, 3, 8) and np.all(h.numpy() == 0)
    x2 = x.copy()
    x2[4:] = np.random.randn(2, 3, 8)
    out2, _ = model(_t(x2))
    np.testing.assert_allclose(out2.numpy()[:4], out.numpy()[:4], rtol=1e-5, atol=1e-5)
    assert not np.allclose(out2.numpy()[4:], out.numpy()[4:])
    model.batch_first = True
    out_bf, _ = model(_t(x.transpose(1, 0, 2)))
    np.testing.assert_allclose(out_bf.numpy().transpose(1, 0, 2), out.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="sequence_len"):
        model(_t(np.zeros((3, 11, 8))))


def test_dropout_only_in_training():
    np.random.seed(9)
    layer = nn.TransformerLayer(8, 2, 4, 16, dropout=0.5)
    x = _t(np.random.randn(2, 5, 8))
    layer.eval()
    a, b = layer(x).numpy(), layer(x).numpy()
    np.testing.assert_array_equal(a, b)
    layer.train()
    assert not np.allclose(layer(x).numpy(), a)


# ---------------------------------------------------------------- PyTorch cross-checks


def _copy_rnn_weights(torch, ours, theirs, cells, gates=1):
    with torch.no_grad():
        for l, cell in enumerate(cells):
            getattr(theirs, f"weight_ih_l{l}").copy_(torch.tensor(cell.W_ih.numpy().T))
            getattr(theirs, f"weight_hh_l{l}").copy_(torch.tensor(cell.W_hh.numpy().T))
            if cell.bias:
                getattr(theirs, f"bias_ih_l{l}").copy_(torch.tensor(cell.bias_ih.numpy()))
                getattr(theirs, f"bias_hh_l{l}").copy_(torch.tensor(cell.bias_hh.numpy()))


@pytest.mark.torch
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layers", [1, 2])
def test_rnn_vs_torch(nonlinearity, bias, layers):
    torch = _torch()
    np.random.seed(10)
    T, B, I, H = 5, 3, 4, 6
    ours = nn.RNN(I, H, layers, bias=bias, nonlinearity=nonlinearity)
    theirs = torch.nn.RNN(I, H, layers, bias=bias, nonlinearity=nonlinearity)
    _copy_rnn_weights(torch, ours, theirs, ours.rnn_cells)
    x = np.random.randn(T, B, I).astype(np.float32)
    h0 = np.random.randn(layers, B, H).astype(np.float32)
    X, H0 = _t(x), _t(h0)
    out, hn = ours(X, H0)
    xt, h0t = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    out_t, hn_t = theirs(xt, h0t)
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hn.numpy(), hn_t.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out.sum() + (hn * hn).sum()).backward()
    (out_t.sum() + (hn_t * hn_t).sum()).backward()
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(H0.grad.numpy(), h0t.grad.numpy(), rtol=1e-4, atol=1e-5)
    for l, cell in enumerate(ours.rnn_cells):
        np.testing.assert_allclose(cell.W_ih.grad.numpy(), getattr(theirs, f"weight_ih_l{l}").grad.numpy().T,
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(cell.W_hh.grad.numpy(), getattr(theirs, f"weight_hh_l{l}").grad.numpy().T,
                                   rtol=1e-4, atol=1e-4)
        if bias:
            np.testing.assert_allclose(cell.bias_ih.grad.numpy(), getattr(theirs, f"bias_ih_l{l}").grad.numpy(),
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_vs_torch(layers, bias):
    torch = _torch()
    np.random.seed(11)
    T, B, I, H = 4, 3, 5, 6
    ours = nn.LSTM(I, H, layers, bias=bias)
    theirs = torch.nn.LSTM(I, H, layers, bias=bias)
    _copy_rnn_weights(torch, ours, theirs, ours.lstm_cells)
    x = np.random.randn(T, B, I).astype(np.float32)
    h0 = np.random.randn(layers, B, H).astype(np.float32)
    c0 = np.random.randn(layers, B, H).astype(np.float32)
    X, H0, C0 = _t(x), _t(h0), _t(c0)
    out, (hn, cn) = ours(X, (H0, C0))
    xt, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
    out_t, (hn_t, cn_t) = theirs(xt, (h0t, c0t))
    for a, b in ((out, out_t), (hn, hn_t), (cn, cn_t)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out.sum() + (hn * cn).sum()).backward()
    (out_t.sum() + (hn_t * cn_t).sum()).backward()
    for a, b in ((X, xt), (H0, h0t), (C0, c0t)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)
    for l, cell in enumerate(ours.lstm_cells):
        np.testing.assert_allclose(cell.W_ih.grad.numpy(), getattr(theirs, f"weight_ih_l{l}").grad.numpy().T,
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(cell.W_hh.grad.numpy(), getattr(theirs, f"weight_hh_l{l}").grad.numpy().T,
                                   rtol=1e-4, atol=1e-4)
        if bias:
            np.testing.assert_allclose(cell.bias_hh.grad.numpy(), getattr(theirs, f"bias_hh_l{l}").grad.numpy(),
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.torch
def test_cells_vs_torch():
    torch = _torch()
    np.random.seed(12)
    x = np.random.randn(3, 4).astype(np.float32)
    h = np.random.randn(3, 5).astype(np.float32)
    c = np.random.randn(3, 5).astype(np.float32)
    rc, tc = nn.RNNCell(4, 5), torch.nn.RNNCell(4, 5)
    lc, tl = nn.LSTMCell(4, 5), torch.nn.LSTMCell(4, 5)
    with torch.no_grad():
        for ours, theirs in ((rc, tc), (lc, tl)):
            theirs.weight_ih.copy_(torch.tensor(ours.W_ih.numpy().T))
            theirs.weight_hh.copy_(torch.tensor(ours.W_hh.numpy().T))
            theirs.bias_ih.copy_(torch.tensor(ours.bias_ih.numpy()))
            theirs.bias_hh.copy_(torch.tensor(ours.bias_hh.numpy()))
        np.testing.assert_allclose(rc(_t(x), _t(h)).numpy(), tc(torch.tensor(x), torch.tensor(h)).numpy(),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rc(_t(x)).numpy(), tc(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)
        h2, c2 = lc(_t(x), (_t(h), _t(c)))
        h2t, c2t = tl(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
        np.testing.assert_allclose(h2.numpy(), h2t.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c2.numpy(), c2t.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.torch
def test_embedding_vs_torch():
    torch = _torch()
    np.random.seed(13)
    ours = nn.Embedding(11, 4)
    theirs = torch.nn.Embedding(11, 4)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.numpy()))
    idx = np.random.randint(0, 11, size=(6, 2))
    out = ours(_t(idx, requires_grad=False))
    out_t = theirs(torch.tensor(idx))
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy())
    G = np.random.randn(6, 2, 4).astype(np.float32)
    (out * _t(G, requires_grad=False)).sum().backward()
    (out_t * torch.tensor(G)).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def _torch_attention_layer(torch, layer, q, causal):
    """The AttentionLayer computation written with torch ops, using the layer's weights."""
    F = torch.nn.functional
    B, T, _ = q.shape
    Hn, Dh = layer.num_head, layer.dim_head

    def w(lin):
        return torch.tensor(lin.weight.numpy(), requires_grad=True)

    Wq, Wk, Wv, Wo = w(layer.q_projection), w(layer.k_projection), w(layer.v_projection), w(layer.out_projection)
    x = F.layer_norm(q, (q.shape[-1],), eps=1e-5)

    def heads(W):
        return (x @ W).reshape(B, T, Hn, Dh).transpose(1, 2)

    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
    s = heads(Wq) @ heads(Wk).transpose(-1, -2) / np.sqrt(Dh)
    if causal:
        s = s.masked_fill(mask, float("-inf"))
    out = torch.softmax(s, -1) @ heads(Wv)
    out = out.transpose(1, 2).reshape(B * T, Hn * Dh) @ Wo
    return out.reshape(B, T, -1), (Wq, Wk, Wv, Wo)


@pytest.mark.torch
@pytest.mark.parametrize("causal", [False, True])
def test_attention_layer_vs_torch(causal):
    torch = _torch()
    np.random.seed(14)
    layer = nn.AttentionLayer(8, 2, 5, out_features=7, causal=causal)
    x = np.random.randn(3, 6, 8).astype(np.float32)
    X = _t(x)
    out = layer(X)
    xt = torch.tensor(x, requires_grad=True)
    out_t, Ws = _torch_attention_layer(torch, layer, xt, causal)
    assert out.shape == (3, 6, 7)
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    G = np.random.randn(3, 6, 7).astype(np.float32)
    (out * _t(G, requires_grad=False)).sum().backward()
    (out_t * torch.tensor(G)).sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    for lin, Wt in zip((layer.q_projection, layer.k_projection, layer.v_projection, layer.out_projection), Ws):
        np.testing.assert_allclose(lin.weight.grad.numpy(), Wt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.torch
def test_transformer_layer_vs_torch():
    torch = _torch()
    F = torch.nn.functional
    np.random.seed(15)
    layer = nn.TransformerLayer(8, 2, 4, 12, causal=True)
    x = np.random.randn(2, 5, 8).astype(np.float32)
    X = _t(x)
    out = layer(X)
    xt = torch.tensor(x, requires_grad=True)
    attn, _ = _torch_attention_layer(torch, layer.attn, xt, True)
    y = xt + attn
    W1 = torch.tensor(layer.linear1.weight.numpy(), requires_grad=True)
    b1 = torch.tensor(layer.linear1.bias.numpy().reshape(-1))
    W2 = torch.tensor(layer.linear2.weight.numpy(), requires_grad=True)
    b2 = torch.tensor(layer.linear2.bias.numpy().reshape(-1))
    out_t = y + torch.relu(F.layer_norm(y, (8,), eps=1e-5) @ W1 + b1) @ W2 + b2
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    out.sum().backward()
    out_t.sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.linear1.weight.grad.numpy(), W1.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.linear2.weight.grad.numpy(), W2.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_embedding_gather_equals_one_hot_matmul(device):
    np.random.seed(16)
    emb = nn.Embedding(9, 4, device=device)
    ids = np.random.randint(0, 9, size=(5, 3))
    out = emb(ndl.Tensor(ids.astype(np.float32), device=device, requires_grad=False))
    W = ndl.Tensor(emb.weight.numpy(), device=device)
    ref = ndl.init.one_hot(9, ids.reshape(-1), device=device) @ W
    np.testing.assert_allclose(out.numpy().reshape(15, 4), ref.numpy(), rtol=1e-6)
    G = np.random.randn(5, 3, 4).astype(np.float32)
    (out * ndl.Tensor(G, device=device, requires_grad=False)).sum().backward()
    (ref * ndl.Tensor(G.reshape(15, 4), device=device, requires_grad=False)).sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy(), W.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert emb.weight.grad.device == device


def test_embedding_ops_are_adjoint():
    """Gather and scatter are each other's gradient, so second derivatives work."""
    np.random.seed(17)
    ids = np.array([2, 0, 2, 1])
    g = _t(np.random.randn(4, 3))
    R = np.random.randn(5, 3).astype(np.float32)
    scattered = nn.EmbeddingScatter(ids, 5)(g)
    expect = np.zeros((5, 3), np.float32)
    np.add.at(expect, ids, g.numpy())
    np.testing.assert_allclose(scattered.numpy(), expect, rtol=1e-6)
    (scattered * _t(R, requires_grad=False)).sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), R[ids], rtol=1e-6)


def _lstm_run(device, fused, x, h0, c0, weights):
    np.random.seed(21)
    lstm = nn.LSTM(3, 5, num_layers=2, device=device, fused=fused)
    X, H0, C0 = (ndl.Tensor(a, device=device) for a in (x, h0, c0))
    out, (h, c) = lstm(X, (H0, C0))
    # weights on every output, so the adjoints of both h and c reach each step
    loss = (out * ndl.Tensor(weights[0], device=device)).sum() + (c * ndl.Tensor(weights[1], device=device)).sum() \
        + (h * ndl.Tensor(weights[2], device=device)).sum()
    loss.backward()
    cells = lstm.lstm_cells
    return [out.numpy(), h.numpy(), c.numpy(), X.grad.numpy(), H0.grad.numpy(), C0.grad.numpy()] + \
        [p.grad.numpy() for cell in cells for p in (cell.W_ih, cell.W_hh, cell.bias_ih)]


def test_fused_lstm_cell_is_the_generic_one(device):
    rng = np.random.default_rng(5)
    x, h0, c0 = rng.standard_normal((4, 3, 3)) * 2, rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))
    weights = [rng.standard_normal((4, 3, 5)), rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))]
    args = [a.astype(np.float32) for a in (x, h0, c0)] + [[w.astype(np.float32) for w in weights]]
    for got, want in zip(_lstm_run(device, True, *args), _lstm_run(device, False, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fused_lstm_runs_each_layer_as_one_op(device):
    # one LSTMLayer node per layer; adjoints for the outputs only (h_T and c_T get none) and
    # an unrecorded backward give the generic steps' gradients
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 2, 3)).astype(np.float32)
    grads = []
    for fused, create_graph in ((False, True), (True, True), (True, False)):
        np.random.seed(3)
        lstm = nn.LSTM(3, 4, num_layers=2, device=device, fused=fused)
        X = ndl.Tensor(x, device=device)
        out, (h, c) = lstm(X)
        if fused:
            assert isinstance(out.inputs[0].op, ndl.ops.LSTMLayer)  # out = the last layer's hs item
        (out * out).sum().backward(create_graph=create_graph)
        grads.append([X.grad.numpy()] + [p.grad.numpy() for p in lstm.parameters()])
    for run in grads[1:]:
        for got, want in zip(run, grads[0]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lstm_layer_checks_shapes_and_is_differentiable_once(device):
    T = lambda *shape: ndl.Tensor(np.random.randn(*shape).astype(np.float32), device=device)
    with pytest.raises(ValueError, match=r"lstm_layer: proj \(3, 2, 8\) \(T, B, 4H\), h0 \(2, 3\)"):
        ndl.ops.lstm_layer(T(3, 2, 8), T(2, 3), T(2, 3), T(3, 12))
    out = ndl.ops.lstm_layer(T(3, 2, 8), T(2, 2), T(2, 2), T(2, 8))
    grads = ndl.ops.LSTMLayerGrad(out.saved)(T(2, 8), T(3, 2, 2), T(2, 2), T(2, 2))
    with pytest.raises(NotImplementedError, match="fused=False"):
        grads[3].sum().backward()


def test_lstm_eval_runs_the_fused_cell_except_while_traced(device):
    from needle_kernels.compile import trace

    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    fused, generic = nn.LSTMCell(4, 5, device=device), nn.LSTMCell(4, 5, device=device, fused=False)
    for p, q in zip(fused.parameters(), generic.parameters()):
        q.data = p.data
    fused.eval()
    generic.eval()
    (h, c), (hg, cg) = fused(ndl.Tensor(x, device=device)), generic(ndl.Tensor(x, device=device))
    np.testing.assert_allclose(h.numpy(), hg.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), cg.numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(h.inputs[0].op, ndl.ops.LSTMCellGates)
    graph = trace(lambda t: fused(t)[0], ndl.Tensor(x, device=device))
    assert not any("lstm" in n.op for n in graph.nodes), [n.op for n in graph.nodes]
    np.testing.assert_allclose(graph(ndl.Tensor(x, device=device)).numpy(), hg.numpy(), rtol=1e-5, atol=1e-6)


def test_fused_lstm_cell_says_it_is_differentiable_once():
    z = ndl.Tensor(np.random.randn(2, 8).astype(np.float32))
    c0 = ndl.Tensor(np.random.randn(2, 2).astype(np.float32))
    grads = ndl.ops.LSTMCellGatesGrad()(z, c0, c0, c0)
    with pytest.raises(NotImplementedError, match="fused=False"):
        grads[0].sum().backward()
    with pytest.raises(ValueError, match="4 \\* hidden"):
        ndl.ops.lstm_cell(ndl.Tensor(np.zeros((2, 7), np.float32)), c0)


def test_embedding_ids_beyond_float32_are_refused():
    """Ids travel to the kernels as float32, exact up to 2**24: a bigger one is an error, never
    a neighbouring row."""
    g = _t(np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"2\*\*24"):
        nn.EmbeddingScatter(np.array([2**24 + 1]), 2**24 + 2)(g)
