"""The backend contract: every function of the kernel table agrees with the numpy reference.

Each test runs on every native backend module (``backend`` fixture: the
Cython + OpenMP module always, the CUDA module where a GPU exists) and
compares it with ``ndarray_backend_numpy``, which defines the table. Inputs
come from hypothesis: strided views with permuted axes, zero (broadcast) and
negative strides, offsets, empty and one-element shapes; a few fixed large
cases make the multi-threaded paths run as well.
"""
import numpy as np
import pytest
from backend_cases import SPECIAL_VALUES as SPECIAL
from backend_cases import float_arrays, get, put, strided_views, view_of
from needle_kernels.backend_ndarray.contract_cases import flushed, nearer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Backend fixtures are stateless modules, so reusing them across examples is fine.
given_settings = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)

TABLE = [
    "Array", "to_numpy", "from_numpy", "fill", "compact", "ewise_setitem", "scalar_setitem",
    "ewise_add", "ewise_mul", "ewise_div", "ewise_maximum", "ewise_eq", "ewise_ge",
    "scalar_add", "scalar_mul", "scalar_div", "scalar_power", "scalar_maximum", "scalar_eq", "scalar_ge",
    "ewise_log", "ewise_exp", "ewise_tanh", "matmul", "matmul_batched", "matmul_tiled",
    "reduce_max", "reduce_sum", "reduce_sum_axis", "reduce_max_axis",
    "adam_update", "adam_update_many", "sgd_update", "col2im", "winograd_input", "winograd_output", "winograd_conv3x3",
    "winograd_weight_grad", "softmax", "softmax_backward", "softmax_xent",
    "softmax_xent_grad", "batchnorm_stats", "batchnorm_fold", "batchnorm_apply", "batchnorm_backward", "layernorm", "layernorm_backward",
    "rmsnorm", "rmsnorm_backward", "lstm_cell", "lstm_cell_backward", "ewise_relu_backward", "ewise_tanh_backward", "ewise_sigmoid_backward", "bias_add", "matmul_t",
    "matmul_bias", "embedding_gather", "embedding_scatter",
    "conv_implicit", "conv_implicit_weight_grad",
]
EWISE = ["ewise_add", "ewise_mul", "ewise_div", "ewise_maximum", "ewise_eq", "ewise_ge",
         "ewise_relu_backward", "ewise_tanh_backward", "ewise_sigmoid_backward"]
SCALAR = ["scalar_add", "scalar_mul", "scalar_div", "scalar_maximum", "scalar_eq", "scalar_ge"]
UNARY = ["ewise_log", "ewise_exp", "ewise_tanh"]


def run(module, fn, inputs, out_size, args, scalar):
    """fn(*inputs, [scalar,] out, *args) on one module, into an out first filled with -7; out as numpy."""
    arrays = [put(module, x) for x in inputs]
    if scalar is not None:
        arrays.append(scalar)
    out = module.Array(out_size)
    module.fill(out, -7.0)
    getattr(module, fn)(*arrays, out, *args)
    return get(module, out)


def both(backend, ref, fn, inputs, out_size, *args, scalar=None):
    """Run fn(*inputs, [scalar,] out, *args) on both modules; return (backend result, reference result)."""
    got = run(backend, fn, inputs, out_size, args, scalar)
    want = run(ref, fn, inputs, out_size, args, scalar)
    if getattr(backend, "flushes_subnormals", lambda: False)():
        # the reference on flushed inputs, its result flushed: the other answer a GPU may give
        flushed_scalar = float(flushed(scalar)) if isinstance(scalar, float) else scalar
        want = nearer(got, want, flushed(run(ref, fn, [flushed(x) for x in inputs], out_size, args, flushed_scalar)))
    return got, want


def close(got, want, rtol=1e-6, atol=0.0):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------- the table itself

def test_exports_the_whole_table(backend, ref):
    for name in TABLE:
        assert callable(getattr(backend, name)), name
    assert isinstance(backend.__device_name__, str) and backend.__device_name__ != ref.__device_name__
    assert backend.__tile_size__ == ref.__tile_size__


@pytest.mark.parametrize("size", [0, 1, 5, 1000])
def test_array_has_size_and_distinct_addresses(backend, size):
    a, b = backend.Array(size), backend.Array(size)
    assert a.size == size
    assert isinstance(a.ptr(), int) and a.ptr() != b.ptr()


@given_settings
@given(st.sampled_from([np.float32, np.float64, np.float16, np.int32]), st.integers(0, 3), st.data())
def test_from_numpy_copies_any_dtype_and_layout(backend, dtype, nd, data):
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=nd, max_size=nd)))
    x = (np.random.default_rng(nd).standard_normal(shape) * 10).astype(dtype)
    if nd >= 2:
        x = x.swapaxes(0, -1)  # a non-contiguous source
    a = backend.Array(x.size)
    backend.from_numpy(x, a)
    np.testing.assert_array_equal(get(backend, a), x.astype(np.float32).ravel())


@given_settings
@given(strided_views())
def test_to_numpy(backend, ref, case):
    buf, shape, strides, offset, view = case
    got = backend.to_numpy(put(backend, buf), shape, strides, offset)
    want = ref.to_numpy(put(ref, buf), shape, strides, offset)
    assert got.shape == want.shape == view.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@given_settings
@given(st.floats(allow_nan=False, width=32) | st.integers(-5, 5), st.integers(0, 70000))
def test_fill(backend, val, size):
    out = backend.Array(size)
    backend.fill(out, val)
    np.testing.assert_array_equal(get(backend, out), np.full(size, val, np.float32))


# ---------------------------------------------------------------- strided copies

@given_settings
@given(strided_views())
def test_compact(backend, ref, case):
    buf, shape, strides, offset, view = case
    got, want = both(backend, ref, "compact", [buf], view.size, shape, strides, offset)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, view.ravel())


@given_settings
@given(strided_views(allow_broadcast=False), st.integers(0, 2**32 - 1))
def test_ewise_setitem(backend, ref, case, seed):
    buf, shape, strides, offset, view = case
    src = np.random.default_rng(seed).standard_normal(view.size).astype(np.float32)
    results = []
    for module in (backend, ref):
        out = put(module, buf)
        module.ewise_setitem(put(module, src), out, shape, strides, offset)
        results.append(get(module, out))
    np.testing.assert_array_equal(results[0], results[1])


@given_settings
@given(strided_views(), st.floats(-1e6, 1e6, width=32))
def test_scalar_setitem(backend, ref, case, val):
    buf, shape, strides, offset, view = case
    results = []
    for module in (backend, ref):
        out = put(module, buf)
        module.scalar_setitem(view.size, val, out, shape, strides, offset)
        results.append(get(module, out))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize(
    "shape, transform",
    [
        ((1200, 900), lambda v: v.T),                      # transpose: the tiled copy
        ((64, 50, 40), lambda v: v.transpose(2, 0, 1)),
        ((300, 400), lambda v: v[::-1, ::2]),              # flips and steps
        ((250000,), lambda v: v[::-3]),
        ((700, 1), lambda v: np.broadcast_to(v, (700, 300))),  # zero strides
        ((1, 500), lambda v: np.broadcast_to(v, (400, 500)).T),
        ((40, 30, 20, 10), lambda v: v[1:, ::-1, 2:17:3].transpose(3, 1, 0, 2)),
    ],
)
def test_large_strided_copies(backend, ref, shape, transform):
    base = np.random.default_rng(0).standard_normal(int(np.prod(shape)) + 5).astype(np.float32)
    view = transform(base[: int(np.prod(shape))].reshape(shape))
    vshape, vstrides, voffset = view_of(base, view)
    got, want = both(backend, ref, "compact", [base], view.size, vshape, vstrides, voffset)
    np.testing.assert_array_equal(got, want)
    if 0 not in vstrides:  # setitem into a broadcast view has no defined result
        src = np.arange(view.size, dtype=np.float32)
        results = []
        for module in (backend, ref):
            out = put(module, base)
            module.ewise_setitem(put(module, src), out, vshape, vstrides, voffset)
            results.append(get(module, out))
            module.scalar_setitem(view.size, 3.0, out, vshape, vstrides, voffset)
            results.append(get(module, out))
        np.testing.assert_array_equal(results[0], results[2])
        np.testing.assert_array_equal(results[1], results[3])


