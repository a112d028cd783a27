"""Bad arguments raise ValueError naming the mistake, on every backend, never a crash.

Where the reference backend rejects the same call, the message must be the
same too (the native backends reuse its ``check_*`` helpers).
"""
import numpy as np
import pytest
from backend_cases import put


def raises_like_reference(backend, ref, fn, make_args):
    """Call fn on both modules with arguments built per module; both must raise the same ValueError
    (by the next synchronization, where a backend has one: the CUDA kernels check labels as they
    read them and report at the next)."""
    messages = []
    for module in (backend, ref):
        with pytest.raises(ValueError) as info:
            getattr(module, fn)(*make_args(module))
            getattr(module, "synchronize", lambda: None)()
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    return messages[0]


def arrays(module, *sizes):
    return [module.Array(n) for n in sizes]


# ---------------------------------------------------------------- sizes

@pytest.mark.parametrize("size", [-1, -100])
def test_negative_array_size(backend, size):
    with pytest.raises(ValueError, match="size"):
        backend.Array(size)


@pytest.mark.parametrize("size", ["ten", None, [3]])
def test_non_integer_array_size(backend, size):
    with pytest.raises(ValueError):
        backend.Array(size)


@pytest.mark.parametrize("fn", ["ewise_add", "ewise_mul", "ewise_div", "ewise_maximum", "ewise_eq", "ewise_ge"])
@pytest.mark.parametrize("sizes", [(3, 4, 4), (4, 3, 4), (4, 4, 3)])
def test_ewise_size_mismatch(backend, ref, fn, sizes):
    msg = raises_like_reference(backend, ref, fn, lambda m: arrays(m, *sizes))
    assert "sizes differ" in msg


@pytest.mark.parametrize("fn", ["scalar_add", "scalar_mul", "scalar_div", "scalar_power", "scalar_maximum",
                                "scalar_eq", "scalar_ge"])
def test_scalar_size_mismatch(backend, ref, fn):
    raises_like_reference(backend, ref, fn, lambda m: [m.Array(5), 1.0, m.Array(6)])


@pytest.mark.parametrize("fn", ["ewise_log", "ewise_exp", "ewise_tanh"])
def test_unary_size_mismatch(backend, ref, fn):
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, 7, 8))


def test_from_numpy_size_mismatch(backend, ref):
    msg = raises_like_reference(backend, ref, "from_numpy", lambda m: [np.zeros((2, 3)), m.Array(5)])
    assert "out" in msg


@pytest.mark.parametrize(
    "m, n, p, sizes",
    [(2, 3, 4, (6, 12, 7)), (2, 3, 4, (5, 12, 8)), (2, 3, 4, (6, 11, 8)), (3, 3, 3, (9, 9, 8))],
)
def test_matmul_size_mismatch(backend, ref, m, n, p, sizes):
    raises_like_reference(backend, ref, "matmul", lambda mod: arrays(mod, *sizes) + [m, n, p])


@pytest.mark.parametrize("m, n, p", [(-2, -2, 1), (2, -1, -2), (-1, 1, -1)])
def test_matmul_negative_dims(backend, m, n, p):
    # products of negative dims can match the buffer sizes; they must still be refused
    a, b, out = arrays(backend, abs(m * n), abs(n * p), abs(m * p))
    with pytest.raises(ValueError):
        backend.matmul(a, b, out, m, n, p)


def test_matmul_t_size_mismatch(backend, ref):
    raises_like_reference(backend, ref, "matmul_t", lambda m: arrays(m, 6, 12, 7) + [2, 3, 4, True, False])


def test_matmul_batched_size_mismatch(backend, ref):
    raises_like_reference(backend, ref, "matmul_batched", lambda m: arrays(m, 2 * 6, 2 * 12, 2 * 8 - 1) + [2, 2, 3, 4])


def test_matmul_tiled_needs_tile_multiples(backend, ref):
    msg = raises_like_reference(backend, ref, "matmul_tiled", lambda m: arrays(m, 12 * 8, 8 * 8, 12 * 8) + [12, 8, 8])
    assert "tile" in msg
    raises_like_reference(backend, ref, "matmul_tiled", lambda m: arrays(m, 64, 64, 63) + [8, 8, 8])


