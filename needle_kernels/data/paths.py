"""Where the data files live.

The data directory is ``$NEEDLE_DATA_DIR`` when set, else
``~/.cache/needle_kernels/data``. Inside it the layout is fixed::

    mnist/train-images-idx3-ubyte.gz   mnist/train-labels-idx1-ubyte.gz
    mnist/t10k-images-idx3-ubyte.gz    mnist/t10k-labels-idx1-ubyte.gz
    ptb/train.txt  ptb/valid.txt  ptb/test.txt
    cifar-10-batches-py/data_batch_1 ... data_batch_5, test_batch

Every helper that returns a path to a file that must exist raises
``FileNotFoundError`` naming the expected path and the command that fetches it.
"""
import os
from pathlib import Path

ENV_VAR = "NEEDLE_DATA_DIR"
DEFAULT_DIR = Path("~/.cache/needle_kernels/data")

MNIST_SPLITS = ("train", "t10k")
PTB_SPLITS = ("train", "valid", "test")
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCHES = ("test_batch",)


def data_dir(root=None):
    """The data directory: ``root`` if given, else ``$NEEDLE_DATA_DIR``, else the default cache."""
    if root is None:
        root = os.environ.get(ENV_VAR) or DEFAULT_DIR
    return Path(root).expanduser()


def fetch_command(name):
    """The shell command that downloads data set ``name`` into the data directory."""
    return f"python -m needle_kernels.data.download {name}"


def missing_file_error(path, dataset):
    """A FileNotFoundError that says which file was expected and how to get it."""
    return FileNotFoundError(
        f"{dataset} data file not found: {path}\n"
        f"Fetch it with:  {fetch_command(dataset)}\n"
        f"(the data directory is ${ENV_VAR}, default {DEFAULT_DIR}; "
        f"set {ENV_VAR} to use files stored elsewhere)"
    )


def _require(path, dataset):
    path = Path(path)
    if not path.is_file():
        raise missing_file_error(path, dataset)
    return path


def mnist_dir(root=None):
    """The ``mnist`` folder of the data directory."""
    return data_dir(root) / "mnist"


def mnist_paths(split="train", root=None):
    """(images, labels) paths of an MNIST split ("train" or "t10k"/"test"), existing or not."""
    split = "t10k" if split == "test" else split
    if split not in MNIST_SPLITS:
        raise ValueError(f"MNIST split must be one of {MNIST_SPLITS} (or 'test'), got {split!r}")
    d = mnist_dir(root)
    return d / f"{split}-images-idx3-ubyte.gz", d / f"{split}-labels-idx1-ubyte.gz"


def mnist_files(split="train", root=None):
    """(images, labels) paths of an MNIST split; FileNotFoundError if either is missing."""
    return tuple(_require(p, "mnist") for p in mnist_paths(split, root))


def ptb_dir(root=None, require=True):
    """The ``ptb`` folder of the data directory; with ``require`` it must exist."""
    d = data_dir(root) / "ptb"
    if require and not d.is_dir():
        raise missing_file_error(d, "ptb")
    return d


def ptb_file(split="train", root=None):
    """Path of ``ptb/{split}.txt``; FileNotFoundError if it is missing."""
    if split not in PTB_SPLITS:
        raise ValueError(f"PTB split must be one of {PTB_SPLITS}, got {split!r}")
    return _require(data_dir(root) / "ptb" / f"{split}.txt", "ptb")


def cifar10_dir(root=None, require=True):
    """The ``cifar-10-batches-py`` folder; with ``require`` every batch file must be present."""
    d = data_dir(root) / CIFAR10_FOLDER
    if require:
        for name in CIFAR10_TRAIN_BATCHES + CIFAR10_TEST_BATCHES:
            _require(d / name, "cifar10")
    return d
