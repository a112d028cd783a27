"""Fixtures for the backend tests: every native backend module against the numpy reference.

The CUDA module is skipped, not failed, where cupy or a GPU is missing.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend_cases import load_backend, reference  # noqa: E402

BACKENDS = [
    pytest.param("ndarray_backend_cpu", id="cpu"),
    pytest.param("ndarray_backend_cuda", id="cuda", marks=pytest.mark.gpu),
]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A backend module that implements the kernel table."""
    return load_backend(request.param)


@pytest.fixture
def ref():
    """The numpy reference backend, which defines the table."""
    return reference()


@pytest.fixture
def cpu():
    """The Cython + OpenMP backend, restored to its default threads and micro-kernel afterwards."""
    module = load_backend("ndarray_backend_cpu")
    threads = module.get_num_threads()
    yield module
    module.set_num_threads(threads)
    module.set_isa(None)