# ---------------------------------------------------------------- element-wise

def _pair(size):
    """Two arrays where b often equals a (so eq/ge see ties) and both hold special values."""
    @st.composite
    def make(draw):
        a = draw(float_arrays(size, -1e3, 1e3))
        b = draw(float_arrays(size, -1e3, 1e3))
        ties = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), dtype=bool)
        b = np.where(ties, a, b).astype(np.float32)
        if size and draw(st.booleans()):
            a[: min(size, len(SPECIAL))] = SPECIAL[: min(size, len(SPECIAL))]
        return a, b
    return make()


@pytest.mark.parametrize("fn", EWISE)
@given_settings
@given(st.integers(0, 40).flatmap(_pair))
def test_ewise_binary(backend, ref, fn, ab):
    a, b = ab
    got, want = both(backend, ref, fn, [a, b], a.size)
    close(got, want)


@pytest.mark.parametrize("fn", SCALAR)
@given_settings
@given(st.integers(0, 40).flatmap(lambda n: float_arrays(n, -1e3, 1e3)),
       st.floats(-100, 100, width=32) | st.sampled_from([0.0, -0.0, 1.0, np.inf, np.nan]) | st.integers(-3, 3))
def test_scalar_ops(backend, ref, fn, a, val):
    if a.size:
        a[0] = val  # a tie for eq/ge
    got, want = both(backend, ref, fn, [a], a.size, scalar=val)
    close(got, want)


@given_settings
@given(st.integers(0, 40).flatmap(lambda n: float_arrays(n, -20.0, 20.0)),
       st.sampled_from([0, 1, 2, 3, -1, -2, 0.5, 1.5, 2.5, -0.5, 2.0]))
def test_scalar_power(backend, ref, a, val):
    got, want = both(backend, ref, "scalar_power", [a], a.size, scalar=val)
    close(got, want, rtol=2e-6)


@pytest.mark.parametrize("fn", UNARY)
@given_settings
@given(st.integers(0, 60).flatmap(lambda n: float_arrays(n, -100.0, 100.0)), st.booleans())
def test_unary(backend, ref, fn, a, special):
    if special:
        a = np.concatenate([a, SPECIAL, np.abs(a) * 1e-3])
    got, want = both(backend, ref, fn, [a], a.size)
    # float32 exp/log/tanh differ between libraries by an ulp or two
    close(got, want, rtol=4e-7 * 8, atol=1e-37)


@pytest.mark.parametrize("fn", EWISE + SCALAR + UNARY + ["scalar_power"])
@pytest.mark.parametrize("size", [65536 * 3 + 13, 1 << 20])
def test_elementwise_large(backend, ref, fn, size):
    rng = np.random.default_rng(size)
    a = (rng.standard_normal(size) * 3).astype(np.float32)
    if fn == "ewise_log":
        a = np.abs(a)
    inputs = [a, np.where(rng.random(size) < 0.3, a, rng.standard_normal(size)).astype(np.float32)]
    if fn.startswith("scalar"):
        got, want = both(backend, ref, fn, inputs[:1], size, scalar=2.0 if fn == "scalar_power" else 0.25)
    elif fn in UNARY:
        got, want = both(backend, ref, fn, inputs[:1], size)
    else:
        got, want = both(backend, ref, fn, inputs, size)
    close(got, want, rtol=4e-7 * 8)


def test_elementwise_in_place(backend):
    """out may be one of the inputs, as NDArray's in-place updates do."""
    x = np.random.default_rng(1).standard_normal(100003).astype(np.float32)
    a = put(backend, x)
    backend.ewise_add(a, a, a)
    backend.scalar_mul(a, 0.5, a)
    backend.ewise_exp(a, a)
    close(get(backend, a), np.exp(x), rtol=4e-6)


# ---------------------------------------------------------------- matmul

def _mats(rng, *shapes):
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _mm_tol(n):
    return dict(rtol=1e-4, atol=1e-5 * max(1, n) ** 0.5)


@given_settings
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_matmul(backend, ref, m, n, p, seed):
    a, b = _mats(np.random.default_rng(seed), (m, n), (n, p))
    got, want = both(backend, ref, "matmul", [a, b], m * p, m, n, p)
    close(got, want, **_mm_tol(n))


@pytest.mark.parametrize("m, n, p", [(1, 1000, 1), (1000, 1, 700), (67, 300, 129), (200, 513, 257),
                                     (513, 64, 2049), (7, 4100, 33)])
def test_matmul_large(backend, ref, m, n, p):
    a, b = _mats(np.random.default_rng(m), (m, n), (n, p))
    got, want = both(backend, ref, "matmul", [a, b], m * p, m, n, p)
    close(got, want, **_mm_tol(n))


@given_settings
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40), st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_matmul_t(backend, ref, m, n, p, trans_a, trans_b, seed):
    a, b = _mats(np.random.default_rng(seed), (m, n), (n, p))
    # the operands as stored: the transpose's rows when the flag says so
    a_in = np.ascontiguousarray(a.T) if trans_a else a
    b_in = np.ascontiguousarray(b.T) if trans_b else b
    got, want = both(backend, ref, "matmul_t", [a_in, b_in], m * p, m, n, p, trans_a, trans_b)
    close(got, want, **_mm_tol(n))
    close(want.reshape(m, p), a.astype(np.float64) @ b, **_mm_tol(n))


def _matmul_bias_case(backend, ref, m, n, p, seed):
    rng = np.random.default_rng(seed)
    a, b = _mats(rng, (m, n), (n, p))
    bias = (rng.standard_normal(p) * 10).astype(np.float32)
    got, want = both(backend, ref, "matmul_bias", [a, b, bias], m * p, m, n, p)
    close(got, want, **_mm_tol(n))
    close(want.reshape(m, p), a.astype(np.float64) @ b + bias, **_mm_tol(n))


@given_settings
@given(st.integers(0, 40), st.integers(0, 40), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_matmul_bias(backend, ref, m, n, p, seed):
    _matmul_bias_case(backend, ref, m, n, p, seed)


# each path of the CPU kernel: direct (narrow), few rows (bands of columns; 64 rows leave a
# partial panel), packed with several KC slices (the bias only on the first), partial tiles
@pytest.mark.parametrize("m, n, p", [(64, 64, 10000), (512, 64, 1000), (300, 700, 900), (100, 16, 400),
                                     (67, 513, 129), (1, 300, 1)])
def test_matmul_bias_large(backend, ref, m, n, p):
    _matmul_bias_case(backend, ref, m, n, p, m + n + p)


@pytest.mark.parametrize("m, n, p", [(16, 400, 100), (640, 2000, 100), (300, 700, 900), (100, 16, 400)])
@pytest.mark.parametrize("trans_a, trans_b", [(True, False), (False, True), (True, True)])
def test_matmul_t_large(backend, ref, m, n, p, trans_a, trans_b):
    a, b = _mats(np.random.default_rng(m + n), (m, n), (n, p))
    a_in = np.ascontiguousarray(a.T) if trans_a else a
    b_in = np.ascontiguousarray(b.T) if trans_b else b
    got, want = both(backend, ref, "matmul_t", [a_in, b_in], m * p, m, n, p, trans_a, trans_b)
    close(got, want, **_mm_tol(n))


@given_settings
@given(st.integers(0, 5), st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 2**32 - 1))
def test_matmul_batched(backend, ref, batch, m, n, p, seed):
    a, b = _mats(np.random.default_rng(seed), (batch, m, n), (batch, n, p))
    got, want = both(backend, ref, "matmul_batched", [a, b], batch * m * p, batch, m, n, p)
    close(got, want, **_mm_tol(n))


