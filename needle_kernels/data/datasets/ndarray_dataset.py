"""A dataset over in-memory arrays that share their first dimension."""
import numpy as np

from ..data_basic import Dataset


class NDArrayDataset(Dataset):
    """Items are ``tuple(a[i] for a in arrays)``."""

    def __init__(self, *arrays):
        super().__init__()
        if not arrays:
            raise ValueError("NDArrayDataset needs at least one array")
        n = len(arrays[0])
        for k, a in enumerate(arrays):
            if len(a) != n:
                raise ValueError(
                    f"NDArrayDataset arrays must share their first dimension: array 0 has shape "
                    f"{np.shape(arrays[0])}, array {k} has shape {np.shape(a)}"
                )
        self.arrays = arrays

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def __getitems__(self, indices):
        return tuple(np.asarray(a)[np.asarray(indices)] for a in self.arrays)
