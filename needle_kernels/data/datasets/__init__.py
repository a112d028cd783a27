from .cifar10_dataset import CIFAR10Dataset, read_cifar_batch
from .mnist_dataset import MNISTDataset, parse_mnist, read_idx_images, read_idx_labels
from .ndarray_dataset import NDArrayDataset
from .ptb_dataset import Corpus, Dictionary, batchify, get_batch
