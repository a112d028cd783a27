"""The element-wise kernels come from one table: the Cython wrappers are generated from it."""
import importlib

import pytest

from needle_kernels.backend_ndarray import elementwise_table


def test_generated_include_is_up_to_date():
    # regenerate with: python -m needle_kernels.backend_ndarray.elementwise_table
    assert elementwise_table.GENERATED.read_text() == elementwise_table.render()


def test_the_cython_module_includes_it_and_writes_no_wrapper_by_hand():
    pyx = elementwise_table.GENERATED.with_name("ndarray_backend_cpu.pyx").read_text()
    assert f'include "{elementwise_table.GENERATED.name}"' in pyx
    for name in elementwise_table.NAMES:
        assert f"def {name}(" not in pyx, name


@pytest.mark.parametrize("module", ["ndarray_backend_numpy", "ndarray_backend_cpu", "ndarray_backend_cuda"])
def test_every_backend_has_every_table_entry(module):
    try:
        mod = importlib.import_module(f"needle_kernels.backend_ndarray.{module}")
    except ImportError as exc:
        pytest.skip(f"{module} not importable: {exc}")
    missing = [name for name in elementwise_table.NAMES if not callable(getattr(mod, name, None))]
    assert missing == []
