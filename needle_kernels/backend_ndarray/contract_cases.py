"""The cases of the backend contract: flat buffers, strided views into them, special values.

A backend module is a flat table of kernels over flat float32 buffers (``Array``), with views
given as (shape, strides, offset) in elements; ``ndarray_backend_numpy`` defines what each
kernel means (``kernels.py`` lists them, ``backend_checks.py`` checks their arguments). Every
check of a backend draws its cases from here, so all of them test the same things: views with
steps of either sign, offsets, permuted axes, zero (broadcast) strides, empty and one-element
shapes.

``strided_view(draws)`` builds one case from a source of random choices: ``RandomDraws(seed)``
(numpy's generator, reproducible, what grading uses) or a hypothesis ``draw`` wrapped by the
tests (hypothesis then shrinks a failing case).
"""
import numpy as np

# values where kernels tend to differ: signed zeros, infinities, NaN, subnormals, exp's and
# log's edges, halves for rounding
SPECIAL_VALUES = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.7, 89.0, -87.5,
                           -104.0, 1e30, -1e30, 0.5, 0.625, -0.625, 9.5, -9.5], dtype=np.float32)


def flushed(values):
    """values (float32) with every subnormal replaced by a zero of its sign: what a kernel compiled
    to flush subnormals to zero (cupy compiles every kernel so) reads and writes."""
    values = np.asarray(values, dtype=np.float32)
    return np.where(np.abs(values) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), values), values)


def nearer(got, ieee, flush):
    """Per element, whichever expectation got is nearer to: ``ieee`` (numpy's float32 result) or
    ``flush`` (the result from flushed inputs, flushed). A device that flushes subnormals to zero
    is then held to one of the two answers, element by element, and still compared with the
    caller's tolerance. Where the flushed answer is a zero, a subnormal got counts as that zero:
    such a device still moves a subnormal's bits unchanged (a select, a copy), as maximum(0, -1e-45)
    returning -1e-45, since it compares them as zeros."""
    got, ieee, flush = (np.asarray(x, dtype=np.float64) for x in (got, ieee, flush))

    def gap(want):
        same = (got == want) | (np.isnan(got) & np.isnan(want))  # equal infinities too
        with np.errstate(invalid="ignore"):
            return np.where(same, 0.0, np.nan_to_num(np.abs(got - want), nan=np.inf))
    moved = (flush == 0) & (np.abs(got) < np.finfo(np.float32).tiny)
    want = np.where(gap(flush) < gap(ieee), flush, ieee)
    return np.where(moved, got, want).astype(np.float32)


class RandomDraws:
    """The choices ``strided_view`` makes, drawn from ``numpy.random.default_rng(seed)``."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def integers(self, low, high):
        """An int in [low, high] (both ends included, as hypothesis's integers)."""
        return int(self.rng.integers(low, high, endpoint=True))

    def sampled_from(self, values):
        return values[int(self.rng.integers(len(values)))]

    def booleans(self):
        return bool(self.rng.integers(2))

    def permutation(self, n):
        return tuple(int(i) for i in self.rng.permutation(n))


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


def strided_view(draws, max_dims=4, max_side=6, allow_broadcast=True):
    """A random 1-D buffer and a strided view into it: (buffer, shape, strides, offset, numpy_view).

    The view is built the way NDArray builds views: a row-major base of some shape, then
    slices with steps of either sign (offsets, negative strides, empty axes), a permutation of
    the axes, and broadcasting of length-1 axes (zero strides), so ``numpy_view`` is what the
    kernels must read or write through (shape, strides, offset).
    """
    nd = draws.integers(0, max_dims)
    base_shape = tuple(draws.integers(1, max_side) for _ in range(nd))
    size = int(np.prod(base_shape, dtype=np.int64))
    slack = draws.integers(0, 3)  # the view need not end at the buffer's end
    buf = np.random.default_rng(draws.integers(0, 2**32 - 1)).standard_normal(size + slack).astype(np.float32)
    view = buf[:size].reshape(base_shape)
    index = []
    for n in base_shape:
        step = draws.sampled_from([1, 1, 1, 2, -1, -2, 3])
        start = draws.integers(0, n - 1)
        stop = None if draws.booleans() else draws.integers(-1, n)
        if stop == -1:
            stop = None if step < 0 else 0
        index.append(slice(start, stop, step))
    view = view[tuple(index) + (Ellipsis,)]  # Ellipsis keeps a 0-d result a view
    view = view.transpose(draws.permutation(nd))
    if allow_broadcast and nd:
        shape = list(view.shape)
        for axis in range(nd):
            if shape[axis] >= 1 and draws.booleans() and draws.booleans():
                view = view[(slice(None),) * axis + (slice(0, 1),)]
                shape[axis] = draws.integers(0, 4)
        view = np.broadcast_to(view, tuple(shape))
        if draws.booleans():
            at = draws.integers(0, view.ndim)
            view = np.broadcast_to(np.expand_dims(view, at), view.shape[:at] + (draws.integers(1, 3),) + view.shape[at:])
    shape, strides, offset = view_of(buf, view)
    return buf, shape, strides, offset, view
