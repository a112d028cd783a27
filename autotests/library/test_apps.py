"""Reference applications: hw0's numpy functions, the native epoch, the models and the training loops."""
import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.apps import mlp_resnet, simple_ml
from needle_kernels.apps.models import LanguageModel, ResNet9
from needle_kernels.data import paths, synthetic
from needle_kernels.gradcheck import numerical_gradients


def num_params(model):
    return sum(int(np.prod(p.shape)) for p in model.parameters())


# ---------------------------------------------------------------- hw0


def test_parse_mnist_synthetic(tmp_path):
    ip, lp = synthetic.write_mnist(tmp_path, "train", n=12)
    X, y = simple_ml.parse_mnist(str(ip), str(lp))
    assert X.dtype == np.float32 and y.dtype == np.uint8 and X.shape == (12, 784) and y.shape == (12,)
    assert 0 <= X.min() and X.max() <= 1


def test_parse_mnist_real():
    files = paths.mnist_paths("t10k")
    if not all(p.is_file() for p in files):
        pytest.skip("real MNIST t10k files not in the data directory")
    X, y = simple_ml.parse_mnist(*map(str, files))
    assert X.shape == (10000, 784) and X.dtype == np.float32
    assert y[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    # 0..255 scaled by 1/255: the grey levels are multiples of 1/255
    np.testing.assert_allclose(np.unique(X[0] * 255), np.round(np.unique(X[0] * 255)), atol=1e-3)


def test_softmax_loss_values():
    Z = np.zeros((4, 10), dtype=np.float32)
    y = np.array([0, 3, 9, 2], dtype=np.uint8)
    assert np.isclose(simple_ml.softmax_loss(Z, y), np.log(10))
    Z = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]], dtype=np.float32)
    y = np.array([0, 2])
    expect = np.mean([np.log(np.exp(Z[i]).sum()) - Z[i, y[i]] for i in range(2)])
    assert np.isclose(simple_ml.softmax_loss(Z, y), expect, rtol=1e-6)
    big = Z + 1000.0  # shift invariance, and no overflow
    assert np.isclose(simple_ml.softmax_loss(big, y), expect, rtol=1e-4)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3,\)"):
        simple_ml.softmax_loss(Z, np.array([0, 1, 2]))


def test_softmax_loss_needle_tensors():
    np.random.seed(0)
    Z = np.random.randn(5, 4).astype(np.float32)
    y = np.array([0, 3, 1, 1, 2])
    onehot = np.eye(4, dtype=np.float32)[y]
    out = simple_ml.softmax_loss(ndl.Tensor(Z), ndl.Tensor(onehot))
    np.testing.assert_allclose(out.numpy(), simple_ml.softmax_loss(Z, y), rtol=1e-5)


def test_softmax_regression_epoch_is_a_gradient_step():
    np.random.seed(0)
    X = np.random.randn(50, 5).astype(np.float32)
    y = np.random.randint(3, size=(50,)).astype(np.uint8)
    theta = np.zeros((5, 3), dtype=np.float32)
    [grad] = numerical_gradients(lambda th: simple_ml.softmax_loss(X @ th, y), [theta], eps=1e-5)
    simple_ml.softmax_regression_epoch(X, y, theta, lr=1.0, batch=50)
    np.testing.assert_allclose(theta, -grad, rtol=1e-4, atol=1e-4)


def test_softmax_regression_epoch_batches_in_order():
    np.random.seed(1)
    X = np.random.randn(70, 6).astype(np.float32)
    y = np.random.randint(4, size=(70,)).astype(np.uint8)
    theta = np.zeros((6, 4), dtype=np.float32)
    simple_ml.softmax_regression_epoch(X, y, theta, lr=0.5, batch=30)
    manual = np.zeros((6, 4), dtype=np.float32)
    for s in (slice(0, 30), slice(30, 60), slice(60, 70)):  # the last batch has 10 rows
        simple_ml.softmax_regression_epoch(X[s], y[s], manual, lr=0.5, batch=1000)
    np.testing.assert_allclose(theta, manual, rtol=1e-5, atol=1e-6)


