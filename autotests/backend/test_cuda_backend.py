"""The CUDA backend's kernels against the numpy reference, at launch-shape edge cases.

Every test runs twice:

* ``gpu``: the real backend on a CUDA device (marked ``gpu``, skipped
  without one);
* ``host``: the same module and the same ``.cu`` sources on the CPU, with
  ``needle_kernels.backend_ndarray.cupy_host`` in place of cupy: it compiles
  each source with g++ behind a header that defines the CUDA built-ins, runs
  the threads of a block in turns between barriers and warp shuffles, and
  passes kernel arguments as cuLaunchKernel does. Buffers carry NaN guard
  zones checked after every launch, so an out-of-bounds write fails the
  test. This checks index arithmetic, bounds checks, grid-stride loops,
  barriers and argument packing on machines without a GPU; it cannot check
  timing, occupancy or memory-model races.

The grid is capped at a few blocks (``MAX_BLOCKS``) so that every kernel's
grid-stride loops run more than once.
"""
import re
import shutil
import sys

import numpy as np
import pytest

from needle_kernels.backend_ndarray import cupy_host
from needle_kernels.backend_ndarray import ndarray_backend_cuda as cu
from needle_kernels.backend_ndarray import ndarray_backend_numpy as ref


# ---------------------------------------------------------------- fixtures

@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "host"])
def be(request, monkeypatch):
    """The CUDA backend module, on the GPU or on the host stand-in for cupy."""
    monkeypatch.setattr(cu, "MAX_BLOCKS", 3)
    if request.param == "gpu":
        if not cu.is_available():
            pytest.skip(f"no GPU: {cu.unavailable_reason()}")
        yield cu
        return
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    monkeypatch.setitem(sys.modules, "cupy", cupy_host)
    monkeypatch.setattr(cu, "_availability", None)  # probed again, on the stand-in
    monkeypatch.setattr(cu, "_modules", {})
    monkeypatch.setattr(cu, "_functions", {})
    yield cu


def _put(be, values):
    values = np.asarray(values, dtype=np.float32).ravel()
    arr = be.Array(values.size)
    be.from_numpy(values, arr)
    return arr


def _get(be, arr):
    return be.to_numpy(arr, (arr.size,), (1,), 0)


def _ref(values):
    values = np.asarray(values, dtype=np.float32).ravel()
    arr = ref.Array(values.size)
    ref.from_numpy(values, arr)
    return arr


rng = np.random.default_rng(0)


# ---------------------------------------------------------------- element-wise

EWISE = ["ewise_add", "ewise_mul", "ewise_div", "ewise_maximum", "ewise_eq", "ewise_ge",
         "ewise_relu_backward", "ewise_tanh_backward", "ewise_sigmoid_backward"]
SCALAR = ["scalar_add", "scalar_mul", "scalar_div", "scalar_power", "scalar_maximum", "scalar_eq", "scalar_ge"]
UNARY = ["ewise_log", "ewise_exp", "ewise_tanh"]


@pytest.mark.parametrize("size", [1, 255, 257, 1000])
def test_elementwise_matches_reference(be, size):
    x = rng.standard_normal(size).astype(np.float32)
    y = rng.standard_normal(size).astype(np.float32)
    y[::3] = x[::3]  # equal pairs for eq/ge
    pos = np.abs(x) + 0.1
    for name in EWISE:
        out, expect = be.Array(size), ref.Array(size)
        getattr(be, name)(_put(be, x), _put(be, y), out)
        getattr(ref, name)(_ref(x), _ref(y), expect)
        np.testing.assert_allclose(_get(be, out), expect.array, rtol=1e-6, err_msg=name)
    for name in SCALAR:
        src = pos if name == "scalar_power" else x
        out, expect = be.Array(size), ref.Array(size)
        getattr(be, name)(_put(be, src), 0.5, out)
        getattr(ref, name)(_ref(src), 0.5, expect)
        np.testing.assert_allclose(_get(be, out), expect.array, rtol=1e-6, err_msg=name)
    for name in UNARY:
        src = pos if name == "ewise_log" else x
        out, expect = be.Array(size), ref.Array(size)
        getattr(be, name)(_put(be, src), out)
        getattr(ref, name)(_ref(src), expect)
        np.testing.assert_allclose(_get(be, out), expect.array, rtol=2e-6, atol=1e-7, err_msg=name)


def test_elementwise_in_place_and_nan(be):
    a = _put(be, [1.0, np.nan, -2.0, 3.0])
    be.ewise_add(a, a, a)  # output aliasing the inputs
    np.testing.assert_array_equal(_get(be, a), [2.0, np.nan, -4.0, 6.0])
    out = be.Array(4)
    be.ewise_maximum(a, _put(be, [np.nan, 0.0, 0.0, 0.0]), out)
    np.testing.assert_array_equal(_get(be, out), [np.nan, np.nan, 0.0, 6.0])
    be.scalar_power(_put(be, [-2.0, 2.0, 0.0, 4.0]), 2.0, out)
    np.testing.assert_array_equal(_get(be, out), [4.0, 4.0, 0.0, 16.0])


def test_fill_and_grid_stride(be, monkeypatch):
    monkeypatch.setattr(cu, "MAX_BLOCKS", 1)
    out = be.Array(4 * 3 * cu.THREADS + 5)  # one block walks the array's float4s three times, then the tail
    be.fill(out, 2.5)
    np.testing.assert_array_equal(_get(be, out), 2.5)
    assert be.last_launch() == f"grid=(1,1,1) block=({cu.THREADS},1,1)"
    be.fill(be.Array(0), 1.0)  # nothing to launch


# ---------------------------------------------------------------- strided copies

