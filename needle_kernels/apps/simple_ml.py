"""Reference solutions of the simple ML exercises, and the training loops of hw4.

hw0 (numpy only): ``parse_mnist``, ``softmax_loss``,
``softmax_regression_epoch``, ``nn_epoch``, and the same softmax regression
epoch in Cython + OpenMP (``softmax_regression_epoch_native``).

hw4 (needle): ``epoch_general_cifar10``, ``train_cifar10``,
``evaluate_cifar10``, ``epoch_general_ptb``, ``train_ptb``, ``evaluate_ptb``.
"""
import numpy as np
from tqdm.auto import tqdm

from ..data.datasets.mnist_dataset import parse_mnist as _parse_mnist
from .training import run_epoch


def parse_mnist(image_filename, label_filename):
    """Read an MNIST image/label pair of idx files (gzip or plain).

    Returns ``(X, y)``: X float32 (N, 784) scaled to [0, 1], y uint8 (N,).
    """
    return _parse_mnist(image_filename, label_filename)


# ------------------------------------------------------------------ hw0: numpy


def _softmax(Z):
    """Row-wise softmax; subtracting the row max keeps exp from overflowing."""
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def _one_hot(y, k, dtype):
    Iy = np.zeros((y.shape[0], k), dtype=dtype)
    Iy[np.arange(y.shape[0]), y] = 1
    return Iy


def _check_xy(X, y, first_dim_name="X"):
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"{first_dim_name} (N, d) and y (N,) expected, got shapes {X.shape} and {y.shape}")


def softmax_loss(Z, y):
    """Average softmax (cross-entropy) loss.

    numpy (hw0): Z logits (N, k), y integer labels (N,):
        mean_i [ log sum_j exp(Z_ij) - Z_{i, y_i} ]
    needle Tensors (hw1/hw2): Z logits (N, k), y a one-hot Tensor (N, k).
    """
    if not isinstance(Z, np.ndarray):
        from .. import ops

        if tuple(Z.shape) != tuple(y.shape):
            raise ValueError(f"softmax_loss: logits shape {Z.shape} and one-hot labels shape {y.shape} differ")
        n = Z.shape[0]
        return (ops.logsumexp(Z, axes=(1,)).sum() - (y * Z).sum()) / n
    y = np.asarray(y)
    if Z.ndim != 2 or y.ndim != 1 or Z.shape[0] != y.shape[0]:
        raise ValueError(f"softmax_loss: logits (N, k) and labels (N,) expected, got shapes {Z.shape} and {y.shape}")
    zmax = Z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(Z - zmax).sum(axis=1)) + zmax[:, 0]
    return np.mean(lse - Z[np.arange(Z.shape[0]), y])


def softmax_regression_epoch(X, y, theta, lr=0.1, batch=100):
    """One epoch of minibatch SGD for softmax regression; updates ``theta`` (n, k) in place.

    For each minibatch X_b (b, n) in order (no shuffling; the last may be smaller):
        Z = softmax(X_b theta);  theta -= lr / b * X_b^T (Z - I_y)
    """
    _check_xy(X, y)
    if X.shape[1] != theta.shape[0]:
        raise ValueError(f"X shape {X.shape} and theta shape {theta.shape} do not multiply")
    if batch <= 0:
        raise ValueError(f"batch must be > 0, got {batch}")
    for start in range(0, X.shape[0], batch):
        Xb, yb = X[start:start + batch], y[start:start + batch]
        Z = _softmax(Xb @ theta)
        G = Z - _one_hot(yb, theta.shape[1], Z.dtype)
        theta -= lr / Xb.shape[0] * (Xb.T @ G)


def nn_epoch(X, y, W1, W2, lr=0.1, batch=100):
    """One epoch of minibatch SGD for the two-layer network ``logits = ReLU(X W1) W2``.

    numpy W1 (n, d), W2 (d, k) (hw0): updated in place. Per minibatch (b rows):
        Z1 = ReLU(X_b W1);  G2 = softmax(Z1 W2) - I_y;  G1 = 1{Z1 > 0} * (G2 W2^T)
        W1 -= lr / b * X_b^T G1;  W2 -= lr / b * Z1^T G2
    needle Tensors W1, W2 (hw1): the same step with the gradients from
    ``backward()``; new Tensors are made each step.
    Returns ``(W1, W2)``.
    """
    _check_xy(X, y)
    if X.shape[1] != W1.shape[0] or W1.shape[1] != W2.shape[0]:
        raise ValueError(f"shapes X {X.shape}, W1 {W1.shape}, W2 {W2.shape} do not chain")
    if batch <= 0:
        raise ValueError(f"batch must be > 0, got {batch}")
    if not isinstance(W1, np.ndarray):
        return _nn_epoch_needle(X, y, W1, W2, lr, batch)
    for start in range(0, X.shape[0], batch):
        Xb, yb = X[start:start + batch], y[start:start + batch]
        b = Xb.shape[0]
        Z1 = np.maximum(Xb @ W1, 0)
        G2 = _softmax(Z1 @ W2) - _one_hot(yb, W2.shape[1], Z1.dtype)
        G1 = (Z1 > 0) * (G2 @ W2.T)
        W1 -= lr / b * (Xb.T @ G1)
        W2 -= lr / b * (Z1.T @ G2)
    return W1, W2


