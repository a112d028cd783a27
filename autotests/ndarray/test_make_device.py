"""make_device: a backend written outside the package becomes a device that NDArray, autograd and nn run on."""
import types

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.backend_ndarray import NDArray
from needle_kernels.backend_ndarray import ndarray_backend_numpy as reference
from needle_kernels.backend_ndarray.device import EXTENSIONS, KERNEL_TABLE, make_device


def copy_of_reference(name, drop=()):
    """A module holding the numpy backend's table under another name, without the names in ``drop``."""
    mod = types.ModuleType(name)
    for attr in KERNEL_TABLE + EXTENSIONS + ("__tile_size__",):
        if attr not in drop:
            setattr(mod, attr, getattr(reference, attr))
    mod.__device_name__ = name
    return mod


def test_a_module_becomes_a_device_the_library_runs_on():
    dev = make_device("outside", copy_of_reference("outside"))
    assert dev != ndl.cpu_numpy() and repr(dev) == "outside()" and dev.enabled()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = ndl.Tensor(x, device=dev, requires_grad=True)
    (ndl.exp(a) @ ndl.Tensor(x.T, device=dev)).sum().backward()
    want = np.exp(x) * x.sum(0)         # d/da sum(exp(a) x^T) = exp(a) * (column sums of x)
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-5)
    assert a.device == dev and a.grad.device == dev


def test_missing_kernels_are_named():
    with pytest.raises(ValueError, match="lacks compact, matmul"):
        make_device("partial", copy_of_reference("partial", drop=("compact", "matmul")))


def test_a_missing_extension_fails_when_an_operation_needs_it():
    dev = make_device("no_axis", copy_of_reference("no_axis", drop=("reduce_sum_axis",)))
    a = NDArray(np.ones((3, 4)), device=dev)
    assert a.sum(axis=1).numpy().tolist() == [4.0, 4.0, 4.0]       # the contiguous reduction
    with pytest.raises(AttributeError, match="no_axis.*has no 'reduce_sum_axis'"):
        a.sum(axis=0)


@pytest.mark.parametrize("name", ["cpu", "cuda", "cpu_numpy", "not a name", 3])
def test_package_names_and_non_identifiers_are_refused(name):
    with pytest.raises(ValueError):
        make_device(name, copy_of_reference("x"))
