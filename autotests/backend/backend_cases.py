"""Helpers for the backend tests: loading backend modules, and the contract's cases as hypothesis strategies.

The cases themselves (buffers, strided views, special values) live beside the backends, in
``needle_kernels.backend_ndarray.contract_cases``, which the assignments that have students write
a backend grade with too; here they are driven by hypothesis, which shrinks a failing case.
"""
import importlib

import numpy as np
import pytest
from hypothesis import strategies as st

from needle_kernels.backend_ndarray.contract_cases import SPECIAL_VALUES, get, put, strided_view, view_of  # noqa: F401

PACKAGE = "needle_kernels.backend_ndarray"


def load_backend(name):
    """Import a backend module, skipping the test when it cannot run here."""
    try:
        module = importlib.import_module(f"{PACKAGE}.{name}")
    except ImportError as exc:
        if name == "ndarray_backend_cpu":
            raise  # the CPU extension must build; a missing .so is a failure
        pytest.skip(f"{name} does not import: {exc}")
    available = getattr(module, "is_available", None)
    if available is not None and not available():
        reason = getattr(module, "unavailable_reason", lambda: "no device")()
        pytest.skip(f"{name} cannot run here: {reason}")
    return module


def reference():
    return importlib.import_module(f"{PACKAGE}.ndarray_backend_numpy")


class _HypothesisDraws:
    """The choices ``strided_view`` makes, drawn by hypothesis (so a failing case shrinks)."""

    def __init__(self, draw):
        self._draw = draw

    def integers(self, low, high):
        return self._draw(st.integers(low, high))

    def sampled_from(self, values):
        return self._draw(st.sampled_from(values))

    def booleans(self):
        return self._draw(st.booleans())

    def permutation(self, n):
        return tuple(self._draw(st.permutations(range(n))))


@st.composite
def strided_views(draw, max_dims=4, max_side=6, allow_broadcast=True):
    """``contract_cases.strided_view`` as a hypothesis strategy."""
    return strided_view(_HypothesisDraws(draw), max_dims, max_side, allow_broadcast)


def float_arrays(size, low=-100.0, high=100.0):
    return st.lists(st.floats(low, high, width=32), min_size=size, max_size=size).map(
        lambda v: np.array(v, dtype=np.float32)
    )