@pytest.mark.parametrize("batch, m, n, p", [(64, 17, 33, 9), (3, 150, 200, 170)])
def test_matmul_batched_large(backend, ref, batch, m, n, p):
    a, b = _mats(np.random.default_rng(batch), (batch, m, n), (batch, n, p))
    got, want = both(backend, ref, "matmul_batched", [a, b], batch * m * p, batch, m, n, p)
    close(got, want, **_mm_tol(n))


@given_settings
@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_matmul_tiled(backend, ref, mt, nt, pt, seed):
    t = ref.__tile_size__
    m, n, p = mt * t, nt * t, pt * t
    a, b = _mats(np.random.default_rng(seed), (m * n,), (n * p,))
    got, want = both(backend, ref, "matmul_tiled", [a, b], m * p, m, n, p)
    close(got, want, **_mm_tol(n))


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("fn", ["reduce_sum", "reduce_max"])
@given_settings
@given(st.integers(0, 12), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_reduce(backend, ref, fn, nout, rs, seed):
    a = (np.random.default_rng(seed).standard_normal(nout * rs) * 10).astype(np.float32)
    got, want = both(backend, ref, fn, [a], nout, rs)
    close(got, want, rtol=1e-5, atol=1e-5 * rs ** 0.5)


@pytest.mark.parametrize("fn", ["reduce_sum_axis", "reduce_max_axis"])
@given_settings
@given(st.integers(0, 6), st.integers(1, 12), st.integers(0, 12), st.integers(0, 2**32 - 1))
def test_reduce_axis(backend, ref, fn, outer, rs, inner, seed):
    a = (np.random.default_rng(seed).standard_normal(outer * rs * inner) * 10).astype(np.float32)
    got, want = both(backend, ref, fn, [a], outer * inner, outer, rs, inner)
    close(got, want, rtol=1e-5, atol=1e-5 * rs ** 0.5)


@pytest.mark.parametrize("fn", ["reduce_sum", "reduce_max"])
@pytest.mark.parametrize("nout, rs", [(1, 1 << 21), (3, 300007), (5000, 129), (200000, 3)])
def test_reduce_large(backend, ref, fn, nout, rs):
    a = np.random.default_rng(rs).random(nout * rs).astype(np.float32)
    got, want = both(backend, ref, fn, [a], nout, rs)
    close(got, want, rtol=2e-5)


@pytest.mark.parametrize("fn", ["reduce_sum_axis", "reduce_max_axis"])
@pytest.mark.parametrize("outer, rs, inner", [(1, 2000, 3000), (3, 700, 1100), (5000, 7, 9), (2, 100000, 2)])
def test_reduce_axis_large(backend, ref, fn, outer, rs, inner):
    a = np.random.default_rng(rs).random(outer * rs * inner).astype(np.float32)
    got, want = both(backend, ref, fn, [a], outer * inner, outer, rs, inner)
    close(got, want, rtol=2e-5)


def test_reductions_propagate_nan(backend, ref):
    a = np.arange(64, dtype=np.float32)
    a[37] = np.nan
    for fn, args in [("reduce_sum", (16,)), ("reduce_max", (16,)), ("reduce_sum_axis", (2, 8, 4)),
                     ("reduce_max_axis", (2, 8, 4))]:
        size = 64 // args[0] if len(args) == 1 else args[0] * args[2]
        got, want = both(backend, ref, fn, [a], size, *args)
        close(got, want)


# ---------------------------------------------------------------- optimizer steps

ADAM = dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8)


def _adam(module, p, g, m, v, weight_decay, t, out_is_param=False):
    """Run adam_update on module; returns (out, m, v) as numpy arrays."""
    arrs = [put(module, x) for x in (p, g, m, v)]
    out = arrs[0] if out_is_param else module.Array(p.size)
    c1, c2 = 1 - ADAM["beta1"] ** t, 1 - ADAM["beta2"] ** t
    module.adam_update(*arrs, out, ADAM["lr"], ADAM["beta1"], ADAM["beta2"], ADAM["eps"], weight_decay, c1, c2)
    return get(module, out), get(module, arrs[2]), get(module, arrs[3])


def _adam_formula(p, g, m, v, weight_decay, t):
    p, g, m, v = (x.astype(np.float64) for x in (p, g, m, v))
    g = g + weight_decay * p
    m = ADAM["beta1"] * m + (1 - ADAM["beta1"]) * g
    v = ADAM["beta2"] * v + (1 - ADAM["beta2"]) * g * g
    c1, c2 = 1 - ADAM["beta1"] ** t, 1 - ADAM["beta2"] ** t
    return p - ADAM["lr"] * (m / c1) / (np.sqrt(v / c2) + ADAM["eps"]), m, v


def _optim_inputs(seed, size, zero_state):
    rng = np.random.default_rng(seed)
    p, g = (rng.standard_normal(size).astype(np.float32) for _ in range(2))
    m = np.zeros(size, np.float32) if zero_state else (rng.standard_normal(size) * 0.1).astype(np.float32)
    v = np.zeros(size, np.float32) if zero_state else (rng.random(size) * 0.1).astype(np.float32)
    return p, g, m, v