def _nn_epoch_needle(X, y, W1, W2, lr, batch):
    import needle_kernels as ndl

    for start in range(0, X.shape[0], batch):
        Xb = ndl.Tensor(X[start:start + batch], device=W1.device, requires_grad=False)
        yb = y[start:start + batch]
        Iy = ndl.Tensor(_one_hot(yb, W2.shape[1], np.float32), device=W1.device, requires_grad=False)
        loss = softmax_loss(ndl.relu(Xb @ W1) @ W2, Iy)
        loss.backward(create_graph=False)  # nothing differentiates the gradients
        W1 = ndl.Tensor(W1.realize_cached_data() - W1.grad.realize_cached_data() * lr, device=W1.device)
        W2 = ndl.Tensor(W2.realize_cached_data() - W2.grad.realize_cached_data() * lr, device=W2.device)
    return W1, W2


def softmax_regression_epoch_native(X, y, theta, lr=0.1, batch=100):
    """``softmax_regression_epoch`` in Cython + OpenMP (float32 X and theta, uint8 y)."""
    from .simple_ml_native import softmax_regression_epoch_native as _native

    return _native(X, y, theta, lr=lr, batch=batch)


def loss_err(h, y):
    """(softmax loss, error rate) of logits h (N, k) against labels y (N,)."""
    return softmax_loss(h, y), np.mean(h.argmax(axis=1) != y)


def train_softmax(X_tr, y_tr, X_te, y_te, epochs=10, lr=0.5, batch=100, cpp=False, verbose=True):
    """Train softmax regression from zeros; returns theta. ``cpp`` uses the native epoch."""
    theta = np.zeros((X_tr.shape[1], int(y_tr.max()) + 1), dtype=np.float32)
    step = softmax_regression_epoch_native if cpp else softmax_regression_epoch
    if verbose:
        print("| Epoch | Train Loss | Train Err | Test Loss | Test Err |")
    for epoch in range(epochs):
        step(X_tr, y_tr, theta, lr=lr, batch=batch)
        if verbose:
            tl, te = loss_err(X_tr @ theta, y_tr)
            vl, ve = loss_err(X_te @ theta, y_te)
            print(f"|  {epoch:>4} |    {tl:.5f} |   {te:.5f} |   {vl:.5f} |  {ve:.5f} |")
    return theta


def train_nn(X_tr, y_tr, X_te, y_te, hidden_dim=500, epochs=10, lr=0.5, batch=100, verbose=True, seed=0):
    """Train the two-layer network (weights N(0, 1)/sqrt(d)); returns (W1, W2)."""
    n, k = X_tr.shape[1], int(y_tr.max()) + 1
    rng = np.random.default_rng(seed)
    W1 = (rng.standard_normal((n, hidden_dim)) / np.sqrt(hidden_dim)).astype(np.float32)
    W2 = (rng.standard_normal((hidden_dim, k)) / np.sqrt(k)).astype(np.float32)
    if verbose:
        print("| Epoch | Train Loss | Train Err | Test Loss | Test Err |")
    for epoch in range(epochs):
        nn_epoch(X_tr, y_tr, W1, W2, lr=lr, batch=batch)
        if verbose:
            tl, te = loss_err(np.maximum(X_tr @ W1, 0) @ W2, y_tr)
            vl, ve = loss_err(np.maximum(X_te @ W1, 0) @ W2, y_te)
            print(f"|  {epoch:>4} |    {tl:.5f} |   {te:.5f} |   {vl:.5f} |  {ve:.5f} |")
    return W1, W2


# ------------------------------------------------------------------ hw4: needle loops


def _to_device(t, device):
    import needle_kernels as ndl

    if device is None or t.device == device:
        return t
    return ndl.Tensor(t.numpy(), device=device, requires_grad=False)


def _detach_state(h):
    if h is None:
        return None
    if isinstance(h, (tuple, list)):
        return tuple(_detach_state(x) for x in h)
    return h.detach()


