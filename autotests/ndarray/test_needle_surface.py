"""The NDArray methods and module functions that needle's code and tests call, against numpy."""
import math

import numpy as np
import pytest

import needle_kernels.backend_ndarray as nd


def arr(x, device):
    return nd.array(np.asarray(x, dtype=np.float32), device=device)


def test_flat_is_a_view_that_writes_through(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = arr(x, device)
    assert a.flat.shape == (12,) and a.flat._handle is a._handle
    for j in (0, 5, 11):
        a.flat[j] += 0.25  # needle's gradient checks perturb inputs exactly like this
        x.flat[j] += 0.25
    a.flat[3] -= 2 * 1e-1
    x.flat[3] -= 2 * 1e-1
    np.testing.assert_allclose(a.numpy(), x, rtol=1e-6)
    # a contiguous view with an offset writes into its parent
    row = a[1]
    row.flat[2] = 100.0
    assert a.numpy()[1, 2] == 100.0


def test_flat_of_a_non_contiguous_view_is_refused(device):
    a = arr(np.ones((3, 4)), device)
    with pytest.raises(ValueError, match="contiguous"):
        a.permute((1, 0)).flat


class _ShapeAndSlices(nd.NDArray):
    # needle's test_ndarray.py helper, verbatim: indexing returns the normalised slices
    def __getitem__(self, idxs):
        idxs = tuple([self.process_slice(s, i) if isinstance(s, slice) else slice(s, s + 1, 1)
                      for i, s in enumerate(idxs)])
        shape = tuple([max(0, math.ceil((s.stop - s.start) / s.step)) for s in idxs])
        return shape, idxs


def ShapeAndSlices(*shape):
    return _ShapeAndSlices(np.ones(shape))


@pytest.mark.parametrize("lhs, rhs", [
    (ShapeAndSlices(4, 5, 6)[1:2, 0, 0], ShapeAndSlices(7, 7, 7)[1:2, 0, 0]),
    (ShapeAndSlices(4, 5, 6)[1:4:2, 0, 0], ShapeAndSlices(7, 7, 7)[1:3, 0, 0]),
    (ShapeAndSlices(4, 5, 6)[1:3, 2:5, 2:6], ShapeAndSlices(7, 7, 7)[:2, :3, :4]),
    (ShapeAndSlices(6, 6)[-4:, ::2], ShapeAndSlices(5, 5)[1:5, :3]),
])
def test_setitem_through_a_process_slice_subclass(device, lhs, rhs):
    (lhs_shape, lhs_slices), (rhs_shape, rhs_slices) = lhs, rhs
    assert lhs_shape == rhs_shape
    A = np.random.randn(*(sl.stop for sl in lhs_slices)).astype(np.float32)
    B = np.random.randn(*(sl.stop for sl in rhs_slices)).astype(np.float32)
    a, b = arr(A, device), arr(B, device)
    a[lhs_slices] = b[rhs_slices]
    A[lhs_slices] = B[rhs_slices]
    np.testing.assert_allclose(a.numpy(), A)


def test_process_slice_matches_numpy_indexing(device):
    a = arr(np.arange(10), device)
    for sl in (slice(None), slice(-3, None), slice(None, None, -1), slice(8, 1, -3), slice(20, -20, -1), slice(2, 2)):
        norm = a.process_slice(sl, 0)
        assert all(isinstance(x, int) for x in (norm.start, norm.stop, norm.step))
        assert list(range(norm.start, norm.stop, norm.step)) == list(range(10))[sl]


def test_make_and_as_strided_views(device):
    a = arr(np.arange(12), device)
    assert nd.NDArray.compact_strides((2, 3, 4)) == (12, 4, 1)
    m = nd.NDArray.make((3, 2), strides=(4, 1), device=device, handle=a._handle, offset=1)
    np.testing.assert_array_equal(m.numpy(), np.arange(12)[1:].reshape(-1)[np.add.outer(np.arange(3) * 4, np.arange(2))])
    assert not m.is_compact() and m.compact().is_compact()
    windows = a.as_strided((5, 3), (2, 1))
    np.testing.assert_array_equal(windows.numpy(), np.lib.stride_tricks.sliding_window_view(np.arange(12), 3)[::2])
    fresh = nd.NDArray.make((2, 3), device=device)
    fresh.fill(7.0)
    assert fresh.is_compact() and fresh.dtype == "float32" and fresh.ndim == 2 and fresh.size == 6
    np.testing.assert_array_equal(fresh.numpy(), np.full((2, 3), 7.0))


@pytest.mark.parametrize("axis, keepdims", [(0, False), (1, True), (2, False), ((0, 2), False), (None, False), (None, True)])
def test_reduce_view_out_feeds_the_reduce_kernel(device, axis, keepdims):
    x = np.random.randn(3, 4, 5).astype(np.float32)
    view, out = arr(x, device).reduce_view_out(axis, keepdims=keepdims)
    device.reduce_sum(view.compact()._handle, out._handle, view.shape[-1])
    np.testing.assert_allclose(out.numpy(), x.sum(axis=axis, keepdims=keepdims), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        arr(x, device).reduce_view_out(())


def test_ewise_or_scalar_with_functions_or_names(device):
    x = np.random.randn(2, 3).astype(np.float32)
    a = arr(x, device)
    np.testing.assert_allclose(a.ewise_or_scalar(a, device.ewise_mul, device.scalar_mul).numpy(), x * x, rtol=1e-6)
    np.testing.assert_allclose(a.ewise_or_scalar(2.5, device.ewise_mul, device.scalar_mul).numpy(), x * 2.5, rtol=1e-6)
    np.testing.assert_allclose(a.ewise_or_scalar(np.float64(3), "ewise_add", "scalar_add").numpy(), x + 3, rtol=1e-6)


def test_module_functions_named_as_needle(device):
    x = np.random.rand(2, 3).astype(np.float32) + 0.5
    a = arr(x, device)
    cases = {
        "exp": (nd.exp(a), np.exp(x)), "log": (nd.log(a), np.log(x)), "tanh": (nd.tanh(a), np.tanh(x)),
        "maximum": (nd.maximum(a, 1.0), np.maximum(x, 1.0)), "negative": (nd.negative(a), -x),
        "sum": (nd.sum(a, axis=1), x.sum(1)), "summation": (nd.summation(a, axis=0, keepdims=True), x.sum(0, keepdims=True)),
        "flip": (nd.flip(a, (0, 1)), x[::-1, ::-1]), "reshape": (nd.reshape(a, (3, 2)), x.reshape(3, 2)),
        "broadcast_to": (nd.broadcast_to(a[0:1], (4, 3)), np.broadcast_to(x[0:1], (4, 3))),
        "stack": (nd.stack([a, a * 2.0], axis=1), np.stack([x, x * 2], axis=1)),
        "full": (nd.full((2, 2), 3.0, device=device), np.full((2, 2), 3.0)),
    }
    for name, (got, want) in cases.items():
        assert got.device == device, name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, err_msg=name)
    parts = nd.split(a, 1)
    assert len(parts) == 3 and all(p._handle is a._handle for p in parts)
    np.testing.assert_array_equal(parts[2].numpy(), x[:, 2])
    assert nd.empty((4, 1), device=device).shape == (4, 1)
    assert a.to(device) is a