@given_settings
@given(st.integers(0, 300), st.sampled_from([0.0, 0.01]), st.integers(1, 50), st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_adam_update(backend, ref, size, weight_decay, t, zero_state, in_place, seed):
    p, g, m, v = _optim_inputs(seed, size, zero_state)
    got = _adam(backend, p, g, m, v, weight_decay, t, out_is_param=in_place)
    want = _adam(ref, p, g, m, v, weight_decay, t)
    exact = _adam_formula(p, g, m, v, weight_decay, t)
    for x, y, z in zip(got, want, exact):
        close(x, y, rtol=1e-5, atol=1e-7)
        close(y, z, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("size", [100003, 1 << 20])
def test_adam_update_large(backend, ref, size):
    p, g, m, v = _optim_inputs(size, size, False)
    for x, y in zip(_adam(backend, p, g, m, v, 0.001, 3), _adam(ref, p, g, m, v, 0.001, 3)):
        close(x, y, rtol=1e-5, atol=1e-7)


@given_settings
@given(st.lists(st.sampled_from([0, 1, 5, 16, 17, 300, 4099]), max_size=6), st.sampled_from([0.0, 0.01]),
       st.integers(1, 50), st.integers(0, 2**32 - 1))
def test_adam_update_many(backend, ref, sizes, weight_decay, t, seed):
    # arrays of mixed sizes, whose total the threads split wherever it falls: each array's update
    # is adam_update's on it alone
    states = [_optim_inputs(seed + i, size, False) for i, size in enumerate(sizes)]
    c1, c2 = 1 - ADAM["beta1"] ** t, 1 - ADAM["beta2"] ** t
    arrs = [[put(backend, x) for x in state] for state in states]
    outs = [backend.Array(size) for size in sizes]
    backend.adam_update_many(*([a[k] for a in arrs] for k in range(4)), outs, ADAM["lr"], ADAM["beta1"],
                             ADAM["beta2"], ADAM["eps"], weight_decay, c1, c2)
    for state, a, out in zip(states, arrs, outs):
        want = _adam(ref, *state, weight_decay, t)
        for x, y in zip((get(backend, out), get(backend, a[2]), get(backend, a[3])), want):
            close(x, y, rtol=1e-5, atol=1e-7)


def test_adam_update_many_large(backend, ref):
    sizes = [1 << 20, 3, 100003]
    states = [_optim_inputs(size, size, False) for size in sizes]
    arrs = [[put(backend, x) for x in state] for state in states]
    outs = [backend.Array(size) for size in sizes]
    backend.adam_update_many(*([a[k] for a in arrs] for k in range(4)), outs, ADAM["lr"], ADAM["beta1"],
                             ADAM["beta2"], ADAM["eps"], 0.001, 0.271, 0.002997)
    for state, a, out in zip(states, arrs, outs):
        for x, y in zip((get(backend, out), get(backend, a[2]), get(backend, a[3])), _adam(ref, *state, 0.001, 3)):
            close(x, y, rtol=1e-5, atol=1e-7)


def _sgd(module, p, g, u, lr, momentum, weight_decay, out_is_param=False):
    arrs = [put(module, p), put(module, g), None if u is None else put(module, u)]
    out = arrs[0] if out_is_param else module.Array(p.size)
    module.sgd_update(*arrs, out, lr, momentum, weight_decay)
    return get(module, out), (None if u is None else get(module, arrs[2]))


@given_settings
@given(st.sampled_from([0, 1, 17, 300, 100003]), st.sampled_from([0.0, 0.9]), st.sampled_from([0.0, 0.01]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_sgd_update(backend, ref, size, momentum, weight_decay, in_place, seed):
    p, g, u, _ = _optim_inputs(seed, size, False)
    u = u if momentum else None
    got = _sgd(backend, p, g, u, 0.1, momentum, weight_decay, out_is_param=in_place)
    want = _sgd(ref, p, g, u, 0.1, momentum, weight_decay)
    g64 = g.astype(np.float64) + weight_decay * p
    step = g64 if u is None else momentum * u + (1 - momentum) * g64
    close(got[0], want[0], rtol=1e-6, atol=1e-7)
    close(want[0], p - 0.1 * step, rtol=1e-5, atol=1e-6)
    if u is not None:
        close(got[1], want[1], rtol=1e-6, atol=1e-7)
        close(want[1], step, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- col2im

def _col2im_loops(cols, n, h, w, c, k, s):
    """col2im written as the definition: every window entry added to the pixel it read."""
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    cols = cols.reshape(n, ho, wo, k, k, c).astype(np.float64)
    out = np.zeros((n, h, w, c))
    for i in range(ho):
        for j in range(wo):
            out[:, i * s:i * s + k, j * s:j * s + k, :] += cols[:, i, j]
    return out.ravel()


@given_settings
@given(st.integers(0, 3), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(0, 4),
       st.integers(0, 4), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_col2im(backend, ref, n, k, s, c, extra_h, extra_w, wide, seed):
    h, w = k + extra_h, k + extra_w + wide
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    cols = np.random.default_rng(seed).standard_normal(n * ho * wo * k * k * c).astype(np.float32)
    got, want = both(backend, ref, "col2im", [cols], n * h * w * c, n, h, w, c, k, s)
    np.testing.assert_array_equal(got, want)  # the same additions in the same order
    close(want, _col2im_loops(cols, n, h, w, c, k, s), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, h, w, c, k, s", [(128, 16, 16, 32, 3, 1), (128, 38, 38, 3, 7, 4), (16, 9, 9, 64, 3, 2)])
def test_col2im_large(backend, ref, n, h, w, c, k, s):
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    cols = np.random.default_rng(h).standard_normal(n * ho * wo * k * k * c).astype(np.float32)
    got, want = both(backend, ref, "col2im", [cols], n * h * w * c, n, h, w, c, k, s)
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- Winograd F(2x2, 3x3)

def _conv3x3_loops(image, weight):
    """The stride-1, unpadded 3x3 convolution of an NHWC image, as its definition, in float64."""
    n, h, w, _ = image.shape
    out = np.zeros((n, h - 2, w - 2, weight.shape[3]))
    for ki in range(3):
        for kj in range(3):
            out += image[:, ki:ki + h - 2, kj:kj + w - 2, :].astype(np.float64) @ weight[ki, kj]
    return out


def _winograd_weight(weight):
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    return np.einsum("ui,vj,ijco->uvco", g, g, weight).reshape(16, *weight.shape[2:])


@given_settings
@given(st.integers(0, 3), st.integers(3, 9), st.integers(3, 9), st.sampled_from([1, 2, 5, 16, 63, 64, 65, 130]),
       st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_winograd_transforms_compute_the_3x3_convolution(backend, ref, n, h, w, c_in, c_out, seed):
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((n, h, w, c_in)).astype(np.float32)
    weight = rng.standard_normal((3, 3, c_in, c_out)).astype(np.float32)
    th, tw = (h - 1) // 2, (w - 1) // 2
    tiles = 16 * n * th * tw
    got, want = both(backend, ref, "winograd_input", [image.ravel()], tiles * c_in, n, h, w, c_in)
    np.testing.assert_array_equal(got, want)  # the same additions in the same order
    products = np.matmul(want.reshape(16, -1, c_in).astype(np.float64), _winograd_weight(weight)).astype(np.float32)
    got, want = both(backend, ref, "winograd_output", [products.ravel()], n * (h - 2) * (w - 2) * c_out,
                     n, h - 2, w - 2, c_out)
    np.testing.assert_array_equal(got, want)
    close(want, _conv3x3_loops(image, weight).ravel(), rtol=1e-4, atol=1e-4 * np.sqrt(9 * c_in))


@given_settings
@given(st.integers(0, 3), st.integers(3, 9), st.integers(3, 9), st.sampled_from([1, 3, 16, 65]),
       st.sampled_from([1, 4, 16, 33]), st.integers(0, 2**32 - 1))
def test_winograd_conv3x3(backend, ref, n, h, w, c_in, c_out, seed):
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((n, h, w, c_in)).astype(np.float32)
    weight = rng.standard_normal((3, 3, c_in, c_out)).astype(np.float32)
    u = _winograd_weight(weight).astype(np.float32)
    got, want = both(backend, ref, "winograd_conv3x3", [image.ravel(), u.ravel()], n * (h - 2) * (w - 2) * c_out,
                     n, h, w, c_in, c_out)
    tol = 1e-4 * np.sqrt(9 * c_in)  # sums of c_in products, in another order
    close(got, want, rtol=1e-4, atol=tol)
    close(want, _conv3x3_loops(image, weight).ravel(), rtol=1e-4, atol=tol)


@pytest.mark.parametrize("n, h, c_in, c_out", [(64, 18, 64, 64), (128, 6, 32, 32), (5, 35, 3, 130)])
def test_winograd_conv3x3_large(backend, ref, n, h, c_in, c_out):
    """Many blocks of tiles over two threads, and a last block cut short."""
    rng = np.random.default_rng(h)
    image = rng.standard_normal((n, h, h, c_in)).astype(np.float32)
    weight = rng.standard_normal((3, 3, c_in, c_out)).astype(np.float32)
    got, want = both(backend, ref, "winograd_conv3x3", [image.ravel(), _winograd_weight(weight).astype(np.float32).ravel()],
                     n * (h - 2) ** 2 * c_out, n, h, h, c_in, c_out)
    close(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(9 * c_in))


def _conv3x3_weight_grad_loops(image, grad):
    """dW[ki, kj] = sum over pixels of image[y + ki, x + kj] (x) grad[y, x], in float64."""
    h, w = image.shape[1:3]
    return np.stack([np.stack([np.einsum("byxc,byxo->co", image[:, ki:ki + h - 2, kj:kj + w - 2].astype(np.float64),
                                         grad) for kj in range(3)]) for ki in range(3)])


@given_settings
@given(st.integers(0, 3), st.integers(3, 9), st.integers(3, 9), st.sampled_from([1, 3, 16, 65]),
       st.sampled_from([1, 4, 16, 33]), st.integers(0, 2**32 - 1))
def test_winograd_weight_grad(backend, ref, n, h, w, c_in, c_out, seed):
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((n, h, w, c_in)).astype(np.float32)
    grad = rng.standard_normal((n, h - 2, w - 2, c_out)).astype(np.float32)
    got, want = both(backend, ref, "winograd_weight_grad", [image.ravel(), grad.ravel()], 9 * c_in * c_out,
                     n, h, w, c_in, c_out)
    tol = 1e-4 * np.sqrt(n * (h - 2) * (w - 2) + 1)  # sums over every pixel, in another order
    close(got, want, rtol=1e-4, atol=tol)
    close(want, _conv3x3_weight_grad_loops(image, grad).ravel(), rtol=1e-4, atol=tol)


@pytest.mark.parametrize("n, h, c_in, c_out", [(64, 18, 64, 64), (128, 6, 32, 32), (5, 35, 3, 130)])
def test_winograd_weight_grad_large(backend, ref, n, h, c_in, c_out):
    """Blocks of tiles summed on two threads, and a last block cut short."""
    rng = np.random.default_rng(h)
    image = rng.standard_normal((n, h, h, c_in)).astype(np.float32)
    grad = rng.standard_normal((n, h - 2, h - 2, c_out)).astype(np.float32)
    got, want = both(backend, ref, "winograd_weight_grad", [image.ravel(), grad.ravel()], 9 * c_in * c_out,
                     n, h, h, c_in, c_out)
    close(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(n * (h - 2) ** 2))


@pytest.mark.parametrize("n, h, w, c", [(64, 18, 18, 64), (128, 6, 6, 32), (3, 33, 10, 70)])
def test_winograd_large(backend, ref, n, h, w, c):
    image = np.random.default_rng(h).standard_normal(n * h * w * c).astype(np.float32)
    tiles = 16 * n * ((h - 1) // 2) * ((w - 1) // 2)
    got, want = both(backend, ref, "winograd_input", [image], tiles * c, n, h, w, c)
    np.testing.assert_array_equal(got, want)
    got, want = both(backend, ref, "winograd_output", [want], n * (h - 2) * (w - 2) * c, n, h - 2, w - 2, c)
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- convolution without an im2col matrix

def _implicit_image(rng, n, h, w, c, layout):
    """(buffer, (shape, strides, offset)): an NHWC image as a compact array, as every other column
    of one (its windows' floats not contiguous: gathered), or as the transposed view of an NCHW
    batch that starts 5 floats into its buffer."""
    if layout == "nhwc":
        image = rng.standard_normal((n, h, w, c)).astype(np.float32)
        return image, image.ravel(), ((n, h, w, c), (h * w * c, w * c, c, 1), 0)
    if layout == "columns":
        wide = rng.standard_normal((n, h, 2 * w, c)).astype(np.float32)
        return wide[:, :, ::2], wide.ravel(), ((n, h, w, c), (h * 2 * w * c, 2 * w * c, 2 * c, 1), 0)
    nchw = rng.standard_normal((n, c, h, w)).astype(np.float32)
    buffer = np.concatenate([rng.standard_normal(5).astype(np.float32), nchw.ravel()])
    return nchw.transpose(0, 2, 3, 1), buffer, ((n, h, w, c), (c * h * w, w, 1, h * w), 5)


def _implicit_loops(image, k, s, pad_h, pad_w, ho, wo):
    """The im2col matrix of conv_implicit from its definition, in float64."""
    n, h, w, c = image.shape
    cols = np.zeros((n, ho, wo, k, k, c))
    for i in range(ho):
        for j in range(wo):
            for ki in range(k):
                for kj in range(k):
                    y, x = i * s + ki - pad_h, j * s + kj - pad_w
                    if 0 <= y < h and 0 <= x < w:
                        cols[:, i, j, ki, kj] = image[:, y, x]
    return cols.reshape(n * ho * wo, k * k * c)


def _implicit_both(backend, ref, fn, buffer, view, other, out_size, *geometry):
    results = []
    for module in (backend, ref):
        out = module.Array(out_size)
        module.fill(out, -7.0)
        getattr(module, fn)(put(module, buffer), *view, put(module, other.ravel()), out, *geometry)
        results.append(get(module, out))
    return results


def _check_implicit(backend, ref, rng, n, h, w, c, k, s, pad_h, pad_w, ho, wo, c_out, layout):
    image, buffer, view = _implicit_image(rng, n, h, w, c, layout)
    weight = rng.standard_normal((k * k * c, c_out)).astype(np.float32)
    grad = rng.standard_normal((n * ho * wo, c_out)).astype(np.float32)
    cols = _implicit_loops(image, k, s, pad_h, pad_w, ho, wo)
    geometry = (k, s, pad_h, pad_w, ho, wo, c_out)
    got, want = _implicit_both(backend, ref, "conv_implicit", buffer, view, weight, n * ho * wo * c_out, *geometry)
    tol = 1e-4 * np.sqrt(k * k * c)  # sums of k*k*c products, in another order
    close(got, want, rtol=1e-4, atol=tol)
    close(want, (cols @ weight).ravel(), rtol=1e-4, atol=tol)
    got, want = _implicit_both(backend, ref, "conv_implicit_weight_grad", buffer, view, grad, k * k * c * c_out,
                               *geometry)
    tol = 1e-4 * np.sqrt(n * ho * wo + 1)  # sums over every pixel, in another order
    close(got, want, rtol=1e-4, atol=tol)
    close(want, (cols.T @ grad).ravel(), rtol=1e-4, atol=tol)


@given_settings
@given(st.integers(0, 3), st.integers(1, 9), st.integers(1, 9), st.sampled_from([1, 2, 3, 5, 16]),
       st.integers(1, 5), st.integers(1, 4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2),
       st.sampled_from([1, 3, 16, 17, 33, 40]), st.sampled_from(["nhwc", "nchw", "columns"]),
       st.integers(0, 2**32 - 1))
def test_conv_implicit(backend, ref, n, h, w, c, k, s, pad_h, pad_w, reach, c_out, layout, seed):
    """Windows that reach past every side of the image (``reach``: rows and columns of windows
    beyond the symmetric padding's count), strides past the kernel, tails of pixel and channel tiles."""
    ho, wo = (h + 2 * pad_h - k) // s + 1 + reach, (w + 2 * pad_w - k) // s + 1 + reach
    _check_implicit(backend, ref, np.random.default_rng(seed), n, h, w, c, k, s, pad_h, pad_w, max(ho, 0),
                    max(wo, 0), c_out, layout)


@pytest.mark.parametrize("n, h, c, k, s, p, c_out, layout", [
    (128, 32, 3, 7, 4, 3, 16, "nchw"),   # ResNet9's first layer, on its NCHW batch
    (128, 32, 3, 7, 4, 3, 16, "nhwc"),
    (32, 4, 32, 3, 1, 1, 32, "nhwc"),    # a residual block's 4x4 maps
    (16, 9, 64, 3, 2, 1, 80, "nhwc"),    # 80 channels: two wide strips and a narrow one
    (8, 12, 5, 3, 1, 1, 24, "columns"),  # every window gathered
])
def test_conv_implicit_large(backend, ref, n, h, c, k, s, p, c_out, layout):
    """Many blocks of pixels over two threads, a last block cut short."""
    ho = (h + 2 * p - k) // s + 1
    _check_implicit(backend, ref, np.random.default_rng(h), n, h, h, c, k, s, p, p, ho, ho, c_out, layout)


# ---------------------------------------------------------------- softmax cross-entropy

def _xent_both(backend, ref, z, labels, g):
    """(lse, loss, grad) from both modules for logits z (rows, cols), labels (rows,), row weights g."""
    rows, cols = z.shape
    results = []
    for module in (backend, ref):
        Z, L, G = put(module, z.ravel()), put(module, labels.astype(np.float32)), put(module, g)
        lse, loss, out = module.Array(rows), module.Array(rows), module.Array(rows * cols)
        module.softmax_xent(Z, L, lse, loss, rows, cols)
        module.softmax_xent_grad(Z, L, lse, G, out, rows, cols)
        results.append((get(module, lse), get(module, loss), get(module, out).reshape(rows, cols)))
    return results


def _xent_float64(z, labels, g):
    z = z.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    rows = np.arange(len(z))
    grad = np.exp(z - lse[:, None]) * g[:, None]
    grad[rows, labels] -= g
    return lse, lse - z[rows, labels], grad


@given_settings
@given(st.integers(0, 9), st.integers(1, 70), st.floats(0.1, 60.0), st.integers(0, 2**32 - 1))
def test_softmax_xent(backend, ref, rows, cols, scale, seed):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    labels, g = rng.integers(0, cols, rows), rng.standard_normal(rows).astype(np.float32)
    got, want = _xent_both(backend, ref, z, labels, g)
    for a, b, c in zip(got, want, _xent_float64(z, labels, g)):
        close(a, b, rtol=1e-5, atol=1e-5 * scale)
        close(b, c, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("rows, cols", [(640, 10000), (3, 70001), (5000, 3)])
def test_softmax_xent_large(backend, ref, rows, cols):
    rng = np.random.default_rng(cols)
    z = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    labels, g = rng.integers(0, cols, rows), np.full(rows, 1.0 / rows, np.float32)
    got, want = _xent_both(backend, ref, z, labels, g)
    for a, b in zip(got, want):
        close(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- batch normalization

def _bn_float64(x, dy, w, batch_stats):
    """(mean, var, dx, dweight, dbias) in float64 from the definitions."""
    x, dy, w = (a.astype(np.float64) for a in (x, dy, w))
    rows = len(x)
    mean, var = x.mean(0), x.var(0)
    s = 1 / np.sqrt(var.astype(np.float32) + np.float32(1e-5))
    xhat = (x - mean.astype(np.float32)) * s
    db, dw = dy.sum(0), (dy * xhat).sum(0)
    dx = w * s * (dy - db / rows - xhat * dw / rows) if batch_stats else w * s * dy
    return mean, var, dx, dw, db


def _bn_both(backend, ref, x, dy, w, scale, shift, batch_stats):
    rows, cols = x.shape
    results = []
    for module in (backend, ref):
        X, G, W = put(module, x.ravel()), put(module, dy.ravel()), put(module, w)
        S, B = put(module, scale), put(module, shift)
        mean, var = module.Array(cols), module.Array(cols)
        module.batchnorm_stats(X, mean, var, rows, cols)
        out = module.Array(rows * cols)
        module.batchnorm_apply(X, S, B, out, rows, cols)
        m, v = get(module, mean), get(module, var)
        invstd = put(module, (1 / np.sqrt(v + np.float32(1e-5))).astype(np.float32))
        dx, dw, db = module.Array(rows * cols), module.Array(cols), module.Array(cols)
        module.batchnorm_backward(X, G, mean, invstd, W, dx, dw, db, rows, cols, batch_stats)
        results.append((m, v, get(module, out).reshape(rows, cols), get(module, dx).reshape(rows, cols),
                        get(module, dw), get(module, db)))
    return results


@given_settings
@given(st.integers(1, 40), st.integers(1, 70), st.floats(0.01, 100.0), st.booleans(), st.integers(0, 2**32 - 1))
def test_batchnorm(backend, ref, rows, cols, spread, batch_stats, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * spread + rng.standard_normal(cols) * 3).astype(np.float32)
    dy, w = rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    scale, shift = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    got, want = _bn_both(backend, ref, x, dy, w, scale, shift, batch_stats)
    for a, b in zip(got, want):
        close(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max(initial=0))))
    mean, var, dx, dw, db = _bn_float64(x, dy, w, batch_stats)
    close(want[0], mean, rtol=1e-5, atol=1e-6 * spread)
    close(want[1], var, rtol=1e-4, atol=1e-6 * spread ** 2)
    close(want[2], x * scale + shift, rtol=1e-5, atol=1e-5 * spread)
    for a, b in zip(want[3:], (dx, dw, db)):
        close(a, b, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(b).max(initial=0))))


@given_settings
@given(st.integers(1, 40), st.integers(1, 70), st.booleans(), st.integers(0, 2**32 - 1))
def test_batchnorm_backward_through_relu(backend, ref, rows, cols, batch_stats, seed):
    """With the ReLU's output, dy counts only where that output is > 0: the same results, bit for
    bit, as the call without it on dy masked beforehand (zeros and negative zeros masked too)."""
    rng = np.random.default_rng(seed)
    x, dy = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    relu_out = np.maximum(rng.standard_normal((rows, cols)).astype(np.float32), 0)
    relu_out.ravel()[::7] = -0.0
    w, mean = rng.standard_normal(cols).astype(np.float32), x.mean(0)
    invstd = (1 / np.sqrt(x.var(0) + np.float32(1e-5))).astype(np.float32)
    results = []
    for module in (backend, ref):
        per_call = []
        for g, mask in ((dy, relu_out), (np.where(relu_out > 0, dy, 0).astype(np.float32), None)):
            ins = [put(module, a.ravel()) for a in (x, g, mean, invstd, w)]
            outs = module.Array(rows * cols), module.Array(cols), module.Array(cols)
            extra = () if mask is None else (put(module, mask.ravel()),)
            module.batchnorm_backward(*ins, *outs, rows, cols, batch_stats, *extra)
            per_call.append([get(module, o) for o in outs])
        for a, b in zip(*per_call):
            np.testing.assert_array_equal(a, b)
        results.append(per_call[0])
    for a, b in zip(*results):
        close(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max(initial=0))))


@given_settings
@given(st.integers(1, 70), st.floats(1e-6, 1e-2), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_batchnorm_fold(backend, ref, cols, eps, momentum, seed):
    # a training step's per-channel values: inverse std, scale, shift and the running averages
    rng = np.random.default_rng(seed)
    mean, weight, bias, running_mean = (rng.standard_normal(cols).astype(np.float32) for _ in range(4))
    var, running_var = (rng.random(cols).astype(np.float32) * 3 for _ in range(2))
    var[0] = 0.0
    results = []
    for module in (backend, ref):
        ins = [put(module, a) for a in (mean, var, weight, bias, running_mean, running_var)]
        outs = [module.Array(cols) for _ in range(5)]
        module.batchnorm_fold(*ins, *outs, cols, eps, momentum)
        results.append([get(module, o) for o in outs])
    invstd = 1 / np.sqrt(var.astype(np.float64) + eps)
    scale = weight * invstd
    exact = (invstd, scale, bias - mean * scale, running_mean * (1 - momentum) + mean * momentum,
             running_var * (1 - momentum) + var * momentum)
    for got, want, formula in zip(results[0], results[1], exact):
        close(got, want, rtol=1e-6, atol=1e-6 * max(1.0, float(np.abs(want).max())))
        close(want, formula, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(formula).max())))


@given_settings
@given(st.integers(1, 40), st.integers(1, 70), st.booleans(), st.integers(0, 2**32 - 1))
def test_batchnorm_apply_with_relu(backend, ref, rows, cols, in_place, seed):
    # the ReLU after a batch norm in the same pass: max(x * scale + shift, 0), exact zeros included
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0, 0] = 0.0
    scale, shift = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    shift[0] = 0.0
    results = []
    for module in (backend, ref):
        X = put(module, x.ravel())
        out = X if in_place else module.Array(rows * cols)
        module.batchnorm_apply(X, put(module, scale), put(module, shift), out, rows, cols, True)
        results.append(get(module, out).reshape(rows, cols))
    close(results[0], results[1], rtol=1e-5, atol=1e-6)  # (a fused multiply-add rounds once)
    close(results[1], np.maximum(x * scale + shift, 0), rtol=1e-5, atol=1e-6)
    assert (results[0] >= 0).all() and (results[0][x * scale + shift < -1e-5] == 0).all() and results[0][0, 0] == 0


@given_settings
@given(st.integers(0, 40), st.integers(1, 70), st.booleans(), st.integers(0, 2**32 - 1))
def test_bias_add(backend, ref, rows, cols, in_place, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    results = []
    for module in (backend, ref):
        A, B = put(module, a.ravel()), put(module, bias)
        out = A if in_place else module.Array(rows * cols)
        module.bias_add(A, B, out, rows, cols)
        results.append(get(module, out).reshape(rows, cols))
    close(results[0], results[1])
    close(results[1], a + bias)


@pytest.mark.parametrize("rows, cols", [(8192, 16), (512, 128), (100003, 3)])
def test_batchnorm_large(backend, ref, rows, cols):
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, cols)) * 2 + 5).astype(np.float32)
    dy, w = rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    got, want = _bn_both(backend, ref, x, dy, w, w, w, True)
    for a, b in zip(got, want):
        close(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max())))