def test_nn_epoch_is_a_gradient_step():
    np.random.seed(2)
    X = np.random.randn(40, 5).astype(np.float32)
    y = np.random.randint(3, size=(40,)).astype(np.uint8)
    W1 = (np.random.randn(5, 10) / np.sqrt(10)).astype(np.float32)
    W2 = (np.random.randn(10, 3) / np.sqrt(3)).astype(np.float32)
    W1_0, W2_0 = W1.copy(), W2.copy()
    g1, g2 = numerical_gradients(lambda w1, w2: simple_ml.softmax_loss(np.maximum(X @ w1, 0) @ w2, y),
                                 [W1_0, W2_0], eps=1e-5)
    simple_ml.nn_epoch(X, y, W1, W2, lr=1.0, batch=40)
    np.testing.assert_allclose(W1_0 - W1, g1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(W2_0 - W2, g2, rtol=1e-4, atol=1e-4)


def test_nn_epoch_shape_errors():
    X = np.zeros((4, 5), np.float32)
    y = np.zeros(4, np.uint8)
    with pytest.raises(ValueError, match=r"\(4, 5\).*\(6, 3\)"):
        simple_ml.nn_epoch(X, y, np.zeros((6, 3), np.float32), np.zeros((3, 2), np.float32))


def test_softmax_regression_learns_synthetic_digits():
    images, labels = synthetic.synthetic_images(600, (28, 28), seed=0)
    X = images.reshape(600, -1).astype(np.float32) / 255
    theta = np.zeros((784, 10), dtype=np.float32)
    for _ in range(5):
        simple_ml.softmax_regression_epoch(X[:500], labels[:500], theta, lr=0.2, batch=50)
    assert np.mean((X[500:] @ theta).argmax(1) == labels[500:]) > 0.9


# ---------------------------------------------------------------- native epoch


@pytest.mark.parametrize("m,batch", [(100, 100), (250, 64), (37, 10), (5, 100)])
def test_native_epoch_equals_numpy(m, batch):
    rng = np.random.default_rng(m)
    X = rng.random((m, 20), dtype=np.float32)
    X[X < 0.5] = 0  # zeros, like MNIST's background
    y = rng.integers(0, 7, m).astype(np.uint8)
    t_np = (rng.standard_normal((20, 7)) * 0.1).astype(np.float32)
    t_c = t_np.copy()
    for _ in range(3):
        simple_ml.softmax_regression_epoch(X, y, t_np, lr=0.3, batch=batch)
        simple_ml.softmax_regression_epoch_native(X, y, t_c, lr=0.3, batch=batch)
    np.testing.assert_allclose(t_c, t_np, rtol=1e-5, atol=1e-6)


def test_native_epoch_on_mnist_format_data(tmp_path):
    X, y = simple_ml.parse_mnist(*map(str, synthetic.write_mnist(tmp_path, "train", n=300)))
    t_np = np.zeros((784, 10), dtype=np.float32)
    t_c = t_np.copy()
    simple_ml.softmax_regression_epoch(X, y, t_np, lr=0.2, batch=100)
    simple_ml.softmax_regression_epoch_native(X, y, t_c, lr=0.2, batch=100)
    np.testing.assert_allclose(t_c, t_np, rtol=1e-5, atol=1e-6)


def test_native_epoch_checks_arguments():
    X = np.zeros((10, 4), np.float32)
    y = np.zeros(10, np.uint8)
    theta = np.zeros((4, 3), np.float32)
    f = simple_ml.softmax_regression_epoch_native
    with pytest.raises(ValueError, match="X must have dtype float32, got float64"):
        f(X.astype(np.float64), y, theta)
    with pytest.raises(ValueError, match="y must have dtype uint8, got int64"):
        f(X, y.astype(np.int64), theta)
    with pytest.raises(ValueError, match="theta must have dtype float32"):
        f(X, y, theta.astype(np.float64))
    with pytest.raises(ValueError, match=r"X has 10 rows .* y has 9 labels"):
        f(X, y[:9], theta)
    with pytest.raises(ValueError, match=r"\(10, 4\).*\(5, 3\)"):
        f(X, y, np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="batch must be > 0"):
        f(X, y, theta, batch=0)
    with pytest.raises(ValueError, match="label 3 out of range"):
        f(X, np.full(10, 3, np.uint8), theta)
    with pytest.raises(ValueError, match="C-contiguous"):
        f(X, y, np.zeros((3, 4), np.float32).T)
    with pytest.raises(ValueError, match="2-D"):
        f(X.reshape(-1), y, theta)


# ---------------------------------------------------------------- models


def test_resnet9_parameters_and_shape():
    model = ResNet9()
    assert num_params(model) == 431946
    out = model(ndl.Tensor(np.random.randn(2, 3, 32, 32).astype(np.float32)))
    assert out.shape == (2, 10)
    with pytest.raises(ValueError, match=r"\(2, 3, 28, 28\)"):
        model(ndl.Tensor(np.zeros((2, 3, 28, 28), np.float32)))


def test_mlp_resnet_structure():
    model = mlp_resnet.MLPResNet(784, hidden_dim=100, num_blocks=3)
    # 784*100+100 + 3 * (100*50+50 + 2*50 + 50*100+100 + 2*100) + 100*10+10
    assert num_params(model) == 110860
    assert mlp_resnet.MLPResNet(784, 100)(ndl.Tensor(np.zeros((3, 784), np.float32))).shape == (3, 10)
    block = mlp_resnet.ResidualBlock(8, 4, norm=ndl.nn.LayerNorm1d, drop_prob=0.0)
    out = block(ndl.Tensor(np.random.randn(5, 8).astype(np.float32)))
    assert out.shape == (5, 8) and out.numpy().min() >= 0  # ends in ReLU


@pytest.mark.parametrize("seq_model", ["rnn", "lstm", "transformer"])
def test_language_model_shapes(seq_model):
    T, B, V = 6, 3, 20
    lm = LanguageModel(8, V, 10, num_layers=2, seq_model=seq_model, seq_len=T)
    x = ndl.Tensor(np.random.randint(0, V, (T, B)).astype(np.float32), requires_grad=False)
    logits, h = lm(x)
    assert logits.shape == (T * B, V)
    if seq_model == "lstm":
        assert h[0].shape == h[1].shape == (2, B, 10)
    elif seq_model == "rnn":
        assert h.shape == (2, B, 10)
    else:
        assert h.shape == (T, B, 8)
    logits2, _ = lm(x, h)  # the state can be fed back
    assert logits2.shape == (T * B, V)
    logits.sum().backward()
    assert lm.embedding.weight.grad.shape == (V, 8)
    with pytest.raises(ValueError, match="seq_model"):
        LanguageModel(8, V, 10, seq_model="gru")


# ---------------------------------------------------------------- training loops


def test_mlp_resnet_epoch_trains():
    images, labels = synthetic.synthetic_images(200, (28, 28), seed=1)
    X = images.reshape(200, 28, 28, 1).astype(np.float32) / 255
    # small batches: enough steps for BatchNorm's running statistics (used in eval) to settle
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, labels), batch_size=20, shuffle=True)
    model = mlp_resnet.MLPResNet(784, hidden_dim=32)
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    first = mlp_resnet.epoch(loader, model, opt)
    for _ in range(3):
        last = mlp_resnet.epoch(loader, model, opt)
    err, loss = mlp_resnet.epoch(loader, model)
    assert 0 <= err <= 1 and last[1] < first[1] and err < 0.2


