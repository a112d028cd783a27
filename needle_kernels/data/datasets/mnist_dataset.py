"""MNIST in its original idx format (gzip-compressed or not).

idx files start with a big-endian header: a magic number (2051 for images,
2049 for labels), then the sizes (N, rows, cols for images; N for labels),
then the uint8 payload in row-major order.
"""
import gzip

import numpy as np

from ..data_basic import Dataset
from ..paths import mnist_file

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049


def _open(path):
    path = mnist_file(path)  # needle's data/train-images-idx3-ubyte.gz is also found in data/mnist/
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def read_idx_images(path):
    """uint8 array (N, rows, cols) from an idx3 file."""
    with _open(path) as f:
        raw = f.read()
    if len(raw) < 16:
        raise ValueError(f"{path}: too short for an idx3 header ({len(raw)} bytes)")
    magic, n, rows, cols = np.frombuffer(raw[:16], dtype=">i4")
    if magic != IMAGE_MAGIC:
        raise ValueError(f"{path}: magic number {magic}, expected {IMAGE_MAGIC} (idx3 images)")
    expected = int(n) * int(rows) * int(cols)
    if len(raw) - 16 != expected:
        raise ValueError(f"{path}: header says {n}x{rows}x{cols} = {expected} bytes, file has {len(raw) - 16}")
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(int(n), int(rows), int(cols))


def read_idx_labels(path):
    """uint8 array (N,) from an idx1 file."""
    with _open(path) as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for an idx1 header ({len(raw)} bytes)")
    magic, n = np.frombuffer(raw[:8], dtype=">i4")
    if magic != LABEL_MAGIC:
        raise ValueError(f"{path}: magic number {magic}, expected {LABEL_MAGIC} (idx1 labels)")
    if len(raw) - 8 != int(n):
        raise ValueError(f"{path}: header says {n} labels, file has {len(raw) - 8}")
    return np.frombuffer(raw, dtype=np.uint8, offset=8).copy()


def parse_mnist(image_filename, label_filename):
    """(X float32 (N, rows*cols) scaled to [0, 1], y uint8 (N,)) from a pair of idx files."""
    images = read_idx_images(image_filename)
    labels = read_idx_labels(label_filename)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"MNIST images {image_filename} hold {images.shape[0]} items, "
            f"labels {label_filename} hold {labels.shape[0]}"
        )
    X = images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255.0)
    return X, labels


class MNISTDataset(Dataset):
    """MNIST items ``(image (28, 28, 1) float32 in [0, 1], label uint8)``.

    Transforms see one HWC image at a time.
    """

    def __init__(self, image_filename, label_filename, transforms=None):
        super().__init__(transforms)
        self.images, self.labels = parse_mnist(image_filename, label_filename)
        self.side = int(round(np.sqrt(self.images.shape[1])))

    def __len__(self):
        return self.images.shape[0]

    def _image(self, i):
        return self.apply_transforms(self.images[i].reshape(self.side, self.side, 1))

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self._image(index), self.labels[index]
        return self.__getitems__(np.arange(len(self))[index])

    def __getitems__(self, indices):
        indices = np.asarray(indices)
        if self.transforms is None:
            X = self.images[indices].reshape(-1, self.side, self.side, 1)
        else:
            X = np.stack([self._image(i) for i in indices])
        return X, self.labels[indices]
