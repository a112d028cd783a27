"""Ready-made numpy splits of the course's data for lectures, tests and scripts."""
import numpy as np

from . import paths
from .datasets.mnist_dataset import parse_mnist
from .synthetic import synthetic_images

#: Printed (even with ``verbose=False``) whenever ``source="auto"`` falls back to generated images,
#: so that a run on generated data can always be told from one on real MNIST (the lecture tests look for it).
FALLBACK_NOTICE = "real MNIST files not found"


def load_mnist_split(n_train=8000, n_test=2000, root=None, *, source="auto", verbose=True):
    """MNIST as numpy arrays ``(X_train, y_train, X_test, y_test)``; X float32 (N, 784) in [0, 1], y uint8.

    Sources, in the order ``source="auto"`` tries them:

    * ``"t10k"``: the 10,000 real test images; the first ``n_train`` train
      and the last ``n_test`` test (they must not overlap).
    * ``"train"``: the real 60,000 training images, split the same way.
    * ``"synthetic"``: random class templates plus noise (not digits).

    ``root`` is the data directory (default ``$NEEDLE_DATA_DIR``). With
    ``verbose`` a line says which source was used; falling back to synthetic
    images prints that line (containing ``FALLBACK_NOTICE``) whatever ``verbose`` says.
    """
    choices = ("auto", "t10k", "train", "synthetic")
    if source not in choices:
        raise ValueError(f"source must be one of {choices}, got {source!r}")
    src = mnist_source(root) if source == "auto" else source
    if src == "synthetic":
        images, labels = synthetic_images(n_train + n_test, (28, 28), seed=0)
        X = images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)
        y = labels
        where = f"synthetic images ({FALLBACK_NOTICE} in {paths.mnist_dir(root)})"
    else:
        files = paths.mnist_files(src, root)  # raises with the expected path and the fetch command
        X, y = parse_mnist(*files)
        where = f"real MNIST {files[0]}"
    if n_train + n_test > len(X):
        raise ValueError(f"n_train + n_test = {n_train + n_test} exceeds the {len(X)} images of {where}")
    if verbose or (src == "synthetic" and source == "auto"):
        print(f"MNIST: {where}: first {n_train} for training, last {n_test} for testing")
    return X[:n_train], y[:n_train], X[len(X) - n_test:], y[len(y) - n_test:]


def mnist_source(root=None):
    """The source ``load_mnist_split(source="auto")`` reads from ``root``: "t10k", "train" or "synthetic"."""
    for split in ("t10k", "train"):
        if all(p.is_file() for p in paths.mnist_paths(split, root)):
            return split
    return "synthetic"