@pytest.mark.parametrize("nested", [False, True])
def test_train_mnist_on_files(tmp_path, nested):
    folder = tmp_path / "mnist" if nested else tmp_path
    synthetic.write_mnist(folder, "train", n=200, seed=0)
    synthetic.write_mnist(folder, "t10k", n=100, seed=1)
    out = mlp_resnet.train_mnist(batch_size=20, epochs=3, lr=0.01, hidden_dim=32, data_dir=str(tmp_path))
    assert len(out) == 4 and all(isinstance(v, float) for v in out)
    train_err, train_loss, test_err, test_loss = out
    assert test_err < 0.5


def test_train_mnist_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="download mnist"):
        mlp_resnet.train_mnist(epochs=1, data_dir=str(tmp_path))


def test_cifar10_loops(tmp_path):
    folder = synthetic.write_cifar10(tmp_path / "cifar-10-batches-py", n_per_batch=4)
    train = ndl.data.DataLoader(ndl.data.CIFAR10Dataset(str(folder), train=True), batch_size=10, shuffle=True)
    test = ndl.data.DataLoader(ndl.data.CIFAR10Dataset(str(folder), train=False), batch_size=4)
    model = ResNet9()
    acc, loss = simple_ml.train_cifar10(model, train, n_epochs=1, lr=0.001, progress=False)
    assert 0 <= acc <= 1 and np.isfinite(loss)
    acc, loss = simple_ml.evaluate_cifar10(model, test, progress=False)
    assert 0 <= acc <= 1 and np.isfinite(loss)