@pytest.mark.parametrize("fn", ["reduce_sum", "reduce_max"])
@pytest.mark.parametrize("a_size, out_size, rs", [(10, 3, 3), (10, 2, 0), (10, 5, -2)])
def test_reduce_bad_sizes(backend, ref, fn, a_size, out_size, rs):
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, a_size, out_size) + [rs])


@pytest.mark.parametrize("fn", ["reduce_sum_axis", "reduce_max_axis"])
@pytest.mark.parametrize("a_size, out_size, dims", [(24, 8, (2, 3, 4)), (24, 6, (2, 3, 4)), (24, 8, (-2, 3, -4)),
                                                    (0, 0, (2, 0, 4))])
def test_reduce_axis_bad_sizes(backend, ref, fn, a_size, out_size, dims):
    if a_size == 24 and out_size == 8 and dims == (2, 3, 4):
        a_size = 25
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, a_size, out_size) + list(dims))


# ---------------------------------------------------------------- views

BAD_VIEWS = [
    ((3, 4), (4, 1), 1),        # reaches element 12 of a buffer of 12
    ((3, 4), (4, 1), -1),       # negative offset
    ((3, 4), (-4, 1), 0),       # negative stride below the buffer's start
    ((2, 2), (1,), 0),          # shape and strides of different lengths
    ((-1, 4), (4, 1), 0),       # negative dimension
    ((13,), (1,), 0),
    ((2, 100), (0, 1), 0),
]


@pytest.mark.parametrize("shape, strides, offset", BAD_VIEWS)
def test_compact_bad_view(backend, ref, shape, strides, offset):
    n = max(0, int(np.prod(shape)))
    raises_like_reference(backend, ref, "compact", lambda m: [m.Array(12), m.Array(n), shape, strides, offset])


@pytest.mark.parametrize("shape, strides, offset", BAD_VIEWS)
def test_to_numpy_bad_view(backend, ref, shape, strides, offset):
    raises_like_reference(backend, ref, "to_numpy", lambda m: [m.Array(12), shape, strides, offset])


@pytest.mark.parametrize("shape, strides, offset", BAD_VIEWS)
def test_setitem_bad_view(backend, ref, shape, strides, offset):
    n = max(0, int(np.prod(shape)))
    raises_like_reference(backend, ref, "ewise_setitem", lambda m: [m.Array(n), m.Array(12), shape, strides, offset])
    raises_like_reference(backend, ref, "scalar_setitem", lambda m: [n, 1.0, m.Array(12), shape, strides, offset])


def test_compact_out_size(backend, ref):
    raises_like_reference(backend, ref, "compact", lambda m: [m.Array(12), m.Array(11), (3, 4), (4, 1), 0])


def test_setitem_sizes(backend, ref):
    raises_like_reference(backend, ref, "ewise_setitem", lambda m: [m.Array(5), m.Array(12), (2, 3), (3, 1), 0])
    raises_like_reference(backend, ref, "scalar_setitem", lambda m: [5, 1.0, m.Array(12), (2, 3), (3, 1), 0])


@pytest.mark.parametrize("shape, strides", [((2.5, 2), (2, 1)), (("a", 2), (2, 1)), ((2, 2), (None, 1)), (3, 1)])
def test_non_integer_views(backend, shape, strides):
    with pytest.raises(ValueError):
        backend.compact(backend.Array(12), backend.Array(4), shape, strides, 0)


def test_too_many_dimensions_is_an_error_not_a_crash(cpu):
    shape = (1,) * 65
    with pytest.raises(ValueError, match="dimensions"):
        cpu.compact(cpu.Array(1), cpu.Array(1), shape, (1,) * 65, 0)


# ---------------------------------------------------------------- scalars and types

@pytest.mark.parametrize("val", ["x", None, [1.0], object()])
@pytest.mark.parametrize("fn", ["scalar_add", "scalar_mul", "scalar_div", "scalar_power", "scalar_maximum",
                                "scalar_eq", "scalar_ge"])
def test_non_numeric_scalar(backend, ref, fn, val):
    msg = raises_like_reference(backend, ref, fn, lambda m: [m.Array(3), val, m.Array(3)])
    assert "scalar" in msg


@pytest.mark.parametrize("val", ["x", None])
def test_non_numeric_fill_and_setitem(backend, ref, val):
    raises_like_reference(backend, ref, "fill", lambda m: [m.Array(3), val])
    raises_like_reference(backend, ref, "scalar_setitem", lambda m: [3, val, m.Array(3), (3,), (1,), 0])


