"""The MLP ResNet of hw2 and its MNIST training loop."""
from pathlib import Path

import numpy as np

import needle_kernels as ndl
import needle_kernels.nn as nn

from ..data import paths as _paths
from .training import run_epoch


def ResidualBlock(dim, hidden_dim, norm=nn.BatchNorm1d, drop_prob=0.1, device=None, dtype="float32"):
    """ReLU(x + norm(Linear(Dropout(ReLU(norm(Linear(x))))))), with hidden width ``hidden_dim``."""
    return nn.Sequential(
        nn.Residual(
            nn.Sequential(
                nn.Linear(dim, hidden_dim, device=device, dtype=dtype),
                norm(hidden_dim, device=device, dtype=dtype),
                nn.ReLU(),
                nn.Dropout(drop_prob),
                nn.Linear(hidden_dim, dim, device=device, dtype=dtype),
                norm(dim, device=device, dtype=dtype),
            )
        ),
        nn.ReLU(),
    )


def MLPResNet(dim, hidden_dim=100, num_blocks=3, num_classes=10, norm=nn.BatchNorm1d, drop_prob=0.1,
              device=None, dtype="float32"):
    """Linear(dim, hidden) -> ReLU -> num_blocks x ResidualBlock(hidden, hidden // 2) -> Linear(hidden, classes)."""
    return nn.Sequential(
        nn.Linear(dim, hidden_dim, device=device, dtype=dtype),
        nn.ReLU(),
        *[ResidualBlock(hidden_dim, hidden_dim // 2, norm, drop_prob, device=device, dtype=dtype)
          for _ in range(num_blocks)],
        nn.Linear(hidden_dim, num_classes, device=device, dtype=dtype),
    )


def epoch(dataloader, model, opt=None):
    """One pass over ``dataloader``; trains when ``opt`` is given, else evaluates.

    Images are flattened to (B, -1). Returns ``(error_rate, mean_loss)``: the
    fraction of misclassified samples and the mean of the per-batch losses.
    Seeds numpy with 4 first, as needle does.
    """
    np.random.seed(4)
    loss_fn = nn.SoftmaxLoss()

    def forward(batch):
        X, y = batch
        out = model(X.reshape((X.shape[0], int(np.prod(X.shape[1:])))))
        return out, loss_fn(out, y), y

    result = run_epoch(dataloader, model, forward, opt)
    return result.error_rate, result.mean_batch_loss


def _mnist_pair(data_dir, split):
    """The idx pair of ``split`` in ``data_dir`` (flat, as needle's ``data/``) or ``data_dir/mnist``."""
    base = Path(data_dir)
    for folder in (base, base / "mnist"):
        imgs = folder / f"{split}-images-idx3-ubyte.gz"
        labels = folder / f"{split}-labels-idx1-ubyte.gz"
        if imgs.is_file() and labels.is_file():
            return str(imgs), str(labels)
    raise _paths.missing_file_error(base / "mnist" / f"{split}-images-idx3-ubyte.gz", "mnist")


def train_mnist(batch_size=100, epochs=10, optimizer=ndl.optim.Adam, lr=0.001, weight_decay=0.001,
                hidden_dim=100, data_dir="data"):
    """Train MLPResNet(784, hidden_dim) on MNIST; returns (train_err, train_loss, test_err, test_loss).

    ``data_dir`` holds the four idx files, either directly (needle's
    ``data/`` folder) or under ``mnist/`` (the data-directory layout); None
    means the data directory (``$NEEDLE_DATA_DIR``).
    """
    np.random.seed(4)
    data_dir = _paths.data_dir() if data_dir is None else data_dir
    train_set = ndl.data.MNISTDataset(*_mnist_pair(data_dir, "train"))
    test_set = ndl.data.MNISTDataset(*_mnist_pair(data_dir, "t10k"))
    train_loader = ndl.data.DataLoader(train_set, batch_size, shuffle=True)
    test_loader = ndl.data.DataLoader(test_set, batch_size)
    model = MLPResNet(784, hidden_dim)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        train_err, train_loss = epoch(train_loader, model, opt)
    test_err, test_loss = epoch(test_loader, model)
    return train_err, train_loss, test_err, test_loss