@pytest.mark.parametrize("seq_model", ["rnn", "lstm", "transformer"])
def test_ptb_loops(tmp_path, seq_model):
    synthetic.write_ptb(tmp_path, n_lines=(60, 10, 10))
    corpus = ndl.data.Corpus(str(tmp_path))
    data = ndl.data.batchify(corpus.train, 4, ndl.cpu(), "float32")
    V = len(corpus.dictionary)
    np.random.seed(0)
    lm = LanguageModel(16, V, 16, seq_model=seq_model, seq_len=10)
    acc0, loss0 = simple_ml.evaluate_ptb(lm, data, seq_len=10, progress=False)
    assert np.isfinite(loss0) and 0 <= acc0 <= 1
    optimizer = ndl.optim.Adam if seq_model == "transformer" else ndl.optim.SGD
    lr = 0.003 if seq_model == "transformer" else 1.0
    simple_ml.train_ptb(lm, data, seq_len=10, n_epochs=3, optimizer=optimizer, lr=lr, clip=1.0, progress=False)
    acc1, loss1 = simple_ml.evaluate_ptb(lm, data, seq_len=10, progress=False)
    assert loss1 < loss0 and acc1 > acc0


def test_nn_epoch_needle_tensors_match_numpy():
    """hw1's nn_epoch on needle Tensors takes the same steps as hw0's numpy version."""
    np.random.seed(3)
    X = np.random.randn(60, 5).astype(np.float32)
    y = np.random.randint(3, size=(60,)).astype(np.uint8)
    W1 = (np.random.randn(5, 8) / np.sqrt(8)).astype(np.float32)
    W2 = (np.random.randn(8, 3) / np.sqrt(3)).astype(np.float32)
    T1, T2 = simple_ml.nn_epoch(X, y, ndl.Tensor(W1), ndl.Tensor(W2), lr=0.5, batch=25)
    simple_ml.nn_epoch(X, y, W1, W2, lr=0.5, batch=25)
    np.testing.assert_allclose(T1.numpy(), W1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(T2.numpy(), W2, rtol=1e-5, atol=1e-5)


def test_run_epoch_is_the_loop_behind_the_epoch_functions(device):
    from needle_kernels.apps.training import run_epoch

    np.random.seed(1)
    X = np.random.randn(10, 4).astype(np.float32)
    y = np.random.randint(0, 3, 10)
    model = ndl.nn.Linear(4, 3, device=device)
    loss_fn = ndl.nn.SoftmaxLoss()
    batches = [(X[:6], y[:6]), (X[6:], y[6:])]

    def forward(batch):
        xb, yb = (ndl.Tensor(a, device=device, requires_grad=False) for a in batch)
        out = model(xb)
        return out, loss_fn(out, yb), yb

    result = run_epoch(batches, model, forward)
    logits = X @ model.weight.numpy() + model.bias.numpy()
    assert not model.training
    assert result.n == 10 and result.correct == int((logits.argmax(1) == y).sum())
    assert result.error_rate == (10 - result.correct) / 10
    per_batch = []
    for xb, yb in batches:
        z = xb @ model.weight.numpy() + model.bias.numpy()
        z = z - z.max(1, keepdims=True)
        per_batch.append(float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(yb)), yb])))
    np.testing.assert_allclose(result.mean_batch_loss, np.mean(per_batch), rtol=1e-5)
    np.testing.assert_allclose(result.mean_loss, (6 * per_batch[0] + 4 * per_batch[1]) / 10, rtol=1e-5)

    class Recorder(ndl.optim.SGD):
        norms = []

        def step(self):
            self.norms.append(np.sqrt(sum(float((p.grad.numpy() ** 2).sum()) for p in self.params)))
            super().step()

    opt = Recorder(model.parameters(), lr=0.1)
    run_epoch(batches, model, forward, opt, clip=1e-3)
    assert model.training and len(opt.norms) == 2 and max(opt.norms) <= 1e-3 * (1 + 1e-4)