@pytest.mark.parametrize("bad", [None, np.zeros(4, np.float32), [0.0] * 4])
def test_wrong_array_type(cpu, bad):
    a = put(cpu, np.zeros(4))
    for call in (lambda: cpu.ewise_add(bad, a, a), lambda: cpu.ewise_add(a, a, bad),
                 lambda: cpu.compact(bad, a, (4,), (1,), 0), lambda: cpu.matmul(a, bad, a, 2, 2, 2),
                 lambda: cpu.reduce_sum(bad, a, 1), lambda: cpu.to_numpy(bad, (4,), (1,), 0)):
        with pytest.raises(ValueError, match="Array"):
            call()


# ---------------------------------------------------------------- fused extensions

@pytest.mark.parametrize("bad", range(5))
def test_adam_update_size_mismatch(backend, ref, bad):
    sizes = [6] * 5
    sizes[bad] = 5
    msg = raises_like_reference(
        backend, ref, "adam_update", lambda m: arrays(m, *sizes) + [0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001])
    assert "sizes differ" in msg


@pytest.mark.parametrize("bad", range(5))
def test_adam_update_many_size_mismatch(backend, ref, bad):
    def args(m):
        lists = [arrays(m, 4, 6) for _ in range(5)]
        lists[bad][1] = m.Array(5)
        return lists + [0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001]
    msg = raises_like_reference(backend, ref, "adam_update_many", args)
    assert "sizes differ" in msg and "[1]=5" in msg


def test_adam_update_many_lists(backend, ref):
    scalars = [0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001]
    msg = raises_like_reference(backend, ref, "adam_update_many",
                                lambda m: [arrays(m, 4, 4)] * 4 + [arrays(m, 4)] + scalars)
    assert "lists differ in length" in msg and "outs=1" in msg
    msg = raises_like_reference(backend, ref, "adam_update_many", lambda m: [m.Array(4)] + [arrays(m, 4)] * 4 + scalars)
    assert "params must be a list" in msg
    raises_like_reference(backend, ref, "adam_update_many", lambda m: [arrays(m, 4)] * 5 + ["fast"] + scalars[1:])
    # no arrays: nothing to do
    backend.adam_update_many([], [], [], [], [], *scalars)


def test_adam_update_many_names_the_array_of_the_wrong_type(cpu):
    a = put(cpu, np.zeros(4))
    with pytest.raises(ValueError, match=r"adam_update_many: grads\[1\] must be an ndarray_backend_cpu.Array"):
        cpu.adam_update_many([a, a], [a, None], [a, a], [a, a], [a, a], 0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001)


@pytest.mark.parametrize("bad", range(11))
def test_batchnorm_fold_size_mismatch(backend, ref, bad):
    names = ["mean", "var", "weight", "bias", "running_mean", "running_var", "invstd", "scale", "shift",
             "new_mean", "new_var"]
    sizes = [4] * 11
    sizes[bad] = 3
    msg = raises_like_reference(backend, ref, "batchnorm_fold", lambda m: arrays(m, *sizes) + [4, 1e-5, 0.1])
    assert f"{names[bad]} (cols=4) has 3 elements" in msg
    raises_like_reference(backend, ref, "batchnorm_fold", lambda m: arrays(m, *[4] * 11) + [4, "small", 0.1])


@pytest.mark.parametrize("fn, names", [("softmax", ["x", "out"]), ("softmax_backward", ["y", "g", "out"])])
def test_softmax_size_mismatch(backend, ref, fn, names):
    for bad in range(len(names)):
        sizes = [12] * len(names)
        sizes[bad] = 11
        msg = raises_like_reference(backend, ref, fn, lambda m: arrays(m, *sizes) + [3, 4])
        assert f"{names[bad]} (rows=3, cols=4) has 11 elements" in msg
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, *[0] * len(names)) + [0, 0])