def _random_view(shape, rng):
    """A view of a larger buffer with mixed-sign strides, one zero stride and an offset."""
    ndim = len(shape)
    strides, extent = [], 1
    for k in reversed(range(ndim)):
        strides.insert(0, extent * int(rng.choice([1, -1])))
        extent *= shape[k] + int(rng.integers(0, 2))
    if ndim > 1:
        strides[int(rng.integers(0, ndim))] = 0  # a broadcast dimension
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    offset = -lo + int(rng.integers(0, 3))
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return tuple(strides), offset, hi + 1 + int(rng.integers(0, 3))


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 1, 4), (2, 3, 2, 3, 2, 1, 2, 3), (5, 33, 2)])
def test_compact_and_setitem_match_reference(be, shape):
    local = np.random.default_rng(len(shape))
    strides, offset, buf = _random_view(shape, local)
    data = local.standard_normal(buf).astype(np.float32)
    n = ref.prod(shape)

    out, expect = be.Array(n), ref.Array(n)
    be.compact(_put(be, data), out, shape, strides, offset)
    ref.compact(_ref(data), expect, shape, strides, offset)
    np.testing.assert_array_equal(_get(be, out), expect.array)
    np.testing.assert_array_equal(be.to_numpy(_put(be, data), shape, strides, offset),
                                  ref.to_numpy(_ref(data), shape, strides, offset))

    # ewise_setitem needs distinct positions: row-major, flipped on the first axis, shifted by one.
    wstrides = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    woffset = 1
    if shape:
        woffset += (shape[0] - 1) * wstrides[0]
        wstrides[0] = -wstrides[0]
    src = local.standard_normal(n).astype(np.float32)
    tdata = local.standard_normal(n + 2).astype(np.float32)
    target, expect = _put(be, tdata), _ref(tdata)
    be.ewise_setitem(_put(be, src), target, shape, tuple(wstrides), woffset)
    ref.ewise_setitem(_ref(src), expect, shape, tuple(wstrides), woffset)
    np.testing.assert_array_equal(_get(be, target), expect.array)

    # scalar_setitem may repeat positions (the zero stride): every one gets the value.
    target, expect = _put(be, data), _ref(data)
    be.scalar_setitem(n, -7.0, target, shape, strides, offset)
    ref.scalar_setitem(n, -7.0, expect, shape, strides, offset)
    np.testing.assert_array_equal(_get(be, target), expect.array)


def test_compact_rank_limit_and_bad_views(be):
    a = _put(be, np.arange(1024))
    shape, strides = (2,) * 9, tuple(2 ** k for k in range(9))  # nine dimensions that cannot merge
    with pytest.raises(ValueError, match="at most 8"):
        be.compact(a, be.Array(512), shape, strides, 0)
    out = be.Array(512)
    be.compact(a, out, shape, tuple(reversed(strides)), 0)  # row-major: merges to one dimension
    np.testing.assert_array_equal(_get(be, out), np.arange(512))
    with pytest.raises(ValueError, match="outside a buffer"):
        be.compact(a, be.Array(4), (4,), (1,), 1021)
    with pytest.raises(ValueError, match="out has 3 elements"):
        be.compact(a, be.Array(3), (4,), (1,), 0)
    with pytest.raises(ValueError, match="CUDA backend Array"):
        be.compact(_ref(np.arange(4)), be.Array(4), (4,), (1,), 0)


# ---------------------------------------------------------------- matmul

# n and p multiples of 4 take the four-float loads and stores; the others the element-wise ones
@pytest.mark.parametrize("m,n,p", [(1, 1, 1), (1, 5, 1), (63, 65, 129), (64, 64, 64), (130, 7, 67), (3, 0, 4),
                                   (129, 36, 132), (1, 4, 4), (257, 12, 8)])
