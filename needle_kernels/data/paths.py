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


def fetch_command(name, root=None):
    """The shell command that downloads data set ``name`` into ``root`` (default: the data directory)."""
    command = f"python -m needle_kernels.data.download {name}"
    if root is not None and Path(root).expanduser().resolve() != data_dir().resolve():
        command += f" --dir {root}"
    return command


_FOLDERS = {"mnist": "mnist", "ptb": "ptb", "cifar10": CIFAR10_FOLDER}


def _root_of(path, dataset):
    """The data directory whose layout puts ``path`` (a file of ``dataset`` or its folder) where it is.

    needle names the files as ``data/cifar-10-batches-py/data_batch_1``,
    ``data/ptb/train.txt`` and ``data/train-images-idx3-ubyte.gz``: the first
    two are this layout under ``data``, and MNIST files named without their
    ``mnist/`` folder are found in it (see ``mnist_file``). None when the
    path fits no layout.
    """
    path = Path(path)
    folder = _FOLDERS.get(dataset)
    if path.name == folder:
        return path.parent
    if path.parent.name == folder:
        return path.parent.parent
    if dataset == "mnist":
        return path.parent
    return None


def missing_file_error(path, dataset):
    """A FileNotFoundError that says which file was expected and the command that puts it there."""
    root = _root_of(path, dataset)
    if root is None:
        fetch = (f"Fetch it with:  {fetch_command(dataset, 'DIR')}\n"
                 f"(it writes DIR/{_FOLDERS.get(dataset, dataset)}/...; pass that folder)")
    else:
        fetch = f"Fetch it with:  {fetch_command(dataset, root)}"
    return FileNotFoundError(
        f"{dataset} data file not found: {path}\n{fetch}\n"
        f"(the default data directory is ${ENV_VAR}, else {DEFAULT_DIR})"
    )


def mnist_file(path):
    """``path``, or the file of that name in the ``mnist/`` folder beside it (where the
    downloader writes it) when only that one exists; FileNotFoundError naming ``path`` otherwise."""
    path = Path(path)
    if path.is_file():
        return path
    nested = path.parent / "mnist" / path.name
    if nested.is_file():
        return nested
    raise missing_file_error(path, "mnist")


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