@pytest.mark.parametrize("bad", range(6))
def test_layernorm_size_mismatch(backend, ref, bad):
    # x (3, 4), weight, bias, out, mean, invstd
    names = ["x (rows=3, cols=4)", "weight (cols=4)", "bias (cols=4)", "out (rows=3, cols=4)", "mean (rows=3)",
             "invstd (rows=3)"]
    sizes = [12, 4, 4, 12, 3, 3]
    sizes[bad] -= 1
    msg = raises_like_reference(backend, ref, "layernorm", lambda m: arrays(m, *sizes) + [3, 4, 1e-5])
    assert f"{names[bad]} has {sizes[bad]} elements" in msg
    raises_like_reference(backend, ref, "layernorm", lambda m: arrays(m, 12, 4, 4, 12, 3, 3) + [3, 4, "tiny"])
    raises_like_reference(backend, ref, "layernorm", lambda m: arrays(m, 0, 0, 0, 0, 0, 0) + [0, 0, 1e-5])


@pytest.mark.parametrize("bad", range(8))
def test_layernorm_backward_size_mismatch(backend, ref, bad):
    # x, dy, mean, invstd, weight, dx, dweight, dbias for (3, 4)
    names = ["x (rows=3, cols=4)", "dy (rows=3, cols=4)", "mean (rows=3)", "invstd (rows=3)", "weight (cols=4)",
             "dx (rows=3, cols=4)", "dweight (cols=4)", "dbias (cols=4)"]
    sizes = [12, 12, 3, 3, 4, 12, 4, 4]
    sizes[bad] += 1
    msg = raises_like_reference(backend, ref, "layernorm_backward", lambda m: arrays(m, *sizes) + [3, 4])
    assert f"{names[bad]} has {sizes[bad]} elements" in msg


def test_adam_update_bad_scalar(backend, ref):
    raises_like_reference(backend, ref, "adam_update",
                          lambda m: arrays(m, 4, 4, 4, 4, 4) + ["fast", 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001])


@pytest.mark.parametrize("with_u", [False, True])
def test_sgd_update_size_mismatch(backend, ref, with_u):
    msg = raises_like_reference(
        backend, ref, "sgd_update",
        lambda m: [m.Array(4), m.Array(4), m.Array(3) if with_u else None, m.Array(4 if with_u else 5), 0.1, 0.5, 0.0])
    assert "sizes differ" in msg


@pytest.mark.parametrize("cols, out, dims", [
    (2 * 2 * 2 * 9, 16, (1, 4, 4, 1, 3, 1)),    # cols of a stride-1 3x3 on 4x4 has 36 elements
    (36, 15, (1, 4, 4, 1, 3, 1)),               # out too small
    (36, 16, (1, 2, 4, 1, 3, 1)),               # window taller than the image
    (36, 16, (1, 4, 4, 1, 3, 0)),               # stride 0
])
def test_col2im_bad_sizes(backend, ref, cols, out, dims):
    raises_like_reference(backend, ref, "col2im", lambda m: arrays(m, cols, out) + list(dims))


@pytest.mark.parametrize("fn, first, out, dims", [
    # a 4x4 image of 4 channels has 64 elements and 1 tile: 16 * 4 transformed values
    ("winograd_input", 63, 16 * 4, (1, 4, 4, 4)),      # image too small
    ("winograd_input", 64, 16 * 4 - 1, (1, 4, 4, 4)),  # tiles too small
    ("winograd_input", 8, 16 * 2, (1, 2, 4, 1)),       # a 3x3 kernel does not fit 2 rows
    ("winograd_output", 16 * 4, 15, (1, 2, 2, 4)),     # out of 2x2x4 needs 16 elements
    ("winograd_output", 16 * 4 + 1, 16, (1, 2, 2, 4)), # one product too many
    ("winograd_output", 16 * 4, 16, (1, 0, 2, 4)),     # no output rows
])
def test_winograd_bad_sizes(backend, ref, fn, first, out, dims):
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, first, out) + list(dims))


@pytest.mark.parametrize("sizes, dims", [
    # a 4x4 image of 2 channels (32 floats) by a 2 -> 3 kernel (16 * 6 floats): a 2x2x3 output
    ((31, 96, 12), (1, 4, 4, 2, 3)),   # image too small
    ((32, 95, 12), (1, 4, 4, 2, 3)),   # kernel too small
    ((32, 96, 13), (1, 4, 4, 2, 3)),   # out too big
    ((32, 96, 12), (1, 2, 16, 2, 3)),  # a 3x3 kernel does not fit 2 rows
    ((32, 96, 12), (1, 4, 4, -2, 3)),  # negative channels
])
def test_winograd_conv3x3_bad_sizes(backend, ref, sizes, dims):
    raises_like_reference(backend, ref, "winograd_conv3x3", lambda m: arrays(m, *sizes) + list(dims))