# ---------------------------------------------------------------- softmax

@given_settings
@given(st.integers(0, 30), st.integers(1, 140), st.floats(0.1, 50.0), st.sampled_from(["new", "x", "g"]),
       st.integers(0, 2**32 - 1))
def test_softmax(backend, ref, rows, cols, spread, place, seed):
    # forward and adjoint against the reference and float64, a masked (-max_float) entry in some
    # rows; out may be the input (forward) or y or g (backward)
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * spread).astype(np.float32)
    if cols > 1:
        x[::2, -1] = -np.finfo(np.float32).max
    g = rng.standard_normal((rows, cols)).astype(np.float32)
    results = []
    for module in (backend, ref):
        X = put(module, x.ravel())
        y = X if place == "x" else module.Array(rows * cols)
        module.softmax(X, y, rows, cols)
        Y, G = get(module, y), put(module, g.ravel())
        dx = {"x": y, "g": G}.get(place) or module.Array(rows * cols)
        module.softmax_backward(y, G, dx, rows, cols)
        results.append((Y.reshape(rows, cols), get(module, dx).reshape(rows, cols)))
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    exact = (p, p * (g - (g * p).sum(1, keepdims=True)))
    for got, want, formula in zip(results[0], results[1], exact):
        close(got, want, rtol=1e-5, atol=1e-6)
        close(want, formula, rtol=1e-4, atol=1e-6 * max(1.0, float(np.abs(formula).max(initial=0))))


