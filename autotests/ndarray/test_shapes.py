"""The shape rules shared by NDArray and the ops, against numpy's."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from needle_kernels.shapes import broadcast_axes, broadcast_shapes, kept_shape, normalize_axes, resolve_shape

small_shapes = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


@given(a=small_shapes, b=small_shapes)
def test_broadcast_shapes_is_numpys(a, b):
    try:
        want = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ValueError, match="cannot be broadcast"):
            broadcast_shapes(a, b)
        return
    assert broadcast_shapes(a, b) == want


@given(shape=small_shapes, data=st.data())
def test_summing_broadcast_axes_undoes_a_broadcast(shape, data):
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    target = lead + tuple(data.draw(st.sampled_from([n, 3])) if n == 1 else n for n in shape)
    x = np.random.rand(*shape)
    grad = np.broadcast_to(x, target)
    summed = grad.sum(axis=broadcast_axes(shape, target)).reshape(shape)
    copies = np.prod(target) / max(np.prod(shape), 1)
    np.testing.assert_allclose(summed, x * copies)


def test_normalize_axes_and_kept_shape():
    assert normalize_axes(None, 3, "f") == (0, 1, 2)
    assert normalize_axes(-1, 3, "f") == (2,)
    assert normalize_axes((2, np.int64(0)), 3, "f") == (0, 2)
    with pytest.raises(ValueError, match="f: axis 3 is out of range"):
        normalize_axes(3, 3, "f")
    with pytest.raises(ValueError, match="repeated"):
        normalize_axes((1, -2), 3, "f")
    assert kept_shape((2, 3, 4), (0, 2)) == (1, 3, 1)


def test_resolve_shape():
    assert resolve_shape((-1, 4), (2, 6)) == (3, 4)
    with pytest.raises(ValueError, match="cannot reshape"):  # any size fits 0 * -1: ambiguous
        resolve_shape((0, -1), (0, 5))
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        resolve_shape((-1, -1), (4,))
    with pytest.raises(ValueError, match="cannot reshape"):
        resolve_shape((5, -1), (2, 6))
