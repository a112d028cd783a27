"""Data loading: datasets, the DataLoader, transforms, downloads and sample files."""
from . import paths
from .data_basic import DataLoader, Dataset, collate
from .data_transforms import RandomCrop, RandomFlipHorizontal, Transform
from .datasets import (
    CIFAR10Dataset,
    Corpus,
    Dictionary,
    MNISTDataset,
    NDArrayDataset,
    batchify,
    get_batch,
    parse_mnist,
)
from .loaders import load_mnist_split
from .paths import data_dir
from .synthetic import ensure_sample_data
