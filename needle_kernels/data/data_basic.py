"""Dataset and DataLoader, as in needle.

A ``Dataset`` maps an integer index to a tuple of numpy arrays; a
``DataLoader`` groups indices into batches, stacks the items along a new
leading axis and yields a tuple of Tensors per batch.
"""
import numpy as np

from ..autograd import Tensor


class Dataset:
    """An indexable collection of samples.

    Subclasses implement ``__getitem__(index)`` and ``__len__``; they call
    ``apply_transforms`` on each image. A subclass may also implement
    ``__getitems__(indices)`` returning the whole batch as a tuple of stacked
    arrays, which the DataLoader then uses instead of one call per item.
    """

    def __init__(self, transforms=None):
        self.transforms = transforms

    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError

    def apply_transforms(self, x):
        if self.transforms is not None:
            for tform in self.transforms:
                x = tform(x)
        return x


def _as_tuple(item):
    return tuple(item) if isinstance(item, (tuple, list)) else (item,)


def collate(items):
    """Stack a list of samples (each a tuple of arrays/numbers) field by field."""
    fields = [_as_tuple(it) for it in items]
    n = len(fields[0])
    for f in fields:
        if len(f) != n:
            raise ValueError(f"samples of one batch have different numbers of fields: {n} and {len(f)}")
    return tuple(np.stack([np.asarray(f[k]) for f in fields]) for k in range(n))


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` (the last batch may be smaller).

    With ``shuffle`` each pass draws a new order with ``np.random.permutation``
    (numpy's global RNG, so ``np.random.seed`` fixes it). Each batch is a tuple
    of Tensors (no gradient) on ``device`` (default device when None).
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, *, device=None, dtype="float32"):
        if batch_size is None or int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.dataset = dataset
        self.shuffle = shuffle
        self.batch_size = int(batch_size)
        self.device = device
        self.dtype = dtype
        if not self.shuffle:
            self.ordering = self._split(np.arange(len(dataset)))

    def _split(self, order):
        return np.array_split(order, range(self.batch_size, len(order), self.batch_size))

    def __len__(self):
        return (len(self.dataset) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        if self.shuffle:
            self.ordering = self._split(np.random.permutation(len(self.dataset)))
        self.idx = -1
        return self

    def _fetch(self, indices):
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return _as_tuple(getitems(indices))
        return collate([self.dataset[int(i)] for i in indices])

    def __next__(self):
        self.idx += 1
        if self.idx >= len(self.ordering) or len(self.ordering[self.idx]) == 0:
            raise StopIteration
        batch = self._fetch(self.ordering[self.idx])
        return tuple(
            Tensor(x, device=self.device, dtype=self.dtype, requires_grad=False) for x in batch
        )
