"""NDArray behaviour on every enabled device, checked against numpy.

Views (reshape, permute, broadcast_to, slicing, flip) must share the buffer;
everything else must equal numpy's answer on the same data.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import needle_kernels.backend_ndarray as nd

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def arr(x, device):
    return nd.array(np.asarray(x, dtype=np.float32), device=device)


def close(a, b, tol=1e-5):
    a = a.numpy() if isinstance(a, nd.NDArray) else a
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    assert a.shape == np.shape(b)


def same_buffer(a, b):
    return a._handle.ptr() == b._handle.ptr()


# ------------------------------------------------------------------ views
def test_views_share_memory(device):
    a = arr(np.arange(24).reshape(2, 3, 4), device)
    for view in (a.reshape(6, 4), a.permute((2, 0, 1)), a[:, 1:, ::2], a.flip((1,)),
                 a[0].broadcast_to((5, 3, 4)), a.as_strided((3, 2), (4, 1))):
        assert same_buffer(view, a)
    assert not same_buffer(a.pad(((0, 0), (1, 1), (0, 0))), a)
    assert not same_buffer(a.permute((1, 0, 2)).compact(), a)


def test_compact_of_compact_is_itself(device):
    a = arr(np.ones((3, 4)), device)
    assert a.compact() is a
    assert not a[1:].is_compact() and a[1:].compact().is_compact()


@given(shape=shapes, data=st.data())
def test_getitem_matches_numpy(device, shape, data):
    x = np.random.randn(*shape).astype(np.float32)
    idx = []
    for n in shape:
        kind = data.draw(st.sampled_from(["int", "slice"]))
        if kind == "int":
            idx.append(data.draw(st.integers(-n, n - 1)))
        else:
            idx.append(slice(data.draw(st.none() | st.integers(-n - 1, n + 1)),
                             data.draw(st.none() | st.integers(-n - 1, n + 1)),
                             data.draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]))))
    idx = tuple(idx)
    close(arr(x, device)[idx], x[idx])


@given(shape=shapes, data=st.data())
def test_permute_and_compact(device, shape, data):
    x = np.random.randn(*shape).astype(np.float32)
    perm = data.draw(st.permutations(range(len(shape))))
    close(arr(x, device).permute(perm).compact(), x.transpose(perm))


@given(shape=shapes, data=st.data())
def test_broadcast_to(device, shape, data):
    small = tuple(n if data.draw(st.booleans()) else 1 for n in shape)
    x = np.random.randn(*small).astype(np.float32)
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    close(arr(x, device).broadcast_to(lead + shape), np.broadcast_to(x, lead + shape))


def test_reshape_of_non_contiguous_copies_and_infers(device):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = arr(x, device).permute((1, 0))
    close(a.reshape(-1, 2), x.T.reshape(-1, 2))
    close(arr(x, device)[1:3].reshape(3, 4), x[1:3].reshape(3, 4))
    rows = arr(x, device)
    assert same_buffer(rows[1:3].reshape(12), rows)  # a contiguous slice reshapes as a view


def test_flip_and_pad(device):
    x = np.random.randn(3, 4, 5).astype(np.float32)
    for axes in [(0,), (1, 2), (0, 1, 2)]:
        close(arr(x, device).flip(axes), np.flip(x, axes))
    pw = ((1, 0), (0, 2), (3, 1))
    close(arr(x, device).pad(pw), np.pad(x, pw))
    close(arr(x, device)[:, ::2].flip((1,)), np.flip(x[:, ::2], 1))


@pytest.mark.parametrize("order", [(0, 2, 3, 1), (3, 2, 1, 0), (1, 0, 2, 3), (0, 1, 2, 3)])
def test_pad_of_a_transposed_view(device, order):
    # an NCHW batch seen as NHWC (and other axis orders, a size-1 axis among them) is copied
    # into the padded array from its own memory order: the same values as a compact copy's
    x = np.random.randn(2, 3, 1, 5).astype(np.float32)
    pw = ((0, 1), (2, 0), (1, 1), (0, 3))
    view = arr(x, device).permute(order)
    close(view.pad(pw), np.pad(x.transpose(order), pw))
    assert view.pad(pw).is_compact()


# ------------------------------------------------------------------ setitem
@given(shape=shapes, data=st.data())
def test_setitem_array_and_scalar(device, shape, data):
    x = np.random.randn(*shape).astype(np.float32)
    idx = tuple(slice(data.draw(st.integers(0, n - 1)), None, data.draw(st.sampled_from([1, 2, -1]))) for n in shape)
    a = arr(x, device)
    val = np.random.randn(*x[idx].shape).astype(np.float32)
    a[idx] = arr(val, device)
    x[idx] = val
    close(a, x)
    a[idx] = 7.0
    x[idx] = 7.0
    close(a, x)


def test_setitem_broadcasts_and_handles_overlap(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = arr(x, device)
    a[1:] = arr(np.array([1, 2, 3, 4]), device)
    x[1:] = np.array([1, 2, 3, 4])
    close(a, x)
    a[::-1] = a  # source and destination share the buffer
    x[::-1] = x.copy()
    close(a, x)


def test_iadd_is_in_place_like_numpy(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    a, b = arr(x, device), arr(y, device)
    alias = a
    a += b  # compact: the kernel adds into a's own buffer
    x += y
    assert a is alias
    close(a, x)
    view = a[:, 1::2]  # a strided view: the sum lands in the base array
    view += arr(np.array([10.0, 20.0]), device)  # broadcast, as numpy
    x[:, 1::2] += np.array([10.0, 20.0])
    close(a, x)
    a += a  # the same buffer on both sides
    x += x
    close(a, x)
    with pytest.raises(ValueError, match=r"cannot add shape \(2, 3, 4\) into an array of shape \(3, 4\)"):
        a += arr(np.ones((2, 3, 4)), device)


# ------------------------------------------------------------------ element-wise
BINARY = [
    (lambda a, b: a + b, np.add), (lambda a, b: a - b, np.subtract), (lambda a, b: a * b, np.multiply),
    (lambda a, b: a / b, np.divide), (lambda a, b: a.maximum(b), np.maximum),
    (lambda a, b: a == b, lambda x, y: (x == y).astype(np.float32)),
    (lambda a, b: a >= b, lambda x, y: (x >= y).astype(np.float32)),
    (lambda a, b: a < b, lambda x, y: (x < y).astype(np.float32)),
    (lambda a, b: a != b, lambda x, y: (x != y).astype(np.float32)),
]


@pytest.mark.parametrize("op,ref", BINARY)
def test_binary_ops_broadcast(device, op, ref):
    x = np.random.randn(4, 1, 3).astype(np.float32)
    y = np.random.randn(5, 1).astype(np.float32)
    y[0, 0] = x[0, 0, 0]  # make == and >= see an equal pair
    close(op(arr(x, device), arr(y, device)), ref(x, y))
    close(op(arr(x, device)[:, :, ::-1], 0.5), ref(x[:, :, ::-1], np.float32(0.5)))


def test_scalar_and_unary_ops(device):
    x = np.random.rand(3, 7).astype(np.float32) + 0.1
    a = arr(x, device)
    close(a ** 2.5, x ** 2.5, 1e-4)
    close(2.0 / a, 2.0 / x, 1e-4)
    close(1.0 - a, 1.0 - x)
    close(-a, -x)
    close(a.log(), np.log(x), 1e-4)
    close(a.exp(), np.exp(x), 1e-4)
    close(a.tanh(), np.tanh(x), 1e-4)
    close(a.permute((1, 0)).exp(), np.exp(x.T), 1e-4)
    close(a <= 0.5, (x <= 0.5).astype(np.float32))
    close(a > 0.5, (x > 0.5).astype(np.float32))


def test_elementwise_ops_keep_a_dense_transposed_layout(device):
    # an NCHW view of NHWC memory (what a convolution hands the next layer): the kernels run
    # over the buffer as it lies and the result has the same strides, no transposed copy
    x = np.random.randn(2, 3, 4, 5).astype(np.float32)
    y = np.random.randn(2, 3, 4, 5).astype(np.float32)
    a, b = arr(x, device).permute((0, 3, 1, 2)), arr(y, device).permute((0, 3, 1, 2))
    xt, yt = x.transpose(0, 3, 1, 2), y.transpose(0, 3, 1, 2)
    for got, want in [(a + b, xt + yt), (a * 2.0, xt * 2.0), (a.exp(), np.exp(xt)), (a.maximum(0.0), np.maximum(xt, 0)),
                      (nd.relu_backward(b, a), yt * (xt > 0))]:
        assert got.strides == a.strides and got.shape == a.shape
        close(got, want, 1e-5)
    # different layouts, or a view that is not the whole buffer: compact results, as before
    close(a + arr(xt, device), xt + xt)
    sliced = arr(x, device).permute((0, 3, 1, 2))[:, 1:]
    assert (sliced * 2.0).strides == (sliced * 2.0).compact().strides
    close(sliced * 2.0, xt[:, 1:] * 2.0)
    # with a view that needs a copy anyway (a cropped gradient), the copy is made in the dense
    # operand's layout and the result keeps it: one copy, none back and forth through NCHW
    z = np.random.randn(2, 5, 5, 6).astype(np.float32)
    cropped, zc = arr(z, device)[:, :, 1:4, 2:6], z[:, :, 1:4, 2:6]
    for got, want in [(a + cropped, xt + zc), (cropped + a, zc + xt), (cropped * a, zc * xt),
                      (nd.relu_backward(cropped, a), zc * (xt > 0)), (nd.relu_backward(a, cropped), xt * (zc > 0))]:
        assert got.strides == a.strides and got.shape == a.shape
        close(got, want, 1e-5)


# ------------------------------------------------------------------ reductions
@given(shape=shapes, data=st.data())
def test_reductions_over_any_axes(device, shape, data):
    x = np.random.randn(*shape).astype(np.float32)
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1)))))
    keep = data.draw(st.booleans())
    view = data.draw(st.booleans())
    a = arr(x, device)
    if view:  # the same values held in storage of any other axis order, reduced as they lie there
        perm = tuple(data.draw(st.permutations(range(len(shape)))))
        back = tuple(int(i) for i in np.argsort(perm))
        a = arr(np.ascontiguousarray(x.transpose(perm)), device).permute(back)
    close(a.sum(axes or None, keepdims=keep), x.sum(axis=axes or None, keepdims=keep), 1e-4)
    close(a.max(axes or None, keepdims=keep), x.max(axis=axes or None, keepdims=keep))


def test_sum_of_empty_and_zero_dim(device):
    a = arr(np.zeros((0, 3)), device)
    close(a.sum(axis=0), np.zeros(3))
    assert a.sum().shape == ()
    assert arr(np.ones((2, 3)), device).sum().item() == 6.0
    with pytest.raises(ValueError, match="zero-size"):
        a.max(axis=0)


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((1, 1), (1, 1)), ((7, 33), (33, 17)),
                                   ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)),
                                   ((2, 1, 3, 4), (5, 4, 6)), ((4,), (4, 3)), ((3, 4), (4,)),
                                   ((64, 64), (64, 64))])
def test_matmul_matches_numpy(device, sa, sb):
    x = np.random.randn(*sa).astype(np.float32)
    y = np.random.randn(*sb).astype(np.float32)
    close(arr(x, device) @ arr(y, device), x @ y, 1e-4)


def test_matmul_of_views(device):
    x = np.random.randn(6, 5).astype(np.float32)
    a = arr(x, device)
    close(a.permute((1, 0)) @ a, x.T @ x, 1e-4)
    close(a[::2] @ a[1:].permute((1, 0)), x[::2] @ x[1:].T, 1e-4)


@pytest.mark.parametrize("m, n, p", [(6, 5, 4), (1, 5, 4), (6, 1, 4), (6, 5, 1), (1, 1, 1)])
def test_matmul_of_transposed_matrices(device, m, n, p):
    # compact matrices and transposes of compact ones go to the kernels as they lie, including
    # the shapes with an axis of 1, where a row-major and a transposed view share strides
    x, y = np.random.randn(m, n).astype(np.float32), np.random.randn(n, p).astype(np.float32)
    a, b = arr(x, device), arr(y, device)
    at, bt = arr(x.T.copy(), device).permute((1, 0)), arr(y.T.copy(), device).permute((1, 0))
    for left, right in [(a, b), (at, b), (a, bt), (at, bt)]:
        close(left @ right, x @ y, 1e-4)


def test_matmul_tiled(device):
    t = device.__tile_size__
    x = np.random.randn(2 * t, 3 * t).astype(np.float32)
    y = np.random.randn(3 * t, t).astype(np.float32)
    close(arr(x, device).matmul_tiled(arr(y, device)), x @ y, 1e-4)


# ------------------------------------------------------------------ module functions
def test_numpy_named_functions(device):
    x = np.random.randn(2, 3, 4).astype(np.float32)
    a = arr(x, device)
    close(nd.transpose(a), np.transpose(x))
    close(nd.transpose(a, (1, 0, 2)), np.transpose(x, (1, 0, 2)))
    close(nd.swapaxes(a, -1, -2), np.swapaxes(x, -1, -2))
    close(nd.stack([a, a * 2], axis=1), np.stack([x, x * 2], axis=1))
    close(nd.concatenate([a, a[:, :1]], axis=1), np.concatenate([x, x[:, :1]], axis=1))
    close(nd.maximum(a, 0.0), np.maximum(x, 0))
    close(nd.sum(a, axis=(0, 2)), x.sum(axis=(0, 2)), 1e-5)
    close(nd.as_strided(a.compact(), (3, 2), (4, 1)), x.ravel()[np.arange(3)[:, None] * 4 + np.arange(2)])


def test_transfer_between_devices(device):
    x = np.random.randn(3, 4).astype(np.float32)
    a = arr(x, device)
    b = a.to(nd.cpu_numpy()).to(device)
    close(b, x)
    assert b.device == device
    assert a.to(device) is a
    c = nd.array(a)
    assert not same_buffer(c, a)


def test_device_constructors_follow_numpy_seed(device):
    np.random.seed(3)
    r = device.randn(2, 3)
    np.random.seed(3)
    close(r, np.random.randn(2, 3).astype(np.float32))
    close(device.one_hot(4, [1, 3]), np.eye(4, dtype=np.float32)[[1, 3]])
    close(device.full((2, 2), 3.0), np.full((2, 2), 3.0))
    assert str(device) == device.name + "()"


# ------------------------------------------------------------------ errors
def test_errors_name_the_problem(device):
    a = arr(np.ones((2, 3)), device)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        a + arr(np.ones((4, 5)), device)
    with pytest.raises(ValueError, match="not aligned"):
        a @ a
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(4, 2)
    with pytest.raises(IndexError, match="out of bounds"):
        a[2]
    with pytest.raises(ValueError, match="float32 only"):
        nd.array([1, 2], dtype="float64", device=device)
    with pytest.raises(ValueError, match="broadcast"):
        a.broadcast_to((3, 3))
    with pytest.raises(ValueError, match="permutation"):
        a.permute((0, 0))
    with pytest.raises(ValueError, match="outside a buffer"):
        a.as_strided((3, 3), (3, 1))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        a.sum(axis=2)
    with pytest.raises(ValueError, match=r"shape \(3,\) to a view of shape \(2, 2\)"):
        a[:, :2] = arr(np.ones(3), device)
    with pytest.raises(TypeError):
        nd.array(["a", "b"], device=device)