# ---------------------------------------------------------------- layer normalization

def _ln_float64(x, dy, w, b, eps, kept=None):
    """mean, invstd, out, then dx, dw, db in float64; the gradients at the statistics ``kept``
    (float32 mean and invstd, as layernorm keeps them for its backward) when given: in a row whose
    spread is far below its mean, rounding the mean moves xhat by ulp * invstd and dx by that
    times invstd again, so the exact statistics would test the rounding, not the kernel."""
    X, G = x.astype(np.float64), dy.astype(np.float64)
    mean = X.mean(1)
    invstd = 1 / np.sqrt(X.var(1) + eps)
    xhat = (X - mean[:, None]) * invstd[:, None]
    out = xhat * w + b
    if kept is not None:
        m, s = (np.asarray(a, np.float64) for a in kept)
        xhat, invstd_g = (X - m[:, None]) * s[:, None], s
    else:
        invstd_g = invstd
    gw = G * w
    dx = invstd_g[:, None] * (gw - gw.mean(1, keepdims=True) - xhat * (gw * xhat).mean(1, keepdims=True))
    return mean, invstd, out, dx, (G * xhat).sum(0), G.sum(0)


def _ln_both(backend, ref, x, dy, w, b, eps):
    rows, cols = x.shape
    results = []
    for module in (backend, ref):
        X, G, W, B = put(module, x.ravel()), put(module, dy.ravel()), put(module, w), put(module, b)
        out, mean, invstd = module.Array(rows * cols), module.Array(rows), module.Array(rows)
        module.layernorm(X, W, B, out, mean, invstd, rows, cols, eps)
        dx, dw, db = module.Array(rows * cols), module.Array(cols), module.Array(cols)
        module.layernorm_backward(X, G, mean, invstd, W, dx, dw, db, rows, cols)
        results.append((get(module, mean), get(module, invstd), get(module, out).reshape(rows, cols),
                        get(module, dx).reshape(rows, cols), get(module, dw), get(module, db)))
    return results