def epoch_general_cifar10(dataloader, model, loss_fn=None, opt=None, *, device=None, progress=True):
    """One pass over ``dataloader``: trains when ``opt`` is given, else evaluates.

    Returns ``(avg_acc, avg_loss)``: accuracy over all samples and the
    sample-weighted mean loss. Seeds numpy with 4 first, as needle does.
    """
    import needle_kernels as ndl

    np.random.seed(4)
    loss_fn = ndl.nn.SoftmaxLoss() if loss_fn is None else loss_fn

    def forward(batch):
        X, y = (_to_device(t, device) for t in batch)
        out = model(X)
        return out, loss_fn(out, y), y

    result = run_epoch(dataloader, model, forward, opt, progress=progress)
    return result.accuracy, result.mean_loss


def train_cifar10(model, dataloader, n_epochs=1, optimizer=None, lr=0.001, weight_decay=0.001,
                  loss_fn=None, *, device=None, progress=True):
    """Train for ``n_epochs``; returns ``(avg_acc, avg_loss)`` of the last epoch.

    ``optimizer`` defaults to ``ndl.optim.Adam``, ``loss_fn`` (a class) to ``nn.SoftmaxLoss``.
    """
    import needle_kernels as ndl

    np.random.seed(4)
    optimizer = ndl.optim.Adam if optimizer is None else optimizer
    loss_fn = ndl.nn.SoftmaxLoss if loss_fn is None else loss_fn
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in tqdm(range(n_epochs), disable=not progress, desc="epochs"):
        avg_acc, avg_loss = epoch_general_cifar10(dataloader, model, loss_fn(), opt, device=device, progress=progress)
    return avg_acc, avg_loss


def evaluate_cifar10(model, dataloader, loss_fn=None, *, device=None, progress=True):
    """``(avg_acc, avg_loss)`` of ``model`` in eval mode over ``dataloader``."""
    import needle_kernels as ndl

    np.random.seed(4)
    loss_fn = ndl.nn.SoftmaxLoss if loss_fn is None else loss_fn
    return epoch_general_cifar10(dataloader, model, loss_fn(), device=device, progress=progress)


def epoch_general_ptb(data, model, seq_len=40, loss_fn=None, opt=None, clip=None, device=None,
                      dtype="float32", *, progress=True):
    """One pass of truncated BPTT over ``data`` (nbatch, batch_size) from ``batchify``.

    The hidden state is carried across chunks of ``seq_len`` rows and
    detached between them. Trains when ``opt`` is given (gradients clipped
    to global norm ``clip`` if set). Returns ``(avg_acc, avg_loss)`` over
    all predicted tokens.
    """
    import needle_kernels as ndl

    np.random.seed(4)
    loss_fn = ndl.nn.SoftmaxLoss() if loss_fn is None else loss_fn
    state = [None]  # the hidden state, carried from one chunk to the next and detached between them

    def forward(i):
        X, y = ndl.data.get_batch(data, i, seq_len, device=device, dtype=dtype)
        out, h = model(X, state[0])
        state[0] = _detach_state(h)
        return out, loss_fn(out, y), y

    result = run_epoch(range(0, data.shape[0] - 1, seq_len), model, forward, opt, clip=clip, progress=progress)
    return result.accuracy, result.mean_loss


def train_ptb(model, data, seq_len=40, n_epochs=1, optimizer=None, lr=4.0, weight_decay=0.0,
              loss_fn=None, clip=None, device=None, dtype="float32", *, progress=True):
    """Train a language model for ``n_epochs``; returns ``(avg_acc, avg_loss)`` of the last epoch.

    ``optimizer`` defaults to ``ndl.optim.SGD``, ``loss_fn`` (a class) to ``nn.SoftmaxLoss``.
    """
    import needle_kernels as ndl

    np.random.seed(4)
    optimizer = ndl.optim.SGD if optimizer is None else optimizer
    loss_fn = ndl.nn.SoftmaxLoss if loss_fn is None else loss_fn
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in tqdm(range(n_epochs), disable=not progress, desc="epochs"):
        avg_acc, avg_loss = epoch_general_ptb(data, model, seq_len, loss_fn(), opt, clip, device, dtype,
                                              progress=progress)
    return avg_acc, avg_loss


def evaluate_ptb(model, data, seq_len=40, loss_fn=None, device=None, dtype="float32", *, progress=True):
    """``(avg_acc, avg_loss)`` of a language model in eval mode over ``data``."""
    import needle_kernels as ndl

    np.random.seed(4)
    loss_fn = ndl.nn.SoftmaxLoss if loss_fn is None else loss_fn
    return epoch_general_ptb(data, model, seq_len, loss_fn(), None, None, device, dtype, progress=progress)