@pytest.mark.parametrize("sizes, dims", [
    # a 4x4 image of 2 channels (32 floats), its 2x2x3 output gradient (12): a 3x3x2x3 kernel (54)
    ((31, 12, 54), (1, 4, 4, 2, 3)),   # image too small
    ((32, 13, 54), (1, 4, 4, 2, 3)),   # gradient too big
    ((32, 12, 53), (1, 4, 4, 2, 3)),   # out too small
    ((32, 12, 54), (1, 4, 2, 2, 3)),   # a 3x3 kernel does not fit 2 columns
])
def test_winograd_weight_grad_bad_sizes(backend, ref, sizes, dims):
    raises_like_reference(backend, ref, "winograd_weight_grad", lambda m: arrays(m, *sizes) + list(dims))


_IMAGE = ((1, 4, 4, 2), (32, 8, 2, 1), 0)  # a compact 4x4 image of 2 channels: 32 floats


@pytest.mark.parametrize("fn", ["conv_implicit", "conv_implicit_weight_grad"])
@pytest.mark.parametrize("image, view, sizes, geometry", [
    # a 3x3 kernel, stride 1, padding 1: 16 pixels by 18 taps; 3 output channels
    (31, _IMAGE, (48, 54), (3, 1, 1, 1, 4, 4, 3)),                        # the view leaves the buffer
    (32, ((1, 4, 4), (32, 8, 2), 0), (48, 54), (3, 1, 1, 1, 4, 4, 3)),    # three dimensions
    (32, _IMAGE, (47, 54), (3, 1, 1, 1, 4, 4, 3)),                        # one pixel's row too few
    (32, _IMAGE, (48, 55), (3, 1, 1, 1, 4, 4, 3)),                        # one tap's row too many
    (32, _IMAGE, (48, 54), (0, 1, 1, 1, 4, 4, 3)),                        # no kernel
    (32, _IMAGE, (48, 54), (3, 0, 1, 1, 4, 4, 3)),                        # stride 0
    (32, _IMAGE, (48, 54), (3, 1, -1, 1, 4, 4, 3)),                       # negative padding
])
def test_conv_implicit_bad_arguments(backend, ref, fn, image, view, sizes, geometry):
    # conv_implicit takes (image, view, w, out) and its weight gradient (image, view, g, out): the
    # per-pixel array is out for the one and g for the other
    per_pixel, per_tap = sizes
    order = (per_tap, per_pixel) if fn == "conv_implicit" else (per_pixel, per_tap)
    raises_like_reference(backend, ref, fn, lambda m: [m.Array(image), *view, *arrays(m, *order), *geometry])


@pytest.mark.parametrize("sizes, dims", [
    ((12, 3, 3, 3), (3, 5)),        # z has 12 elements, not rows * cols = 15
    ((15, 2, 3, 3), (3, 5)),        # two labels for three rows
    ((15, 3, 3, 2), (3, 5)),        # loss too small
    ((0, 0, 0, 0), (0, 0)),         # no classes
])
def test_softmax_xent_bad_sizes(backend, ref, sizes, dims):
    raises_like_reference(backend, ref, "softmax_xent", lambda m: arrays(m, *sizes) + list(dims))


@pytest.mark.parametrize("fn", ["softmax_xent", "softmax_xent_grad"])
@pytest.mark.parametrize("label", [5.0, -1.0, 1.5, float("nan")])
def test_softmax_xent_bad_label(backend, ref, fn, label):
    def make(m):
        labels = m.Array(2)
        m.from_numpy(np.array([0.0, label], np.float32), labels)
        if fn == "softmax_xent":
            return [m.Array(10), labels, m.Array(2), m.Array(2), 2, 5]
        return [m.Array(10), labels, m.Array(2), m.Array(2), m.Array(10), 2, 5]

    assert "is not an integer in [0, 5)" in raises_like_reference(backend, ref, fn, make)


