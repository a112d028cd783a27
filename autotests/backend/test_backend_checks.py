"""The argument checks live once, in backend_checks, and every backend uses those same functions."""
import importlib

import pytest

from needle_kernels.backend_ndarray import backend_checks

SHARED = ("check_view", "check_size", "check_scalar", "check_same_size", "check_col2im", "prod")


@pytest.mark.parametrize("module", ["ndarray_backend_numpy", "ndarray_backend_cpu", "ndarray_backend_cuda"])
def test_backends_use_the_shared_checks(module):
    try:
        mod = importlib.import_module(f"needle_kernels.backend_ndarray.{module}")
    except ImportError as exc:  # cupy missing: the CUDA module cannot even be imported here
        pytest.skip(f"{module} not importable: {exc}")
    for name in SHARED:
        assert getattr(mod, name) is getattr(backend_checks, name), (module, name)
    assert mod._check_matmul is backend_checks.check_matmul


def test_a_bad_view_is_named():
    with pytest.raises(ValueError, match="out: view shape=.*outside a buffer of 5"):
        backend_checks.check_view(5, (2, 3), (3, 1), 0, what="out")
