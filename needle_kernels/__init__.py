"""needle_kernels: a needle-style deep learning library (``import needle_kernels as ndl``).

The array API is chosen at import time by ``NEEDLE_BACKEND`` (``nd``, the
default: NDArray backends; ``np``: plain numpy), see ``backend_selection``.
"""
import importlib as _importlib

from . import backend_selection
from .backend_selection import all_devices, cpu, cpu_numpy, cuda, default_device
from . import autograd
from .autograd import Tensor, TensorTuple
from . import ops
from .ops import *
from . import init, nn, optim, viz
from .checkpoint import checkpoint

_LAZY_SUBMODULES = ("data", "apps", "backend_ndarray", "compile")


def __getattr__(name):
    # data/apps import the modules above (and apps imports data), so they are
    # loaded on first use; so is backend_ndarray where the array API has not
    # already imported it.
    if name in _LAZY_SUBMODULES:
        module = _importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
