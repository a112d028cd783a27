"""Kernels on a GPU flush float32 subnormals to zero (cupy compiles every kernel with -ftz=true).

The checks then hold a GPU kernel to one of two answers per element: numpy's, or the answer from
flushed inputs, flushed. Checked here with host kernels that flush as a GPU does: accepted where
the module says it flushes, refused where it says it does not, and a wrong answer refused either way.
"""
import sys
import types

import numpy as np
import pytest
from nbhelpers import COURSE

sys.path.insert(0, str(COURSE))
from coursekit.kernels import check_elementwise  # noqa: E402
from needle_kernels.backend_ndarray import ndarray_backend_numpy as host  # noqa: E402
from needle_kernels.backend_ndarray.contract_cases import flushed, nearer  # noqa: E402

TINY = np.finfo(np.float32).tiny


def test_flushed_zeroes_subnormals_keeping_their_sign_and_nothing_else():
    x = np.array([1e-40, -1e-40, TINY, -TINY, 0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e-45], np.float32)
    got = flushed(x)
    np.testing.assert_array_equal(got[:2], [0.0, 0.0])
    assert not np.signbit(got[0]) and np.signbit(got[1])
    np.testing.assert_array_equal(got[2:], np.where(np.arange(2, 11) == 10, 0.0, x[2:]))


def test_nearer_takes_per_element_the_answer_got_is_nearest_to():
    # a product of a subnormal flushed; log(1e-40) = log(0) when flushed; a subnormal moved unchanged
    # by maximum(0, -1e-45), a flushed zero
    ieee = np.array([-1.99e-38, 5.0, np.nan, np.inf, 3.0, -92.1, 0.0, 2.0], np.float32)
    flush = np.array([-0.0, 5.0, 0.0, np.inf, 4.0, -np.inf, 0.0, 0.0], np.float32)
    got = np.array([-0.0, 5.0, np.nan, np.inf, 3.9, -np.inf, -1e-45, 1.0], np.float32)
    np.testing.assert_array_equal(nearer(got, ieee, flush), [0.0, 5.0, np.nan, np.inf, 4.0, -np.inf, got[6], 2.0])


def _module(kernel, flushes, formula):
    """The numpy backend's buffers with one kernel computing ``formula`` on flushed inputs, flushing
    its result (what NVRTC's -ftz=true makes of a kernel), saying it flushes or not."""
    mod = types.ModuleType("flushing")
    for attr in ("Array", "to_numpy", "from_numpy", "fill"):
        setattr(mod, attr, getattr(host, attr))

    def run(a, b, out):
        out.array[:] = flushed(formula(flushed(a.array), flushed(b.array)))
    setattr(mod, kernel, run)
    mod.flushes_subnormals = lambda: flushes
    return mod


def test_a_kernel_that_flushes_passes_only_where_its_device_flushes():
    check_elementwise(_module("ewise_mul", True, np.multiply), "ewise_mul", large=False)
    with pytest.raises(AssertionError, match="ewise_mul of .* elements: element"):
        check_elementwise(_module("ewise_mul", False, np.multiply), "ewise_mul", large=False)


def test_a_wrong_kernel_fails_on_a_device_that_flushes():
    with pytest.raises(AssertionError, match="ewise_mul of .* elements: element"):
        check_elementwise(_module("ewise_mul", True, np.add), "ewise_mul", large=False)
