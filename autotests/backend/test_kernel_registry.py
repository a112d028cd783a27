"""The kernel registry (backend_ndarray/kernels.py) is the one list the backends and the course kit read."""
import inspect
import os

import numpy as np
import pytest

from needle_kernels.backend_ndarray import device, elementwise_table, kernels
from needle_kernels.backend_ndarray import ndarray_backend_cuda as cu
from needle_kernels.backend_ndarray import ndarray_backend_numpy as ref


def test_names_are_unique_and_families_known():
    assert len(kernels.BY_NAME) == len(kernels.REGISTRY)
    assert {k.family for k in kernels.REGISTRY} <= set(kernels.FAMILIES)


@pytest.mark.parametrize("k", kernels.REGISTRY, ids=lambda k: k.name)
def test_the_reference_backend_defines_each_kernel_with_its_arguments(k):
    fn = getattr(ref, k.name)
    assert str(inspect.signature(fn)) == f"({k.args})"


def test_device_lists_are_the_registry():
    assert device.KERNEL_TABLE == kernels.TABLE
    assert device.EXTENSIONS == kernels.EXTENSIONS
    assert not set(kernels.TABLE) & set(kernels.EXTENSIONS)


def test_generated_cython_wrappers_are_the_registry_entries_with_a_c_operation():
    assert elementwise_table.NAMES == tuple(k.name for k in kernels.REGISTRY if k.c_op)


def test_cuda_loader_launches_the_registry_kernels_of_each_source():
    for source, names in kernels.cuda_sources().items():
        assert os.path.exists(os.path.join(os.path.dirname(cu.__file__), "cuda", source))
        assert set(names) <= set(cu.KERNELS[source])


@pytest.mark.parametrize("k", [k for k in kernels.REGISTRY if k.numpy], ids=lambda k: k.name)
def test_elementwise_formulas_match_the_reference_backend(k):
    rng = np.random.default_rng(0)
    a = rng.random(17).astype(np.float32) + 0.5
    b = rng.random(17).astype(np.float32) - 0.25
    args = {"ewise": (a, b), "scalar": (a, np.float32(2.0)), "unary": (a,)}[k.family]
    arrays = [ref.Array(17) for _ in range(2)]
    for arr, x in zip(arrays, args):
        if isinstance(x, np.ndarray):
            ref.from_numpy(x, arr)
    out = ref.Array(17)
    kernel_args = {"ewise": (arrays[0], arrays[1]), "scalar": (arrays[0], 2.0), "unary": (arrays[0],)}[k.family]
    getattr(ref, k.name)(*kernel_args, out)
    got = ref.to_numpy(out, (17,), (1,), 0)
    np.testing.assert_allclose(got, np.asarray(k.numpy(*args), dtype=np.float32), rtol=1e-6, atol=1e-6)


def test_the_cuda_module_defines_each_kernel_with_a_cuda_source():
    missing = [k.name for k in kernels.REGISTRY if k.cuda and not callable(getattr(cu, k.name, None))]
    assert not missing


def test_the_package_exports_the_fused_functions():
    import needle_kernels.backend_ndarray as nd
    from needle_kernels.backend_ndarray import ndarray_fused

    for name in kernels.FUSED_FUNCTIONS:
        assert getattr(nd, name) is getattr(ndarray_fused, name)
