"""Helpers for the backend tests: loading backend modules, moving data, generating strided views."""
import importlib

import numpy as np
import pytest
from hypothesis import strategies as st

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


def put(module, values):
    """A module.Array holding the float32 values (any shape, stored row-major)."""
    values = np.asarray(values, dtype=np.float32)
    out = module.Array(values.size)
    module.from_numpy(values, out)
    return out


def get(module, array):
    """The whole buffer of a module.Array as a 1-D numpy array."""
    return module.to_numpy(array, (array.size,), (1,), 0)


def view_of(base, view):
    """(shape, strides, offset) in elements of a numpy view into the 1-D float32 array base."""
    item = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return view.shape, tuple(s // item for s in view.strides), offset


@st.composite
def strided_views(draw, max_dims=4, max_side=6, allow_broadcast=True):
    """A random 1-D buffer and a strided view into it.

    The view is built the way NDArray builds views: a row-major base of some
    shape, then slices with steps of either sign (offsets, negative strides,
    empty axes), a permutation of the axes, and broadcasting of length-1 axes
    (zero strides). Returns (buffer, shape, strides, offset, numpy_view).
    """
    nd = draw(st.integers(0, max_dims))
    base_shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=nd, max_size=nd)))
    size = int(np.prod(base_shape, dtype=np.int64))
    slack = draw(st.integers(0, 3))  # the view need not end at the buffer's end
    buf = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(size + slack).astype(np.float32)
    view = buf[:size].reshape(base_shape)
    index = []
    for n in base_shape:
        step = draw(st.sampled_from([1, 1, 1, 2, -1, -2, 3]))
        start = draw(st.integers(0, n - 1))
        stop = draw(st.one_of(st.none(), st.integers(-1, n)))
        if stop == -1:
            stop = None if step < 0 else 0
        index.append(slice(start, stop, step))
    view = view[tuple(index) + (Ellipsis,)]  # Ellipsis keeps a 0-d result a view
    view = view.transpose(draw(st.permutations(range(nd))))
    if allow_broadcast and nd:
        shape = list(view.shape)
        for axis in range(nd):
            if shape[axis] >= 1 and draw(st.booleans()) and draw(st.booleans()):
                view = view[(slice(None),) * axis + (slice(0, 1),)]
                shape[axis] = draw(st.integers(0, 4))
        view = np.broadcast_to(view, tuple(shape))
        if draw(st.booleans()):
            at = draw(st.integers(0, view.ndim))
            view = np.broadcast_to(np.expand_dims(view, at), view.shape[:at] + (draw(st.integers(1, 3)),) + view.shape[at:])
    shape, strides, offset = view_of(buf, view)
    return buf, shape, strides, offset, view


def float_arrays(size, low=-100.0, high=100.0):
    return st.lists(st.floats(low, high, width=32), min_size=size, max_size=size).map(
        lambda v: np.array(v, dtype=np.float32)
    )
