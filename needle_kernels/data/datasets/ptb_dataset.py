"""Penn Treebank word-level language modelling data, as in needle hw4.

Each line of a text file becomes its words followed by ``<eos>``; words get
ids in order of first appearance (train file first, then test).
"""
from pathlib import Path

import numpy as np

from ...autograd import Tensor
from ..paths import missing_file_error


class Dictionary:
    """A bijection between words and consecutive integer ids."""

    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        """Give ``word`` the next free id if it is new; return its id."""
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    """Token ids of ``base_dir/train.txt`` (``self.train``) and ``base_dir/test.txt`` (``self.test``).

    ``max_lines`` limits how many lines of each file are read. ``train_file``
    and ``test_file`` name other files of the folder (for example
    ``valid.txt`` as training text when ``train.txt`` is not available).
    """

    def __init__(self, base_dir, max_lines=None, *, train_file="train.txt", test_file="test.txt"):
        self.dictionary = Dictionary()
        base = Path(base_dir)
        self.train = self.tokenize(base / train_file, max_lines)
        self.test = self.tokenize(base / test_file, max_lines)

    def tokenize(self, path, max_lines=None):
        """List of ids of the words of the first ``max_lines`` lines of ``path``, ``<eos>`` after each line."""
        path = Path(path)
        if not path.is_file():
            raise missing_file_error(path, "ptb")
        ids = []
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if max_lines is not None and i >= max_lines:
                    break
                for word in line.split() + ["<eos>"]:
                    ids.append(self.dictionary.add_word(word))
        return ids


def batchify(data, batch_size, device, dtype):
    """Arrange a token stream into ``batch_size`` columns: a numpy array (nbatch, batch_size).

    The stream is cut into ``batch_size`` contiguous pieces of length
    ``nbatch = len(data) // batch_size`` (the remainder is dropped); column j
    is piece j, so consecutive rows continue each piece in time (TNC layout).
    The ids stay integers; ``device``/``dtype`` are accepted for needle's
    signature and used by ``get_batch``, which makes the Tensors.
    """
    nbatch = len(data) // batch_size
    if nbatch < 1:
        raise ValueError(f"batchify: {len(data)} tokens cannot fill batch_size={batch_size} columns")
    data = np.asarray(data[:nbatch * batch_size], dtype=np.int64)
    return data.reshape(batch_size, nbatch).T.copy()


def get_batch(batches, i, bptt, device=None, dtype=None):
    """Inputs rows i..i+L-1 and targets rows i+1..i+L of ``batches`` (L = min(bptt, rows-1-i)).

    Returns ``(X (L, B), y (L*B,))`` as Tensors without gradient.
    """
    n = len(batches)
    if not 0 <= i < n - 1:
        raise IndexError(f"get_batch: start row {i} out of range for {n} rows (need 0 <= i < {n - 1})")
    seq_len = min(bptt, n - 1 - i)
    data = batches[i:i + seq_len]
    target = batches[i + 1:i + 1 + seq_len].reshape(-1)
    return (
        Tensor(data, device=device, dtype=dtype, requires_grad=False),
        Tensor(target, device=device, dtype=dtype, requires_grad=False),
    )
