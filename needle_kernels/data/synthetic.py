"""Small data files written in the real formats.

They let tests exercise the real readers (idx gz, CIFAR-10 pickle batches,
PTB text) without the real downloads, and let lectures run when the real
files are missing. The content is random but learnable: each MNIST-like or
CIFAR-like class is a fixed blurry template plus noise, and the PTB-like
text follows a small random bigram model.
"""
import gzip
import os
import pickle
from pathlib import Path

import numpy as np

from . import paths


def _atomic_write(path, data):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def idx_bytes(array, magic):
    """The idx encoding of a uint8 array: big-endian magic, the sizes, then the bytes."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = np.array([magic, *array.shape], dtype=">i4").tobytes()
    return header + array.tobytes()


def write_idx_images(path, images):
    """Write uint8 images (N, rows, cols) as a gzip-compressed idx3 file."""
    images = np.asarray(images)
    if images.ndim != 3:
        raise ValueError(f"idx3 images must have shape (N, rows, cols), got {images.shape}")
    return _atomic_write(path, gzip.compress(idx_bytes(images, 2051), mtime=0))


def write_idx_labels(path, labels):
    """Write uint8 labels (N,) as a gzip-compressed idx1 file."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"idx1 labels must have shape (N,), got {labels.shape}")
    return _atomic_write(path, gzip.compress(idx_bytes(labels, 2049), mtime=0))


def _templates(rng, num_classes, shape, smooth=2):
    t = rng.random((num_classes, *shape))
    for _ in range(smooth):  # a few box blurs make blob-like templates
        t = (t + np.roll(t, 1, -1) + np.roll(t, -1, -1) + np.roll(t, 1, -2) + np.roll(t, -1, -2)) / 5
    t -= t.min(axis=tuple(range(1, t.ndim)), keepdims=True)
    t /= t.max(axis=tuple(range(1, t.ndim)), keepdims=True)
    return t


def synthetic_images(n, shape, num_classes=10, noise=0.35, seed=0):
    """(uint8 images (n, *shape), uint8 labels (n,)): class template plus noise, clipped to [0, 255]."""
    rng = np.random.default_rng(seed)
    templates = _templates(np.random.default_rng(12345), num_classes, shape)
    labels = rng.integers(0, num_classes, size=n).astype(np.uint8)
    x = templates[labels] + noise * rng.standard_normal((n, *shape))
    return (np.clip(x, 0, 1) * 255).round().astype(np.uint8), labels


def write_mnist(folder, split="train", n=200, seed=0):
    """Write ``{split}-images-idx3-ubyte.gz`` and ``{split}-labels-idx1-ubyte.gz`` with n 28x28 images."""
    folder = Path(folder)
    images, labels = synthetic_images(n, (28, 28), seed=seed)
    return (
        write_idx_images(folder / f"{split}-images-idx3-ubyte.gz", images),
        write_idx_labels(folder / f"{split}-labels-idx1-ubyte.gz", labels),
    )


def write_cifar_batch(path, n=20, seed=0, batch_label="synthetic batch"):
    """Write one CIFAR-10 python batch: a pickled dict with bytes keys, as the real files have."""
    images, labels = synthetic_images(n, (3, 32, 32), seed=seed)
    d = {
        b"batch_label": batch_label.encode(),
        b"labels": [int(v) for v in labels],
        b"data": images.reshape(n, 3 * 32 * 32),
        b"filenames": [f"synthetic_{seed}_{i}.png".encode() for i in range(n)],
    }
    return _atomic_write(path, pickle.dumps(d, protocol=2))


CIFAR10_LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_cifar10(folder, n_per_batch=20, seed=0):
    """Write ``data_batch_1..5``, ``test_batch`` and ``batches.meta`` into ``folder``."""
    folder = Path(folder)
    for i, name in enumerate(paths.CIFAR10_TRAIN_BATCHES + paths.CIFAR10_TEST_BATCHES):
        write_cifar_batch(folder / name, n_per_batch, seed=seed + i, batch_label=f"synthetic {name}")
    meta = {b"num_cases_per_batch": n_per_batch, b"label_names": [s.encode() for s in CIFAR10_LABEL_NAMES],
            b"num_vis": 3072}
    _atomic_write(folder / "batches.meta", pickle.dumps(meta, protocol=2))
    return folder


def synthetic_text(n_lines, vocab_size=50, seed=0):
    """Lines of words from a random bigram model, formatted like PTB (space-padded, lower case)."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(vocab_size - 2)] + ["<unk>", "N"]
    trans = np.random.default_rng(777).dirichlet(np.full(vocab_size, 0.2), size=vocab_size)
    lines = []
    for _ in range(n_lines):
        length = int(rng.integers(3, 15))
        w = int(rng.integers(vocab_size))
        words = []
        for _ in range(length):
            words.append(vocab[w])
            w = int(rng.choice(vocab_size, p=trans[w]))
        lines.append(" " + " ".join(words) + " \n")
    return "".join(lines)


def write_ptb(folder, n_lines=(200, 40, 40), seed=0):
    """Write ``train.txt``, ``valid.txt`` and ``test.txt`` with the given numbers of lines."""
    folder = Path(folder)
    for k, (split, n) in enumerate(zip(paths.PTB_SPLITS, n_lines)):
        _atomic_write(folder / f"{split}.txt", synthetic_text(n, seed=seed + k).encode())
    return folder


def ensure_sample_data(root=None, *, mnist_n=(1000, 200), cifar_n_per_batch=20, ptb_lines=(200, 40, 40)):
    """Write every synthetic file that is missing under the data-directory layout of ``root``.

    Existing files (real or synthetic) are left alone. Returns the directory.
    """
    base = paths.data_dir(root)
    for split, n, seed in (("train", mnist_n[0], 0), ("t10k", mnist_n[1], 1)):
        if not all(p.is_file() for p in paths.mnist_paths(split, base)):
            write_mnist(base / "mnist", split, n, seed=seed)
    if not all((base / "ptb" / f"{s}.txt").is_file() for s in paths.PTB_SPLITS):
        for k, (s, n) in enumerate(zip(paths.PTB_SPLITS, ptb_lines)):
            if not (base / "ptb" / f"{s}.txt").is_file():
                _atomic_write(base / "ptb" / f"{s}.txt", synthetic_text(n, seed=k).encode())
    try:
        paths.cifar10_dir(base, require=True)
    except FileNotFoundError:
        write_cifar10(base / paths.CIFAR10_FOLDER, cifar_n_per_batch)
    return base
