"""CIFAR-10 from the python pickle batches of ``cifar-10-python.tar.gz``.

Each batch file is a pickled dict with ``data`` (N, 3072) uint8 rows (1024
red, then 1024 green, then 1024 blue values, each a 32x32 row-major plane)
and ``labels`` (N ints). The original files were written by Python 2, so
they are read with ``encoding="bytes"`` and their keys are bytes.
"""
import pickle
from pathlib import Path

import numpy as np

from ..data_basic import Dataset
from ..paths import CIFAR10_TEST_BATCHES, CIFAR10_TRAIN_BATCHES, missing_file_error


def read_cifar_batch(path):
    """(data uint8 (N, 3, 32, 32), labels uint8 (N,)) from one pickle batch file."""
    path = Path(path)
    if not path.is_file():
        raise missing_file_error(path, "cifar10")
    with open(path, "rb") as f:
        d = pickle.load(f, encoding="bytes")
    d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
    if "data" not in d or "labels" not in d:
        raise ValueError(f"{path}: not a CIFAR-10 batch (keys {sorted(d)})")
    data = np.asarray(d["data"], dtype=np.uint8)
    labels = np.asarray(d["labels"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != labels.shape[0]:
        raise ValueError(f"{path}: data shape {data.shape} and labels shape {labels.shape} do not match (N, 3072) and (N,)")
    return data.reshape(-1, 3, 32, 32), labels


class CIFAR10Dataset(Dataset):
    """CIFAR-10 items ``(image (3, 32, 32) float32 in [0, 1], label uint8)``.

    ``base_folder`` is the ``cifar-10-batches-py`` folder; ``train`` picks
    ``data_batch_1..5`` or ``test_batch``. Transforms (written for HWC
    images) see each image as (32, 32, 3) and their result is turned back to
    CHW. ``p`` is accepted for needle's signature; augmentation is configured
    through ``transforms``.
    """

    def __init__(self, base_folder, train, p=0.5, transforms=None):
        super().__init__(transforms)
        self.p = p
        base = Path(base_folder)
        names = CIFAR10_TRAIN_BATCHES if train else CIFAR10_TEST_BATCHES
        parts = [read_cifar_batch(base / name) for name in names]
        self.X = np.concatenate([x for x, _ in parts]).astype(np.float32) / np.float32(255.0)
        self.y = np.concatenate([y for _, y in parts])

    def __len__(self):
        return self.X.shape[0]

    def _image(self, i):
        x = self.X[i]
        if self.transforms is None:
            return x
        return np.ascontiguousarray(self.apply_transforms(x.transpose(1, 2, 0)).transpose(2, 0, 1))

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self._image(index), self.y[index]
        return self.__getitems__(np.arange(len(self))[index])

    def __getitems__(self, indices):
        indices = np.asarray(indices)
        if self.transforms is None:
            X = self.X[indices]
        else:
            X = np.stack([self._image(i) for i in indices])
        return X, self.y[indices]