@given_settings
@given(st.integers(0, 40), st.integers(1, 140), st.floats(0.01, 100.0), st.floats(1e-6, 1e-2),
       st.integers(0, 2**32 - 1))
def test_layernorm(backend, ref, rows, cols, spread, eps, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * spread + rng.standard_normal((rows, 1)) * 3).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    got, want = _ln_both(backend, ref, x, dy, w, b, eps)
    for a, c in zip(got, want):
        close(a, c, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(c).max(initial=0))))
    if cols == 1:  # a single feature: the output is the bias and dx exactly 0, whatever eps
        assert (got[3] == 0).all() and (want[3] == 0).all()
    for a, c in zip(want, _ln_float64(x, dy, w, b, eps, kept=want[:2])):
        close(a, c, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(c).max(initial=0))))


@pytest.mark.parametrize("rows, cols", [(512, 64), (3, 4099), (20000, 7)])
def test_layernorm_large(backend, ref, rows, cols):
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, cols)) * 2 + 5).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    got, want = _ln_both(backend, ref, x, dy, w, b, 1e-5)
    for a, c in zip(got, want):
        close(a, c, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(c).max())))


# ---------------------------------------------------------------- RMS normalization

def _rms_float64(x, dy, w, eps, kept=None):
    """invrms, out, then dx and dw in float64 (the gradients at the float32 invrms ``kept``)."""
    X, G = x.astype(np.float64), dy.astype(np.float64)
    invrms = 1 / np.sqrt((X * X).mean(1) + eps)
    out = X * invrms[:, None] * w
    s = invrms if kept is None else np.asarray(kept, np.float64)
    xhat, gw = X * s[:, None], G * w
    return invrms, out, s[:, None] * (gw - xhat * (gw * xhat).mean(1, keepdims=True)), (G * xhat).sum(0)


