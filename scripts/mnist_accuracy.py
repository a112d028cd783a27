"""Test accuracy on real MNIST of the three classifiers of hw0 and hw2.

The 10,000 real MNIST test images are split into 8,000 for training and
2,000 for testing (``ndl.data.load_mnist_split``). Trains and prints the
test accuracy of

* softmax regression (numpy epoch, and the Cython + OpenMP epoch),
* the two-layer network ``ReLU(X W1) W2`` (numpy ``nn_epoch``),
* MLPResNet (needle, Adam), as in hw2.

    python scripts/mnist_accuracy.py [--data-dir DIR] [--epochs-resnet N] [--json]

With ``--json`` a last line holds a machine-readable summary (data source,
accuracies, times, numpy/Cython parameter difference) after the table.

The data directory defaults to ``$NEEDLE_DATA_DIR``, else ``../shared/data``
beside the repository when present, else the standard cache.

numpy's BLAS threads and the OpenMP threads of the Cython kernels take turns
here; needle_kernels keeps its idle OpenMP threads from spinning long on the
cores numpy needs (see ``needle_kernels/backend_ndarray/__init__.py``).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import needle_kernels as ndl  # noqa: E402
from needle_kernels.apps import mlp_resnet, simple_ml  # noqa: E402
from needle_kernels.data.loaders import mnist_source  # noqa: E402


def default_data_dir():
    if os.environ.get("NEEDLE_DATA_DIR"):
        return Path(os.environ["NEEDLE_DATA_DIR"])
    shared = REPO.parent / "shared" / "data"
    return shared if shared.is_dir() else ndl.data.data_dir()


def accuracy(logits, y):
    return float(np.mean(logits.argmax(axis=1) == y))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--n-train", type=int, default=8000)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--epochs-softmax", type=int, default=10)
    ap.add_argument("--epochs-mlp", type=int, default=20)
    ap.add_argument("--epochs-resnet", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="end with a one-line JSON summary")
    args = ap.parse_args(argv)
    root = args.data_dir or default_data_dir()
    X_tr, y_tr, X_te, y_te = ndl.data.load_mnist_split(args.n_train, args.n_test, root=root)
    print(f"array API: {os.environ.get('NEEDLE_BACKEND', 'nd')}, device: {ndl.default_device()}")
    results = []

    t = time.perf_counter()
    theta = simple_ml.train_softmax(X_tr, y_tr, X_te, y_te, epochs=args.epochs_softmax, lr=0.2, batch=100,
                                    verbose=False)
    results.append(("softmax regression (numpy)", accuracy(X_te @ theta, y_te), time.perf_counter() - t))

    t = time.perf_counter()
    theta_c = simple_ml.train_softmax(X_tr, y_tr, X_te, y_te, epochs=args.epochs_softmax, lr=0.2, batch=100,
                                      cpp=True, verbose=False)
    results.append(("softmax regression (Cython+OpenMP)", accuracy(X_te @ theta_c, y_te), time.perf_counter() - t))
    theta_diff = float(np.abs(theta - theta_c).max())
    print(f"max |theta_numpy - theta_native| = {theta_diff:.2e}")

    t = time.perf_counter()
    W1, W2 = simple_ml.train_nn(X_tr, y_tr, X_te, y_te, hidden_dim=400, epochs=args.epochs_mlp, lr=0.2,
                                batch=100, verbose=False)
    results.append(("two-layer MLP, 400 hidden (nn_epoch)", accuracy(np.maximum(X_te @ W1, 0) @ W2, y_te),
                    time.perf_counter() - t))

    t = time.perf_counter()
    np.random.seed(4)
    train_loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X_tr, y_tr), batch_size=100, shuffle=True)
    test_loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X_te, y_te), batch_size=100)
    model = mlp_resnet.MLPResNet(784, hidden_dim=100)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    for _ in range(args.epochs_resnet):
        train_err, train_loss = mlp_resnet.epoch(train_loader, model, opt)
    test_err, test_loss = mlp_resnet.epoch(test_loader, model)
    results.append(("MLPResNet, hidden 100 (needle, Adam)", 1 - test_err, time.perf_counter() - t))

    print(f"\n{'model':<40} {'test acc':>9} {'time (s)':>9}")
    for name, acc, secs in results:
        print(f"{name:<40} {acc:>9.4f} {secs:>9.2f}")
    if args.json:
        keys = ("softmax_numpy", "softmax_cython", "mlp", "mlp_resnet")
        print(json.dumps({
            "source": mnist_source(root),
            "n_train": args.n_train,
            "n_test": args.n_test,
            "max_theta_diff": theta_diff,
            "accuracy": {k: acc for k, (_, acc, _) in zip(keys, results)},
            "seconds": {k: round(secs, 3) for k, (_, _, secs) in zip(keys, results)},
            "names": {k: name for k, (name, _, _) in zip(keys, results)},
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