def test_matmul_matches_reference(be, m, n, p):
    a = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal((n, p)).astype(np.float32)
    out = be.Array(m * p)
    be.matmul(_put(be, a), _put(be, b), out, m, n, p)
    np.testing.assert_allclose(_get(be, out).reshape(m, p), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_batched_and_tiled(be):
    # more batches than the capped grid's z; element-wise and four-float loads
    for batch, m, n, p in [(5, 17, 33, 9), (5, 9, 20, 136)]:
        a = rng.standard_normal((batch, m, n)).astype(np.float32)
        b = rng.standard_normal((batch, n, p)).astype(np.float32)
        out = be.Array(batch * m * p)
        be.matmul_batched(_put(be, a), _put(be, b), out, batch, m, n, p)
        np.testing.assert_allclose(_get(be, out).reshape(batch, m, p), a @ b, rtol=1e-4, atol=1e-4)

    t = be.__tile_size__
    m, n, p = 9 * t, 3 * t, 10 * t
    a = rng.standard_normal(m * n).astype(np.float32)
    b = rng.standard_normal(n * p).astype(np.float32)
    out, expect = be.Array(m * p), ref.Array(m * p)
    be.matmul_tiled(_put(be, a), _put(be, b), out, m, n, p)
    ref.__tile_size__, saved = t, ref.__tile_size__
    try:
        ref.matmul_tiled(_ref(a), _ref(b), expect, m, n, p)
    finally:
        ref.__tile_size__ = saved
    np.testing.assert_allclose(_get(be, out), expect.array, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="multiples of the tile size"):
        be.matmul_tiled(_put(be, a), _put(be, b), out, m + 1, n, p)
    with pytest.raises(ValueError, match=r"b \(batch=1, n=24, p=80\) has"):
        be.matmul(_put(be, a), _put(be, a), be.Array(m * p), m, n, p)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m,n,p", [(1, 1, 1), (63, 65, 129), (130, 7, 68), (3, 0, 4)])
def test_matmul_t_and_matmul_bias(be, m, n, p, trans_a, trans_b):
    a = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal((n, p)).astype(np.float32)
    bias = rng.standard_normal(p).astype(np.float32)
    out = be.Array(m * p)
    be.matmul_t(_put(be, a.T if trans_a else a), _put(be, b.T if trans_b else b), out, m, n, p, trans_a, trans_b)
    np.testing.assert_allclose(_get(be, out).reshape(m, p), a @ b, rtol=1e-4, atol=1e-4)
    be.matmul_bias(_put(be, a), _put(be, b), _put(be, bias), out, m, n, p)
    np.testing.assert_allclose(_get(be, out).reshape(m, p), a @ b + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_rows,rows,dim", [(1, 1, 1), (10, 700, 3), (5000, 300, 64), (4, 0, 2)])
def test_embedding_gather_and_scatter(be, num_rows, rows, dim):
    # repeated ids add into one row (atomically on a GPU); more elements than the capped grid
    ids = rng.integers(0, num_rows, rows)
    table = rng.standard_normal((num_rows, dim)).astype(np.float32)
    g = rng.standard_normal((rows, dim)).astype(np.float32)
    out = be.Array(rows * dim)
    be.embedding_gather(_put(be, table), _put(be, ids), out, num_rows, rows, dim)
    np.testing.assert_array_equal(_get(be, out).reshape(rows, dim), table[ids])
    grad = be.Array(num_rows * dim)
    be.fill(grad, 7.0)  # scatter overwrites what out held
    be.embedding_scatter(_put(be, g), _put(be, ids), grad, num_rows, rows, dim)
    expect = np.zeros((num_rows, dim))
    np.add.at(expect, ids, g.astype(np.float64))
    np.testing.assert_allclose(_get(be, grad).reshape(num_rows, dim), expect, rtol=1e-5, atol=1e-5)


@pytest.fixture
def host_reads(be, monkeypatch):
    """How many times a device array is copied back to the host (on the stand-in: its get())."""
    if sys.modules.get("cupy") is not cupy_host:
        return []  # on a GPU, not counted
    reads = []
    get = cupy_host.ndarray.get
    monkeypatch.setattr(cupy_host.ndarray, "get", lambda self: reads.append(self.shape) or get(self))
    return reads


def _bad_label_raised_later(be, host_reads, launch, name, value, n):
    """``launch()`` checks its labels on the device: it returns without a copy back to the host,
    and the next synchronization raises the reference's ValueError for the first bad one; the
    one after it raises nothing."""
    launch()
    assert host_reads == []  # no copy of the labels, no wait for the GPU, at the call
    with pytest.raises(ValueError) as info:
        be.synchronize()
    assert str(info.value) == f"{name}: label {value!r} is not an integer in [0, {n})"
    be.synchronize()


@pytest.mark.parametrize("fn", ["embedding_gather", "embedding_scatter"])
@pytest.mark.parametrize("bad", [-1.0, 10.0, 2.5, float("nan")])
def test_embedding_bad_ids_raise_at_the_next_synchronization(be, host_reads, fn, bad):
    num_rows, rows, dim = 10, 7, 3
    ids = np.array([1, 4, bad, 0, 9, bad, 2], np.float32)
    table = rng.standard_normal((num_rows, dim)).astype(np.float32)
    g = rng.standard_normal((rows, dim)).astype(np.float32)
    T, I, G = _put(be, table), _put(be, ids), _put(be, g)
    out = be.Array((rows if fn == "embedding_gather" else num_rows) * dim)
    host_reads.clear()
    if fn == "embedding_gather":
        _bad_label_raised_later(be, host_reads, lambda: be.embedding_gather(T, I, out, num_rows, rows, dim), fn, bad,
                                num_rows)
        got = _get(be, out).reshape(rows, dim)
        good = ~np.isnan(ids) & (ids == np.floor(ids)) & (ids >= 0) & (ids < num_rows)
        np.testing.assert_array_equal(got[good], table[ids[good].astype(int)])
        assert np.isnan(got[~good]).all()  # never read from outside the table
    else:
        _bad_label_raised_later(be, host_reads, lambda: be.embedding_scatter(G, I, out, num_rows, rows, dim), fn, bad,
                                num_rows)
        good = ~np.isnan(ids) & (ids == np.floor(ids)) & (ids >= 0) & (ids < num_rows)
        expect = np.zeros((num_rows, dim))
        np.add.at(expect, ids[good].astype(int), g[good].astype(np.float64))  # the bad rows added nowhere
        np.testing.assert_allclose(_get(be, out).reshape(num_rows, dim), expect, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("n_out,r", [(1, 1), (5, 2), (4, 31), (3, 33), (2, 300), (7, 1025)])
def test_reduce_rows(be, n_out, r):
    x = rng.standard_normal(n_out * r).astype(np.float32)
    for op in ("sum", "max"):
        out = be.Array(n_out)
        getattr(be, f"reduce_{op}")(_put(be, x), out, r)
        expect = getattr(x.reshape(n_out, r), op)(axis=1)
        np.testing.assert_allclose(_get(be, out), expect, rtol=1e-5, atol=1e-5, err_msg=op)


@pytest.mark.parametrize("n_out,r", [(1, 1000), (3, 777), (2, 129), (1, 5)])
def test_reduce_long_rows_in_parts(be, monkeypatch, n_out, r):
    """Few long rows are cut into parts reduced by blocks of their own, then the partials:
    parts of 64 here, the last one shorter; a NaN in one part reaches the row's max."""
    monkeypatch.setattr(cu, "ROW_PART", 64)
    monkeypatch.setattr(cu, "ROW_BLOCKS", 8)
    x = rng.standard_normal(n_out * r).astype(np.float32)
    x[-2] = np.nan if r > 2 else x[-2]
    for op in ("sum", "max"):
        out = be.Array(n_out)
        getattr(be, f"reduce_{op}")(_put(be, x), out, r)
        expect = getattr(x.reshape(n_out, r), op)(axis=1)
        np.testing.assert_allclose(_get(be, out), expect, rtol=1e-5, atol=1e-5, err_msg=op)
    parts = cu._row_parts(n_out, r)
    assert parts == (1 if r < 128 else min(-(-r // 64), -(-8 // n_out)))


@pytest.mark.parametrize("outer,r,inner", [(2, 3, 1), (3, 5, 7), (1, 1, 40), (2, 100, 33), (4, 9, 65), (0, 3, 5)])
def test_reduce_axis(be, outer, r, inner):
    x = rng.standard_normal(outer * r * inner).astype(np.float32)
    for op in ("sum", "max"):
        out = be.Array(outer * inner)
        getattr(be, f"reduce_{op}_axis")(_put(be, x), out, outer, r, inner)
        expect = getattr(x.reshape(outer, r, inner), op)(axis=1).ravel()
        np.testing.assert_allclose(_get(be, out), expect, rtol=1e-5, atol=1e-5, err_msg=op)


def test_reduce_max_nan_and_infinity(be):
    x = np.array([-np.inf, -np.inf, 1.0, np.nan, 3.0, 2.0], dtype=np.float32)
    out = be.Array(3)
    be.reduce_max(_put(be, x), out, 2)
    np.testing.assert_array_equal(_get(be, out), [-np.inf, np.nan, 3.0])
    with pytest.raises(ValueError, match="reduce_size must be >= 1"):
        be.reduce_sum(_put(be, x), out, 0)


# ---------------------------------------------------------------- fused extensions

@pytest.mark.parametrize("size", [1, 255, 1000])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_update_matches_reference(be, size, weight_decay):
    p, g, m = (rng.standard_normal(size).astype(np.float32) for _ in range(3))
    v = rng.random(size).astype(np.float32)
    args = (0.01, 0.9, 0.999, 1e-8, weight_decay, 1 - 0.9 ** 3, 1 - 0.999 ** 3)
    bm, bv, out = _put(be, m), _put(be, v), be.Array(size)
    be.adam_update(_put(be, p), _put(be, g), bm, bv, out, *args)
    rm, rv, rout = _ref(m), _ref(v), ref.Array(size)
    ref.adam_update(_ref(p), _ref(g), rm, rv, rout, *args)
    for got, want in [(out, rout), (bm, rm), (bv, rv)]:
        np.testing.assert_allclose(_get(be, got), want.array, rtol=1e-5, atol=1e-7)
    bp = _put(be, p)  # out aliasing param
    be.adam_update(bp, _put(be, g), _put(be, m), _put(be, v), bp, *args)
    np.testing.assert_allclose(_get(be, bp), rout.array, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_update_matches_reference(be, momentum):
    size = 777
    p, g, u = (rng.standard_normal(size).astype(np.float32) for _ in range(3))
    bu, ru = (_put(be, u), _ref(u)) if momentum else (None, None)
    out, rout = be.Array(size), ref.Array(size)
    be.sgd_update(_put(be, p), _put(be, g), bu, out, 0.1, momentum, 0.01)
    ref.sgd_update(_ref(p), _ref(g), ru, rout, 0.1, momentum, 0.01)
    np.testing.assert_allclose(_get(be, out), rout.array, rtol=1e-6, atol=1e-7)
    if momentum:
        np.testing.assert_allclose(_get(be, bu), ru.array, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="sizes differ"):
        be.sgd_update(_put(be, p), _put(be, g[:-1]), bu, out, 0.1, momentum, 0.0)


@pytest.mark.parametrize("n,h,w,c,k,s", [(1, 3, 3, 1, 3, 1), (2, 7, 6, 3, 3, 2), (2, 9, 9, 2, 7, 4), (1, 5, 8, 33, 2, 3)])
def test_col2im_matches_reference(be, n, h, w, c, k, s):
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    cols = rng.standard_normal(n * ho * wo * k * k * c).astype(np.float32)
    out, expect = be.Array(n * h * w * c), ref.Array(n * h * w * c)
    be.fill(out, np.nan)  # every element must be written, covered or not
    be.col2im(_put(be, cols), out, n, h, w, c, k, s)
    ref.col2im(_ref(cols), expect, n, h, w, c, k, s)
    np.testing.assert_array_equal(_get(be, out), expect.array)
    with pytest.raises(ValueError, match="cols"):
        be.col2im(_put(be, cols[:-1]), out, n, h, w, c, k, s)


# ---------------------------------------------------------------- implicit convolution

# (n, h, w, c, k, stride, pad_h, pad_w, ho, wo, c_out). Windows reaching past the bottom or right
# edge by more than the padding on top or left (asymmetric), more pixels and more output channels
# or taps than the capped grid's tiles cover (the grid-stride loops over tiles run more than
# once), and enough pixels for the weight gradient to cut them into more runs than the grid's z.
IMPLICIT_GEOMETRIES = [
    pytest.param((2, 5, 6, 3, 1, 1, 0, 0, 5, 6, 4), id="k1"),
    pytest.param((2, 9, 7, 5, 3, 1, 1, 1, 9, 7, 70), id="k3-same"),
    pytest.param((1, 8, 9, 4, 3, 2, 2, 0, 5, 5, 6), id="k3-s2-asymmetric"),
    pytest.param((2, 20, 17, 3, 7, 4, 3, 2, 6, 5, 9), id="k7-s4-asymmetric"),
    pytest.param((2, 12, 12, 2, 3, 1, 0, 3, 12, 11, 200), id="wide-c_out"),
    pytest.param((1, 6, 6, 5, 7, 1, 3, 3, 6, 6, 3), id="k7-many-taps"),
    pytest.param((2, 34, 34, 3, 3, 1, 1, 1, 34, 34, 5), id="many-pixels"),
]


def _implicit_image(n, h, w, c, layout, local):
    """(buffer, shape, strides, offset) of an NHWC image view: a compact NHWC batch, or a compact
    NCHW batch after a few other elements, read transposed."""
    if layout == "nhwc":
        return local.standard_normal(n * h * w * c).astype(np.float32), (n, h, w, c), (h * w * c, w * c, c, 1), 0
    offset = 5
    data = local.standard_normal(offset + n * c * h * w + 3).astype(np.float32)
    return data, (n, h, w, c), (c * h * w, w, 1, h * w), offset


def _implicit_case(geometry, layout):
    n, h, w, c, k, s, pad_h, pad_w, ho, wo, c_out = geometry
    local = np.random.default_rng(sum(geometry) + len(layout))
    data, shape, strides, offset = _implicit_image(n, h, w, c, layout, local)
    return data, (shape, strides, offset), (k, s, pad_h, pad_w, ho, wo, c_out), local


@pytest.mark.parametrize("fn", ["conv_implicit", "conv_implicit_weight_grad"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("geometry", IMPLICIT_GEOMETRIES)
def test_conv_implicit_matches_reference(be, geometry, layout, fn):
    data, view, conv, local = _implicit_case(geometry, layout)
    n, h, w, c, k, s, pad_h, pad_w, ho, wo, c_out = geometry
    pixels, taps = n * ho * wo, k * k * c
    # the forward multiplies the weight (taps, c_out), summing over the taps; the weight gradient
    # the output's gradient (pixels, c_out), summing over the pixels: float32 sums in another order
    operand_rows, out_rows, summed = (taps, pixels, taps) if fn == "conv_implicit" else (pixels, taps, pixels)
    operand = local.standard_normal(operand_rows * c_out).astype(np.float32)
    out, expect = be.Array(out_rows * c_out), ref.Array(out_rows * c_out)
    be.fill(out, np.nan)  # every element must be written
    getattr(be, fn)(_put(be, data), *view, _put(be, operand), out, *conv)
    getattr(ref, fn)(_ref(data), *view, _ref(operand), expect, *conv)
    np.testing.assert_allclose(_get(be, out), expect.array, rtol=1e-4, atol=1e-4 * np.sqrt(summed))


def test_conv_implicit_weight_grad_runs_repeat_exactly(be, monkeypatch):
    """Short runs of pixels, many more than the grid's z, whose partial sums add up to the
    reference's, and to the same bits on every call."""
    monkeypatch.setattr(cu, "_WEIGHT_GRAD_RUN_PIXELS", 16)
    geometry = (3, 16, 15, 4, 3, 2, 1, 2, 8, 8, 7)  # 192 pixels: 12 runs of 16
    data, view, conv, local = _implicit_case(geometry, "nchw")
    n, h, w, c, k, s, pad_h, pad_w, ho, wo, c_out = geometry
    grad = local.standard_normal(n * ho * wo * c_out).astype(np.float32)
    image, gradient = _put(be, data), _put(be, grad)
    first, second = be.Array(k * k * c * c_out), be.Array(k * k * c * c_out)
    be.conv_implicit_weight_grad(image, *view, gradient, first, *conv)
    be.conv_implicit_weight_grad(image, *view, gradient, second, *conv)
    expect = ref.Array(k * k * c * c_out)
    ref.conv_implicit_weight_grad(_ref(data), *view, _ref(grad), expect, *conv)
    np.testing.assert_allclose(_get(be, first), expect.array, rtol=1e-4, atol=1e-4 * np.sqrt(n * ho * wo))
    np.testing.assert_array_equal(_get(be, second), _get(be, first))
    # the last launch adds the runs' partial sums: one thread per weight
    blocks = min(-(-first.size // cu.THREADS), cu.MAX_BLOCKS)
    assert be.last_launch() == f"grid=({blocks},1,1) block=({cu.THREADS},1,1)"


def _both(be, name, data, view, operand, out_size, conv, fill=np.nan):
    """Run ``name`` on both backends with the operand and an out of ``out_size`` filled with ``fill``;
    their outs, as numpy arrays."""
    out, expect = be.Array(out_size), ref.Array(out_size)
    be.fill(out, fill)
    expect.array[:] = fill
    getattr(be, name)(_put(be, data), *view, _put(be, operand), out, *conv)
    getattr(ref, name)(_ref(data), *view, _ref(operand), expect, *conv)
    return _get(be, out), expect.array


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_conv_implicit_empty_cases(be, layout):
    local = np.random.default_rng(3)
    # no pixels: nothing to compute; the weight gradient is zeros
    data, shape, strides, offset = _implicit_image(0, 5, 5, 3, layout, local)
    view, conv = (shape, strides, offset), (3, 1, 1, 1, 5, 5, 4)
    got, want = _both(be, "conv_implicit", data, view, np.ones(3 * 3 * 3 * 4), 0, conv)
    assert got.size == want.size == 0
    got, want = _both(be, "conv_implicit_weight_grad", data, view, np.ones(0), 3 * 3 * 3 * 4, conv)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, 0.0)
    # no output rows: the same
    data, shape, strides, offset = _implicit_image(2, 5, 5, 3, layout, local)
    view, conv = (shape, strides, offset), (3, 1, 0, 0, 0, 3, 4)
    got, want = _both(be, "conv_implicit_weight_grad", data, view, np.ones(0), 3 * 3 * 3 * 4, conv)
    np.testing.assert_array_equal(got, 0.0)
    # no output channels: nothing at all
    conv = (3, 1, 1, 1, 5, 5, 0)
    got, _ = _both(be, "conv_implicit", data, view, np.ones(0), 0, conv)
    got, _ = _both(be, "conv_implicit_weight_grad", data, view, np.ones(0), 0, conv)
    assert got.size == 0
    # no channels: X has no columns, so the convolution is zeros and its weight has no elements
    data, shape, strides, offset = _implicit_image(2, 5, 5, 0, layout, local)
    view, conv = (shape, strides, offset), (3, 2, 1, 1, 3, 3, 4)
    got, want = _both(be, "conv_implicit", data, view, np.ones(0), 2 * 3 * 3 * 4, conv)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, 0.0)
    got, want = _both(be, "conv_implicit_weight_grad", data, view, np.ones(2 * 3 * 3 * 4), 0, conv)
    assert got.size == want.size == 0


def _raises_as_reference(be, name, data, view, operand, out_size, conv):
    with pytest.raises(ValueError) as expected:
        getattr(ref, name)(_ref(data), *view, _ref(operand), ref.Array(out_size), *conv)
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        getattr(be, name)(_put(be, data), *view, _put(be, operand), be.Array(out_size), *conv)


def test_conv_implicit_bad_arguments(be):
    n, h, w, c, k, c_out = 2, 6, 5, 3, 3, 4
    data, shape, strides, offset = _implicit_image(n, h, w, c, "nchw", np.random.default_rng(4))
    view, conv = (shape, strides, offset), (k, 1, 1, 1, h, w, c_out)
    weight, grad = np.ones(k * k * c * c_out), np.ones(n * h * w * c_out)
    pixels_out, taps_out = n * h * w * c_out, k * k * c * c_out
    for name, operand, out_size in [("conv_implicit", weight, pixels_out),
                                    ("conv_implicit_weight_grad", grad, taps_out)]:
        _raises_as_reference(be, name, data, view, operand[:-1], out_size, conv)  # the operand's size
        _raises_as_reference(be, name, data, view, operand, out_size + 1, conv)  # out's size
        _raises_as_reference(be, name, data, view, operand, out_size, (0, 1, 1, 1, h, w, c_out))  # k
        _raises_as_reference(be, name, data, view, operand, out_size, (k, 1, -1, 1, h, w, c_out))  # padding
        _raises_as_reference(be, name, data, (shape, strides, offset + 4), operand, out_size, conv)  # past the end
        _raises_as_reference(be, name, data, (shape[1:], strides[1:], offset), operand, out_size, conv)  # 3-d
        _raises_as_reference(be, name, data, (shape, strides, "0"), operand, out_size, conv)  # not an integer
        with pytest.raises(ValueError, match=f"{name}: a must be a CUDA backend Array"):
            getattr(be, name)(_ref(data), *view, _put(be, operand), be.Array(out_size), *conv)


# ---------------------------------------------------------------- layer normalization

# (rows, cols): no rows, one row, one column, cols not a multiple of a warp, and more rows than
# the capped grid's blocks and more column tiles than its blocks (the grid-stride loops run
# more than once) with rows longer than a block (the threads' loops along a row too); 130 columns
# take 160 threads, whose tree halves an odd count.
LAYERNORM_SHAPES = [(0, 5), (1, 1), (1, 300), (4, 1), (7, 33), (5, 257), (9, 130)]


def _layernorm_inputs(rows, cols):
    local = np.random.default_rng(rows * 1000 + cols)
    x = (local.standard_normal((rows, cols)) * 2 + 3).astype(np.float32)  # off-centre: a two-pass variance
    weight = local.standard_normal(cols).astype(np.float32)
    bias = local.standard_normal(cols).astype(np.float32)
    return x, weight, bias


@pytest.mark.parametrize("rows,cols", LAYERNORM_SHAPES)
def test_layernorm_matches_reference(be, rows, cols):
    x, weight, bias = _layernorm_inputs(rows, cols)
    out, mean, invstd = be.Array(rows * cols), be.Array(rows), be.Array(rows)
    be.layernorm(_put(be, x), _put(be, weight), _put(be, bias), out, mean, invstd, rows, cols, 1e-5)
    launch = be.last_launch()
    rout, rmean, rinvstd = ref.Array(rows * cols), ref.Array(rows), ref.Array(rows)
    ref.layernorm(_ref(x), _ref(weight), _ref(bias), rout, rmean, rinvstd, rows, cols, 1e-5)
    np.testing.assert_allclose(_get(be, mean), rmean.array, rtol=1e-6, err_msg="mean")
    np.testing.assert_allclose(_get(be, invstd), rinvstd.array, rtol=1e-6, err_msg="invstd")
    np.testing.assert_allclose(_get(be, out), rout.array, rtol=1e-6, atol=1e-6, err_msg="out")
    if rows:  # a block per row, the row's cols in whole warps, at most THREADS
        threads = min(cu.THREADS, 32 * -(-cols // 32))
        assert launch == f"grid=({min(rows, cu.MAX_BLOCKS)},1,1) block=({threads},1,1)"
    if cols == 1 and rows:  # a row of one: zero variance, out is the bias
        np.testing.assert_array_equal(_get(be, out), np.tile(bias, rows))


@pytest.mark.parametrize("rows,cols", LAYERNORM_SHAPES)
def test_layernorm_backward_matches_reference(be, rows, cols):
    x, weight, bias = _layernorm_inputs(rows, cols)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    rout, rmean, rinvstd = ref.Array(rows * cols), ref.Array(rows), ref.Array(rows)
    ref.layernorm(_ref(x), _ref(weight), _ref(bias), rout, rmean, rinvstd, rows, cols, 1e-5)
    mean, invstd = rmean.array, rinvstd.array
    dx, dweight, dbias = be.Array(rows * cols), be.Array(cols), be.Array(cols)
    be.fill(dweight, np.nan)  # rows == 0 must still write them (zeros)
    be.fill(dbias, np.nan)
    be.layernorm_backward(_put(be, x), _put(be, dy), _put(be, mean), _put(be, invstd), _put(be, weight),
                          dx, dweight, dbias, rows, cols)
    rdx, rdweight, rdbias = ref.Array(rows * cols), ref.Array(cols), ref.Array(cols)
    ref.layernorm_backward(_ref(x), _ref(dy), _ref(mean), _ref(invstd), _ref(weight), rdx, rdweight, rdbias,
                           rows, cols)
    np.testing.assert_allclose(_get(be, dbias), rdbias.array, rtol=1e-6, atol=1e-6, err_msg="dbias")
    np.testing.assert_allclose(_get(be, dweight), rdweight.array, rtol=1e-6, atol=1e-6, err_msg="dweight")
    np.testing.assert_allclose(_get(be, dx), rdx.array, rtol=1e-6, atol=1e-6, err_msg="dx")
    if rows == 0:
        np.testing.assert_array_equal(_get(be, dweight), 0.0)
        np.testing.assert_array_equal(_get(be, dbias), 0.0)


@pytest.mark.parametrize("rows,cols", LAYERNORM_SHAPES)
def test_rmsnorm_matches_reference(be, rows, cols):
    x, weight, _ = _layernorm_inputs(rows, cols)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    out, invrms = be.Array(rows * cols), be.Array(rows)
    be.rmsnorm(_put(be, x), _put(be, weight), out, invrms, rows, cols, 1e-5)
    launch = be.last_launch()
    rout, rinvrms = ref.Array(rows * cols), ref.Array(rows)
    ref.rmsnorm(_ref(x), _ref(weight), rout, rinvrms, rows, cols, 1e-5)
    np.testing.assert_allclose(_get(be, invrms), rinvrms.array, rtol=1e-6, err_msg="invrms")
    np.testing.assert_allclose(_get(be, out), rout.array, rtol=1e-6, atol=1e-6, err_msg="out")
    if rows:  # a block per row, as the layer norm's
        threads = min(cu.THREADS, 32 * -(-cols // 32))
        assert launch == f"grid=({min(rows, cu.MAX_BLOCKS)},1,1) block=({threads},1,1)"
    dx, dweight = be.Array(rows * cols), be.Array(cols)
    be.fill(dweight, np.nan)  # rows == 0 must still write it (zeros)
    be.rmsnorm_backward(_put(be, x), _put(be, dy), _put(be, rinvrms.array), _put(be, weight), dx, dweight,
                        rows, cols)
    rdx, rdweight = ref.Array(rows * cols), ref.Array(cols)
    ref.rmsnorm_backward(_ref(x), _ref(dy), rinvrms, _ref(weight), rdx, rdweight, rows, cols)
    np.testing.assert_allclose(_get(be, dweight), rdweight.array, rtol=1e-6, atol=1e-6, err_msg="dweight")
    np.testing.assert_allclose(_get(be, dx), rdx.array, rtol=1e-6, atol=1e-6, err_msg="dx")
    if rows == 0:
        np.testing.assert_array_equal(_get(be, dweight), 0.0)


@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 3), (300, 40), (2000, 17)])
@pytest.mark.parametrize("batch_stats", [True, False])
@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_backward_matches_reference(be, rows, cols, batch_stats, relu):
    """The column sums and dx, with dy read through a ReLU's mask (its output, zeros and negative
    zeros included) or as it is."""
    local = np.random.default_rng(rows * 100 + cols)
    x, dy = (local.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    weight = local.standard_normal(cols).astype(np.float32)
    mean, invstd = x.mean(0), (1 / np.sqrt(x.var(0) + np.float32(1e-5))).astype(np.float32)
    relu_out = np.maximum(local.standard_normal((rows, cols)).astype(np.float32), 0)
    relu_out.ravel()[::5] = -0.0
    mask = (relu_out,) if relu else ()
    dx, dweight, dbias = be.Array(rows * cols), be.Array(cols), be.Array(cols)
    be.batchnorm_backward(*(_put(be, a) for a in (x, dy, mean, invstd, weight)), dx, dweight, dbias, rows, cols,
                          batch_stats, *(_put(be, a) for a in mask))
    rdx, rdweight, rdbias = ref.Array(rows * cols), ref.Array(cols), ref.Array(cols)
    ref.batchnorm_backward(*(_ref(a) for a in (x, dy, mean, invstd, weight)), rdx, rdweight, rdbias, rows, cols,
                           batch_stats, *(_ref(a) for a in mask))
    for got, want, what in ((dbias, rdbias, "dbias"), (dweight, rdweight, "dweight"), (dx, rdx, "dx")):
        np.testing.assert_allclose(_get(be, got), want.array, rtol=1e-5, atol=1e-5, err_msg=what)
    if relu:  # a wrong-sized mask is named
        with pytest.raises(ValueError, match="relu_out"):
            be.batchnorm_backward(*(_put(be, a) for a in (x, dy, mean, invstd, weight)), dx, dweight, dbias, rows,
                                  cols, batch_stats, be.Array(rows * cols + 1))


def test_layernorm_in_place_and_bad_arguments(be):
    rows, cols = 5, 40
    x, weight, bias = _layernorm_inputs(rows, cols)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    rout, rmean, rinvstd = ref.Array(rows * cols), ref.Array(rows), ref.Array(rows)
    ref.layernorm(_ref(x), _ref(weight), _ref(bias), rout, rmean, rinvstd, rows, cols, 0.1)
    bx, mean, invstd = _put(be, x), be.Array(rows), be.Array(rows)
    be.layernorm(bx, _put(be, weight), _put(be, bias), bx, mean, invstd, rows, cols, np.float32(0.1))  # out is x
    np.testing.assert_allclose(_get(be, bx), rout.array, rtol=1e-6, atol=1e-6)
    rdx, rdw, rdb = ref.Array(rows * cols), ref.Array(cols), ref.Array(cols)
    ref.layernorm_backward(_ref(x), _ref(dy), rmean, rinvstd, _ref(weight), rdx, rdw, rdb, rows, cols)
    bdy, dweight, dbias = _put(be, dy), be.Array(cols), be.Array(cols)
    be.layernorm_backward(_put(be, x), bdy, mean, invstd, _put(be, weight), bdy, dweight, dbias, rows, cols)  # dx is dy
    np.testing.assert_allclose(_get(be, bdy), rdx.array, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_get(be, dweight), rdw.array, rtol=1e-6, atol=1e-6)

    w, b, out = _put(be, weight), _put(be, bias), be.Array(rows * cols)
    with pytest.raises(ValueError, match=r"layernorm: need rows >= 0 and cols >= 1"):
        be.layernorm(bx, w, b, out, mean, invstd, rows * cols, 0, 1e-5)
    with pytest.raises(ValueError, match=r"layernorm: mean \(rows=5\)"):
        be.layernorm(bx, w, b, out, be.Array(rows + 1), invstd, rows, cols, 1e-5)
    with pytest.raises(ValueError, match=r"layernorm: bias \(cols=40\)"):
        be.layernorm(bx, w, _put(be, bias[:-1]), out, mean, invstd, rows, cols, 1e-5)
    with pytest.raises(ValueError, match="scalar argument must be a real number"):
        be.layernorm(bx, w, b, out, mean, invstd, rows, cols, "eps")
    with pytest.raises(ValueError, match=r"layernorm_backward: dx \(rows=5, cols=40\)"):
        be.layernorm_backward(bx, bdy, mean, invstd, w, be.Array(3), dweight, dbias, rows, cols)
    with pytest.raises(ValueError, match="CUDA backend Array"):
        be.layernorm_backward(bx, bdy, mean, invstd, _ref(weight), out, dweight, dbias, rows, cols)


# ---------------------------------------------------------------- softmax cross-entropy

@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 5), (9, 300), (4, 1000)])
def test_softmax_xent_matches_reference(be, rows, cols):
    # more rows than the capped grid; rows shorter and longer than a block's threads
    z = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    labels = rng.integers(0, cols, rows).astype(np.float32)
    g = rng.standard_normal(rows).astype(np.float32)
    lse, loss, out = be.Array(rows), be.Array(rows), be.Array(rows * cols)
    be.softmax_xent(_put(be, z), _put(be, labels), lse, loss, rows, cols)
    be.softmax_xent_grad(_put(be, z), _put(be, labels), lse, _put(be, g), out, rows, cols)
    r_lse, r_loss, r_out = ref.Array(rows), ref.Array(rows), ref.Array(rows * cols)
    ref.softmax_xent(_ref(z), _ref(labels), r_lse, r_loss, rows, cols)
    ref.softmax_xent_grad(_ref(z), _ref(labels), r_lse, _ref(g), r_out, rows, cols)
    for got, want in ((lse, r_lse), (loss, r_loss), (out, r_out)):
        np.testing.assert_allclose(_get(be, got), want.array.ravel(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", ["softmax_xent", "softmax_xent_grad"])
@pytest.mark.parametrize("bad", [5.0, -1.0, 1.5, float("nan")])
def test_softmax_xent_bad_label_raises_at_the_next_synchronization(be, host_reads, fn, bad):
    rows, cols = 5, 5
    z = rng.standard_normal((rows, cols)).astype(np.float32)
    labels = np.array([0, 4, bad, 2, bad], np.float32)
    Z, L = _put(be, z), _put(be, labels)
    lse, loss, out = be.Array(rows), be.Array(rows), be.Array(rows * cols)
    be.softmax_xent(Z, _put(be, np.zeros(rows, np.float32)), lse, loss, rows, cols)  # a good lse for the gradient
    G = _put(be, np.ones(rows, np.float32))
    host_reads.clear()
    if fn == "softmax_xent":
        _bad_label_raised_later(be, host_reads, lambda: be.softmax_xent(Z, L, lse, loss, rows, cols), fn, bad, cols)
        got = _get(be, loss)
    else:
        _bad_label_raised_later(be, host_reads, lambda: be.softmax_xent_grad(Z, L, lse, G, out, rows, cols), fn,
                                bad, cols)
        got = _get(be, out).reshape(rows, cols)
    assert np.isnan(got[[2, 4]]).all() and not np.isnan(got[[0, 1, 3]]).any()


def test_a_bad_label_is_reported_by_to_numpy_too(be, host_reads):
    ids = _put(be, np.array([3.0], np.float32))
    out = be.Array(2)
    be.embedding_gather(_put(be, np.zeros(4, np.float32)), ids, out, 2, 1, 2)
    with pytest.raises(ValueError, match=r"embedding_gather: label 3.0 is not an integer in \[0, 2\)"):
        _get(be, out)
    np.testing.assert_array_equal(_get(be, out), [np.nan, np.nan])  # reported once


# ---------------------------------------------------------------- softmax

# The layer norm's shapes: no rows, one row, one column, rows longer than a block, more rows than
# the capped grid's blocks (the grid-stride loop over rows runs more than once), odd tree sizes.
SOFTMAX_SHAPES = LAYERNORM_SHAPES


def _softmax_inputs(rows, cols):
    local = np.random.default_rng(rows * 1000 + cols + 7)
    x = (local.standard_normal((rows, cols)) * 6 + 90).astype(np.float32)  # exp(90) overflows float32
    g = local.standard_normal((rows, cols)).astype(np.float32)
    return x, g


def _ref_softmax(x, rows, cols):
    out = ref.Array(rows * cols)
    with np.errstate(invalid="ignore"):  # -inf - -inf in a fully masked row, as the contract has it
        ref.softmax(_ref(x), out, rows, cols)
    return out.array


@pytest.mark.parametrize("rows,cols", SOFTMAX_SHAPES)
def test_softmax_matches_reference(be, rows, cols):
    x, _ = _softmax_inputs(rows, cols)
    out = be.Array(rows * cols)
    be.softmax(_put(be, x), out, rows, cols)
    launch = be.last_launch()
    expect = _ref_softmax(x, rows, cols)
    np.testing.assert_allclose(_get(be, out), expect, rtol=2e-6, atol=1e-9)
    if rows:  # a block per row, the row's cols in whole warps, at most THREADS
        threads = min(cu.THREADS, 32 * -(-cols // 32))
        assert launch == f"grid=({min(rows, cu.MAX_BLOCKS)},1,1) block=({threads},1,1)"
        np.testing.assert_allclose(_get(be, out).reshape(rows, cols).sum(axis=1), 1.0, rtol=1e-5)
    if cols == 1 and rows:
        np.testing.assert_array_equal(_get(be, out), 1.0)


@pytest.mark.parametrize("rows,cols", SOFTMAX_SHAPES)
def test_softmax_backward_matches_reference(be, rows, cols):
    x, g = _softmax_inputs(rows, cols)
    y = _ref_softmax(x, rows, cols)
    out = be.Array(rows * cols)
    be.softmax_backward(_put(be, y), _put(be, g), out, rows, cols)
    launch = be.last_launch()
    expect = ref.Array(rows * cols)
    ref.softmax_backward(_ref(y), _ref(g), expect, rows, cols)
    np.testing.assert_allclose(_get(be, out), expect.array, rtol=1e-6, atol=1e-9)
    if rows:
        threads = min(cu.THREADS, 32 * -(-cols // 32))
        assert launch == f"grid=({min(rows, cu.MAX_BLOCKS)},1,1) block=({threads},1,1)"
    if cols == 1 and rows:  # y is 1, the adjoint of a constant is 0
        np.testing.assert_array_equal(_get(be, out), 0.0)


def test_softmax_masked_rows(be):
    """An attention's masked scores: -inf entries get weight 0 (exactly), a fully masked row is NaN
    (-inf - -inf, as numpy has it), a row with +inf or NaN is NaN, and the rows beside them are not."""
    rows, cols = 7, 300  # more rows than the capped grid's blocks, rows longer than a block
    x, g = _softmax_inputs(rows, cols)
    x[0, 1::3] = -np.inf                   # a causal-style mask, the max among the kept entries
    x[1, :] = -np.inf                      # fully masked
    x[2, 5], x[2, 6] = np.inf, -np.inf     # +inf
    x[3, 299] = np.nan
    x[4, :299] = -np.inf                   # one entry kept: weight 1
    x[5, 0] = -np.inf                      # a mask where the row's max would be (the last row is unmasked)
    expect = _ref_softmax(x, rows, cols).reshape(rows, cols)
    assert (expect[0, 1::3] == 0).all() and np.isnan(expect[1:4]).all() and expect[4, 299] == 1.0
    out = be.Array(rows * cols)
    be.softmax(_put(be, x), out, rows, cols)
    got = _get(be, out).reshape(rows, cols)
    np.testing.assert_allclose(got, expect, rtol=2e-6, atol=1e-9)  # NaNs where the reference has them
    np.testing.assert_array_equal(got[0, 1::3], 0.0)
    np.testing.assert_array_equal(got[4], expect[4])
    # backward through the masked rows: zero weight, zero gradient
    ok = [0, 4, 5, 6]
    y = expect[ok]
    gb, out = _put(be, g[ok]), be.Array(len(ok) * cols)
    be.softmax_backward(_put(be, y), gb, out, len(ok), cols)
    rout = ref.Array(len(ok) * cols)
    ref.softmax_backward(_ref(y), _ref(g[ok]), rout, len(ok), cols)
    np.testing.assert_allclose(_get(be, out), rout.array, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(_get(be, out).reshape(len(ok), cols)[0, 1::3], 0.0)


def test_softmax_in_place_and_bad_arguments(be):
    rows, cols = 5, 40
    x, g = _softmax_inputs(rows, cols)
    expect = _ref_softmax(x, rows, cols)
    bx = _put(be, x)
    be.softmax(bx, bx, rows, cols)  # out is x
    np.testing.assert_allclose(_get(be, bx), expect, rtol=2e-6, atol=1e-9)
    rdx = ref.Array(rows * cols)
    ref.softmax_backward(_ref(expect), _ref(g), rdx, rows, cols)
    by, bg = _put(be, expect), _put(be, g)
    be.softmax_backward(by, bg, bg, rows, cols)  # out is g
    np.testing.assert_allclose(_get(be, bg), rdx.array, rtol=1e-6, atol=1e-9)
    by, bg = _put(be, expect), _put(be, g)
    be.softmax_backward(by, bg, by, rows, cols)  # out is y
    np.testing.assert_allclose(_get(be, by), rdx.array, rtol=1e-6, atol=1e-9)

    out = be.Array(rows * cols)
    with pytest.raises(ValueError, match=r"softmax: need rows >= 0 and cols >= 1, got rows=200, cols=0"):
        be.softmax(bx, out, rows * cols, 0)
    with pytest.raises(ValueError, match=r"softmax: out \(rows=5, cols=40\) has 199 elements"):
        be.softmax(bx, be.Array(rows * cols - 1), rows, cols)
    with pytest.raises(ValueError, match=r"softmax_backward: need rows >= 0 and cols >= 1"):
        be.softmax_backward(by, bg, out, rows * cols, 0)
    with pytest.raises(ValueError, match=r"softmax_backward: g \(rows=5, cols=40\) has 39 elements"):
        be.softmax_backward(by, _put(be, g[0, :-1]), out, rows, cols)
    with pytest.raises(ValueError, match="softmax: x must be a CUDA backend Array"):
        be.softmax(_ref(x), out, rows, cols)
    with pytest.raises(ValueError, match="softmax_backward: out must be a CUDA backend Array"):
        be.softmax_backward(by, bg, ref.Array(rows * cols), rows, cols)