def _rms_both(backend, ref, x, dy, w, eps):
    rows, cols = x.shape
    results = []
    for module in (backend, ref):
        X, G, W = put(module, x.ravel()), put(module, dy.ravel()), put(module, w)
        out, invrms = module.Array(rows * cols), module.Array(rows)
        module.rmsnorm(X, W, out, invrms, rows, cols, eps)
        dx, dw = module.Array(rows * cols), module.Array(cols)
        module.rmsnorm_backward(X, G, invrms, W, dx, dw, rows, cols)
        results.append((get(module, invrms), get(module, out).reshape(rows, cols), get(module, dx).reshape(rows, cols),
                        get(module, dw)))
    return results


@given_settings
@given(st.integers(0, 40), st.integers(1, 140), st.floats(0.01, 100.0), st.floats(1e-6, 1e-2),
       st.integers(0, 2**32 - 1))
def test_rmsnorm(backend, ref, rows, cols, spread, eps, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * spread).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    got, want = _rms_both(backend, ref, x, dy, w, eps)
    for a, c in zip(got, want):
        close(a, c, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(c).max(initial=0))))
    for a, c in zip(want, _rms_float64(x, dy, w, eps, kept=want[0])):
        close(a, c, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(c).max(initial=0))))


@pytest.mark.parametrize("rows, cols", [(512, 64), (3, 4099), (20000, 7)])
def test_rmsnorm_large(backend, ref, rows, cols):
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, cols)) * 2 + 5).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    got, want = _rms_both(backend, ref, x, dy, w, 1e-5)
    for a, c in zip(got, want):
        close(a, c, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(c).max())))


def test_rmsnorm_in_place_and_bad_sizes(backend, ref):
    rows, cols = 6, 33
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((2, rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    (invrms, out, dx, dw), _ = _rms_both(backend, ref, x, dy, w, 1e-5)
    X, W, S = put(backend, x.ravel()), put(backend, w), backend.Array(rows)
    backend.rmsnorm(X, W, X, S, rows, cols, 1e-5)  # out is x
    close(get(backend, X).reshape(rows, cols), out, rtol=1e-6, atol=1e-6)
    X, G = put(backend, x.ravel()), put(backend, dy.ravel())
    backend.rmsnorm_backward(X, G, put(backend, invrms), W, G, backend.Array(cols), rows, cols)  # dx is dy
    close(get(backend, G).reshape(rows, cols), dx, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"rmsnorm: invrms \(rows=6\) has 5 elements"):
        backend.rmsnorm(X, W, backend.Array(rows * cols), backend.Array(rows - 1), rows, cols, 1e-5)
    with pytest.raises(ValueError, match=r"rmsnorm_backward: need rows >= 0 and cols >= 1"):
        backend.rmsnorm_backward(X, G, S, W, G, backend.Array(cols), rows, 0)


# ---------------------------------------------------------------- LSTM cell

def _lstm_float64(z, c0, dh, dc):
    rows, hidden = c0.shape
    Z = z.astype(np.float64).reshape(rows, 4, hidden)
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    i, f, g, o = sig(Z[:, 0]), sig(Z[:, 1]), np.tanh(Z[:, 2]), sig(Z[:, 3])
    c = f * c0 + i * g
    t = np.tanh(c)
    d = dc + dh * o * (1 - t * t)
    dz = np.stack([d * g * i * (1 - i), d * c0 * f * (1 - f), d * i * (1 - g * g), dh * t * o * (1 - o)], 1)
    return o * t, c, dz.reshape(rows, 4 * hidden), d * f


@given_settings
@given(st.integers(0, 9), st.integers(1, 40), st.floats(0.1, 30.0), st.integers(0, 2**32 - 1))
def test_lstm_cell(backend, ref, rows, hidden, scale, seed):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((rows, 4 * hidden)) * scale).astype(np.float32)
    c0, dh, dc = (rng.standard_normal((rows, hidden)).astype(np.float32) for _ in range(3))
    results = []
    for module in (backend, ref):
        Z, C0, DH, DC = (put(module, a.ravel()) for a in (z, c0, dh, dc))
        h, c, dz, dc0 = (module.Array(n) for n in (rows * hidden, rows * hidden, rows * 4 * hidden, rows * hidden))
        module.lstm_cell(Z, C0, h, c, rows, hidden)
        module.lstm_cell_backward(Z, C0, DH, DC, dz, dc0, rows, hidden)
        results.append([get(module, a) for a in (h, c, dz, dc0)])
    # A gradient's factors 1 - tanh(x)^2 and s(1 - s) near saturation are differences of
    # numbers within a few float32 ulps of 1: two correct tanh/sigmoid implementations may
    # differ there by ~1e-7 absolute, which the incoming gradients (dh, dc) then multiply.
    grad_scale = 1.0 + float(np.abs(dh).max(initial=0) + np.abs(dc).max(initial=0))
    for k, (a, b, truth) in enumerate(zip(*results, _lstm_float64(z, c0, dh, dc))):
        close(a, b, rtol=1e-5, atol=1e-6 * (grad_scale if k >= 2 else 1.0))
        close(b, truth.ravel(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- embeddings

def _embedding_case(backend, ref, num_rows, rows, dim, ids, seed):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((num_rows, dim)).astype(np.float32)
    g = rng.standard_normal((rows, dim)).astype(np.float32)
    fids = np.asarray(ids, dtype=np.float32)
    got, want = both(backend, ref, "embedding_gather", [table, fids], rows * dim, num_rows, rows, dim)
    close(got, want)
    close(want.reshape(rows, dim), table[np.asarray(ids, dtype=np.int64)])
    got, want = both(backend, ref, "embedding_scatter", [g, fids], num_rows * dim, num_rows, rows, dim)
    expect = np.zeros((num_rows, dim))
    np.add.at(expect, np.asarray(ids, dtype=np.int64), g.astype(np.float64))
    close(got, want, rtol=1e-5, atol=1e-5)
    close(want.reshape(num_rows, dim), expect, rtol=1e-5, atol=1e-5)


@given_settings
@given(st.integers(1, 20), st.integers(1, 40), st.data(), st.integers(0, 2**32 - 1))
def test_embedding(backend, ref, num_rows, dim, data, seed):
    """Gather and scatter against the reference and numpy, ids repeated or not, rows of any width."""
    ids = data.draw(st.lists(st.integers(0, num_rows - 1), max_size=40))
    _embedding_case(backend, ref, num_rows, len(ids), dim, ids, seed)


@pytest.mark.parametrize("num_rows, rows, dim, repeat", [(10000, 512, 64, False), (32, 512, 64, True),
                                                         (50, 1000, 3, True), (7, 0, 5, False)])
def test_embedding_large(backend, ref, num_rows, rows, dim, repeat):
    """A language model's batch of words (mostly distinct), of positions (each repeated 16 times),
    rows narrower than a thread's share of columns, and no rows at all."""
    ids = (np.arange(rows) // 16 % num_rows) if repeat else np.random.default_rng(rows).integers(0, num_rows, rows)
    _embedding_case(backend, ref, num_rows, rows, dim, ids, num_rows + rows)