@pytest.mark.parametrize("fn, sizes, dims", [
    ("batchnorm_stats", (11, 4, 4), (3, 4)),              # x has 11 elements, not 3 * 4
    ("batchnorm_stats", (12, 3, 4), (3, 4)),              # mean has 3, not one per column
    ("batchnorm_stats", (0, 0, 0), (0, 4)),               # no rows: no statistics
    ("batchnorm_apply", (12, 4, 5, 12), (3, 4)),          # shift has 5
    ("batchnorm_apply", (12, 4, 4, 11), (3, 4)),          # out too small
    ("batchnorm_backward", (12, 12, 4, 4, 4, 12, 4, 3), (3, 4, True)),   # dbias has 3
    ("batchnorm_backward", (12, 10, 4, 4, 4, 12, 4, 4), (3, 4, False)),  # dy has 10
])
def test_batchnorm_bad_sizes(backend, ref, fn, sizes, dims):
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, *sizes) + list(dims))


def test_batchnorm_backward_bad_relu_out(backend, ref):
    # the ReLU's output has 11 elements, not one per element of x (3 x 4)
    message = raises_like_reference(backend, ref, "batchnorm_backward",
                                    lambda m: arrays(m, 12, 12, 4, 4, 4, 12, 4, 4) + [3, 4, True, m.Array(11)])
    assert "relu_out" in message


@pytest.mark.parametrize("sizes, dims", [
    ((12, 4, 11), (3, 4)),   # out too small
    ((12, 5, 12), (3, 4)),   # bias has 5, not one per column
    ((11, 4, 12), (3, 4)),   # a has 11
    ((0, 0, 0), (0, 0)),     # no columns
])
def test_bias_add_bad_sizes(backend, ref, sizes, dims):
    raises_like_reference(backend, ref, "bias_add", lambda m: arrays(m, *sizes) + list(dims))


@pytest.mark.parametrize("sizes, dims", [
    ((12, 20, 4, 15), (3, 4, 5)),   # bias has 4, not p = 5
    ((12, 20, 5, 14), (3, 4, 5)),   # out too small
    ((11, 20, 5, 15), (3, 4, 5)),   # a has 11
])
def test_matmul_bias_bad_sizes(backend, ref, sizes, dims):
    raises_like_reference(backend, ref, "matmul_bias", lambda m: arrays(m, *sizes) + list(dims))


@pytest.mark.parametrize("fn", ["embedding_gather", "embedding_scatter"])
@pytest.mark.parametrize("bad", [-1.0, 10.0, 2.5, float("nan")])
def test_embedding_bad_ids(backend, ref, fn, bad):
    def args(m):
        table, ids = m.Array(40), m.Array(3)
        m.from_numpy(np.array([1, bad, 0], np.float32), ids)
        return ([table, ids, m.Array(12)] if fn == "embedding_gather" else [m.Array(12), ids, table]) + [10, 3, 4]
    message = raises_like_reference(backend, ref, fn, args)
    assert fn in message and "[0, 10)" in message


@pytest.mark.parametrize("fn", ["embedding_gather", "embedding_scatter"])
@pytest.mark.parametrize("sizes, dims", [
    ((40, 3, 11), (10, 3, 4)),   # the picked rows have 11 elements, not 3 * 4
    ((39, 3, 12), (10, 3, 4)),   # the table has 39, not 10 * 4
    ((40, 2, 12), (10, 3, 4)),   # 2 ids for 3 rows
    ((0, 0, 0), (0, 0, 0)),      # no width
])
def test_embedding_bad_sizes(backend, ref, fn, sizes, dims):
    table, ids, picked = sizes
    order = (table, ids, picked) if fn == "embedding_gather" else (picked, ids, table)
    message = raises_like_reference(backend, ref, fn, lambda m: arrays(m, *order) + list(dims))
    assert fn in message


@pytest.mark.parametrize("fn, sizes, dims", [
    ("lstm_cell", (23, 6, 6, 6), (2, 3)),                  # gates have 23 elements, not 2 * 4 * 3
    ("lstm_cell", (24, 6, 5, 6), (2, 3)),                  # h too small
    ("lstm_cell", (0, 0, 0, 0), (0, 0)),                   # no hidden units
    ("lstm_cell_backward", (24, 6, 6, 6, 24, 7), (2, 3)),  # dc0 too large
])
def test_lstm_cell_bad_sizes(backend, ref, fn, sizes, dims):
    raises_like_reference(backend, ref, fn, lambda m: arrays(m, *sizes) + list(dims))
