"""Argument checks shared by the three backends (numpy reference, Cython + OpenMP, CUDA).

Every kernel checks sizes, views and scalars at the Python boundary before
it touches memory; with the checks in one module, every backend raises the
same ``ValueError``, naming the argument, for the same mistake.
"""
import operator

from ..labels import class_indices, label_error  # noqa: F401 (label_error: for the Cython backend)


def check_array_size(size):
    """The element count of a new Array as an int; ValueError for anything that is not one."""
    try:
        n = operator.index(size)
    except TypeError:
        raise ValueError(f"Array size must be an integer, got {type(size).__name__}") from None
    if n < 0:
        raise ValueError(f"Array size must be >= 0, got {n}")
    return n


def read_view(name, shape, strides, offset):
    """(shape, strides, offset) as tuples of Python ints, or a ValueError naming what is not an integer."""
    try:
        shape, strides = tuple(shape), tuple(strides)
    except TypeError:
        raise ValueError(f"{name}: shape and strides must be sequences of integers, "
                         f"got {type(shape).__name__} and {type(strides).__name__}") from None

    def integer(what, v):
        try:
            return operator.index(v)
        except TypeError:
            raise ValueError(f"{name}: {what} must hold integers, got {v!r}") from None

    return (tuple(integer("shape", n) for n in shape), tuple(integer("strides", s) for s in strides),
            integer("offset", offset))


def check_view(a_size, shape, strides, offset, what="a"):
    """Raise ValueError unless the strided view (shape, strides, offset) lies in a buffer of a_size.

    Takes the view as ``read_view`` returns it (tuples of ints); every caller reads it once.
    """
    if len(shape) != len(strides):
        raise ValueError(f"{what}: shape {shape} and strides {strides} have different lengths")
    if any(s < 0 for s in shape):
        raise ValueError(f"{what}: negative dimension in shape {shape}")
    if offset < 0:
        raise ValueError(f"{what}: negative offset {offset}")
    if 0 in shape:
        return
    lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    if lo < 0 or hi >= a_size:
        raise ValueError(
            f"{what}: view shape={shape} strides={strides} offset={offset} "
            f"reaches elements [{lo}, {hi}] outside a buffer of {a_size}"
        )


def check_same_size(name, **arrays):
    sizes = {k: v.size for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"{name}: sizes differ: " + ", ".join(f"{k}={s}" for k, s in sizes.items()))


def check_lists(name, **lists):
    """The common length of the lists of arrays a multi-tensor kernel takes; raises ValueError
    naming the argument that is not a list or tuple, or whose length differs."""
    lengths = {}
    for what, items in lists.items():
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"{name}: {what} must be a list of arrays, got {type(items).__name__}")
        lengths[what] = len(items)
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{name}: the lists differ in length: " + ", ".join(f"{k}={n}" for k, n in lengths.items()))
    return next(iter(lengths.values()), 0)


def check_optim_lists(name, scalars, **lists):
    """``(count, scalars as floats)`` for a multi-tensor optimizer kernel: the lists of one
    length, the arrays at each index of one size, the scalars numbers."""
    count = check_lists(name, **lists)
    for i in range(count):
        check_same_size(name, **{f"{what}[{i}]": items[i] for what, items in lists.items()})
    return count, [check_scalar(name, s) for s in scalars]


def check_size(name, arr, expected, what):
    if arr.size != expected:
        raise ValueError(f"{name}: {what} has {arr.size} elements, expected {expected}")


def check_scalar(name, val):
    try:
        return float(val)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: scalar argument must be a real number, got {type(val).__name__}") from None


def prod(shape):
    out = 1
    for n in shape:
        out *= int(n)
    return out


def check_matmul(name, a, b, out, m, n, p, batch=1):
    check_size(name, a, batch * m * n, f"a (batch={batch}, m={m}, n={n})")
    check_size(name, b, batch * n * p, f"b (batch={batch}, n={n}, p={p})")
    check_size(name, out, batch * m * p, f"out (batch={batch}, m={m}, p={p})")


def check_reduce(name, a, out, reduce_size, outer=None, inner=1):
    if reduce_size < 1:
        raise ValueError(f"{name}: reduce_size must be >= 1, got {reduce_size}")
    expected = out.size * reduce_size
    if a.size != expected:
        raise ValueError(f"{name}: a has {a.size} elements, expected out.size*reduce_size = {expected}")


def check_reduce_axis(name, a, out, outer, reduce_size, inner):
    if min(outer, inner) < 0 or reduce_size < 1:
        raise ValueError(f"{name}: bad sizes outer={outer}, reduce_size={reduce_size}, inner={inner}")
    check_size(name, a, outer * reduce_size * inner, f"a (outer={outer}, reduce={reduce_size}, inner={inner})")
    check_size(name, out, outer * inner, f"out (outer={outer}, inner={inner})")


def check_optim(name, arrays, scalars):
    check_same_size(name, **arrays)
    return [check_scalar(name, s) for s in scalars]


def check_col2im(name, cols, out, n, h, w, c, k, s):
    """(ho, wo) of a col2im call after checking every size; raises ValueError naming the problem."""
    if min(n, h, w, c) < 0 or k < 1 or s < 1:
        raise ValueError(f"{name}: bad sizes n={n}, h={h}, w={w}, c={c}, k={k}, stride={s}")
    if h < k or w < k:
        raise ValueError(f"{name}: a {k}x{k} window does not fit an image of {h}x{w}")
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    check_size(name, cols, n * ho * wo * k * k * c, f"cols (n={n}, ho={ho}, wo={wo}, k={k}, c={c})")
    check_size(name, out, n * h * w * c, f"out (n={n}, h={h}, w={w}, c={c})")
    return ho, wo


def check_conv_implicit(name, image, view, k, s, pad_h, pad_w, ho, wo, c_out, per_pixel, per_tap):
    """(n, h, w, c) of a convolution whose im2col matrix X is read from ``image``'s NHWC view
    ``view`` = (shape, strides, offset) as ``read_view`` returns it: k x k windows of stride s on
    the image padded by pad_h rows above and pad_w columns on the left (and below and on the
    right as far as the ho x wo windows reach). ``per_pixel`` and ``per_tap`` are the (what,
    array) pairs of its (n*ho*wo, c_out) and (k*k*c, c_out) operands. Raises ValueError naming
    the problem."""
    shape, strides, offset = view
    if len(shape) != 4:
        raise ValueError(f"{name}: the image view must have 4 dimensions (n, h, w, c), got shape {shape}")
    if k < 1 or s < 1 or min(pad_h, pad_w, ho, wo, c_out) < 0:
        raise ValueError(f"{name}: bad geometry k={k}, stride={s}, pad_h={pad_h}, pad_w={pad_w}, ho={ho}, "
                         f"wo={wo}, c_out={c_out}")
    check_view(image.size, shape, strides, offset, "the image")
    n, h, w, c = shape
    check_size(name, per_pixel[1], n * ho * wo * c_out, f"{per_pixel[0]} (n*ho*wo={n * ho * wo}, c_out={c_out})")
    check_size(name, per_tap[1], k * k * c * c_out, f"{per_tap[0]} (k*k*c={k * k * c}, c_out={c_out})")
    return shape


def _winograd_tiles(name, tiles, n, h, w, c):
    # the 2x2 output tiles (th, tw) of an (n, h, w, c) image's 3x3 convolution, (h - 2) x (w - 2)
    if min(n, c) < 0 or h < 3 or w < 3:
        raise ValueError(f"{name}: needs n, c >= 0 and an image of at least 3x3, got n={n}, h={h}, w={w}, c={c}")
    th, tw = (h - 1) // 2, (w - 1) // 2
    check_size(name, tiles, 16 * n * th * tw * c, f"the tiles (16, n*th*tw={n * th * tw}, c={c})")
    return th, tw


def check_winograd_input(name, image, tiles, n, h, w, c):
    """(th, tw) of a Winograd F(2x2, 3x3) input transform of the (n, h, w, c) ``image`` into the
    (16, n * th * tw, c) ``tiles``, after checking every size. Raises ValueError naming the problem."""
    th, tw = _winograd_tiles(name, tiles, n, h, w, c)
    check_size(name, image, n * h * w * c, f"the image (n={n}, h={h}, w={w}, c={c})")
    return th, tw


def check_winograd_output(name, products, out, n, ho, wo, c):
    """(th, tw) of a Winograd F(2x2, 3x3) output transform of the (16, n * th * tw, c) tile
    ``products`` into ``out`` (n, ho, wo, c), after checking every size."""
    if min(ho, wo) < 1:
        raise ValueError(f"{name}: needs an output of at least 1x1, got ho={ho}, wo={wo}")
    th, tw = _winograd_tiles(name, products, n, ho + 2, wo + 2, c)
    check_size(name, out, n * ho * wo * c, f"out (n={n}, ho={ho}, wo={wo}, c={c})")
    return th, tw


def check_winograd_conv(name, image, kernel, out, n, h, w, c_in, c_out):
    """(th, tw) of a Winograd F(2x2, 3x3) convolution of the (n, h, w, c_in) ``image`` by the
    (16, c_in, c_out) transformed ``kernel`` into ``out`` (n, h - 2, w - 2, c_out)."""
    if min(n, c_in, c_out) < 0 or h < 3 or w < 3:
        raise ValueError(f"{name}: needs n, c_in, c_out >= 0 and an image of at least 3x3, "
                         f"got n={n}, h={h}, w={w}, c_in={c_in}, c_out={c_out}")
    check_size(name, image, n * h * w * c_in, f"the image (n={n}, h={h}, w={w}, c_in={c_in})")
    check_size(name, kernel, 16 * c_in * c_out, f"the kernel (16, c_in={c_in}, c_out={c_out})")
    check_size(name, out, n * (h - 2) * (w - 2) * c_out, f"out (n={n}, ho={h - 2}, wo={w - 2}, c_out={c_out})")
    return (h - 1) // 2, (w - 1) // 2


def check_winograd_weight_grad(name, image, grad, out, n, h, w, c_in, c_out):
    """(th, tw) of the weight gradient (3, 3, c_in, c_out) ``out`` of a stride-1 3x3 convolution of
    the (n, h, w, c_in) ``image`` whose output gradient is ``grad`` (n, h - 2, w - 2, c_out)."""
    if min(n, c_in, c_out) < 0 or h < 3 or w < 3:
        raise ValueError(f"{name}: needs n, c_in, c_out >= 0 and an image of at least 3x3, "
                         f"got n={n}, h={h}, w={w}, c_in={c_in}, c_out={c_out}")
    check_size(name, image, n * h * w * c_in, f"the image (n={n}, h={h}, w={w}, c_in={c_in})")
    check_size(name, grad, n * (h - 2) * (w - 2) * c_out, f"the gradient (n={n}, ho={h - 2}, wo={w - 2}, c_out={c_out})")
    check_size(name, out, 9 * c_in * c_out, f"out (3, 3, c_in={c_in}, c_out={c_out})")
    return (h - 1) // 2, (w - 1) // 2


def check_softmax_xent(name, z, labels, rows, cols, **arrays):
    """Sizes of a fused softmax cross-entropy call: z (and ``out``) (rows, cols), labels and every
    other array one value per row. Raises ValueError naming the array that does not fit."""
    if rows < 0 or cols < 1:
        raise ValueError(f"{name}: need rows >= 0 and cols >= 1, got rows={rows}, cols={cols}")
    check_size(name, z, rows * cols, f"z (rows={rows}, cols={cols})")
    check_size(name, labels, rows, f"labels (rows={rows})")
    for what, arr in arrays.items():
        if what == "out":
            check_size(name, arr, rows * cols, f"out (rows={rows}, cols={cols})")
        else:
            check_size(name, arr, rows, f"{what} (rows={rows})")


def check_softmax(name, rows, cols, **arrays):
    """Sizes of a row-wise softmax call: every array (rows, cols). Raises ValueError naming the misfit."""
    if rows < 0 or cols < 1:
        raise ValueError(f"{name}: need rows >= 0 and cols >= 1, got rows={rows}, cols={cols}")
    for what, arr in arrays.items():
        check_size(name, arr, rows * cols, f"{what} (rows={rows}, cols={cols})")


def check_embedding(name, num_rows, rows, dim, table, ids, picked):
    """Sizes of an embedding kernel call: ``table`` (num_rows, dim), ``ids`` (rows,), ``picked``
    (rows, dim), the rows the ids name (gathered, or the adjoints scattered into the table)."""
    if num_rows < 0 or rows < 0 or dim < 1:
        raise ValueError(f"{name}: need num_rows >= 0, rows >= 0 and dim >= 1, got num_rows={num_rows}, "
                         f"rows={rows}, dim={dim}")
    check_size(name, table, num_rows * dim, f"the table (num_rows={num_rows}, dim={dim})")
    check_size(name, ids, rows, f"ids (rows={rows})")
    check_size(name, picked, rows * dim, f"the rows (rows={rows}, dim={dim})")


def check_labels(name, values, cols):
    """The labels (float32 ids, as an Array holds them) as int64 indices; ValueError for any that is
    not an integer in [0, cols), since the kernels index with them."""
    return class_indices(values, cols, name)


def check_batchnorm(name, rows, cols, full, columns):
    """Sizes of a fused batch-norm call on x (rows, cols): every array in ``full`` has rows * cols
    elements, every one in ``columns`` one per column. Raises ValueError naming the misfit."""
    if rows < 1 or cols < 1:
        raise ValueError(f"{name}: need rows >= 1 and cols >= 1, got rows={rows}, cols={cols}")
    for what, arr in full.items():
        check_size(name, arr, rows * cols, f"{what} (rows={rows}, cols={cols})")
    for what, arr in columns.items():
        check_size(name, arr, cols, f"{what} (cols={cols})")


def check_layernorm(name, rows, cols, full, per_row, per_col):
    """Sizes of a fused layer-norm call on x (rows, cols): every array in ``full`` has rows * cols
    elements, every one in ``per_row`` one per row, every one in ``per_col`` one per column.
    Raises ValueError naming the misfit."""
    if rows < 0 or cols < 1:
        raise ValueError(f"{name}: need rows >= 0 and cols >= 1, got rows={rows}, cols={cols}")
    for what, arr in full.items():
        check_size(name, arr, rows * cols, f"{what} (rows={rows}, cols={cols})")
    for what, arr in per_row.items():
        check_size(name, arr, rows, f"{what} (rows={rows})")
    for what, arr in per_col.items():
        check_size(name, arr, cols, f"{what} (cols={cols})")


def check_bias_add(name, rows, cols, a, bias, out):
    """Sizes of a bias_add call: a and out (rows, cols), bias one per column."""
    if rows < 0 or cols < 1:
        raise ValueError(f"{name}: need rows >= 0 and cols >= 1, got rows={rows}, cols={cols}")
    check_size(name, a, rows * cols, f"a (rows={rows}, cols={cols})")
    check_size(name, out, rows * cols, f"out (rows={rows}, cols={cols})")
    check_size(name, bias, cols, f"bias (cols={cols})")


def check_lstm(name, rows, hidden, gates, states):
    """Sizes of a fused LSTM cell call: every array in ``gates`` has rows * 4 * hidden elements,
    every one in ``states`` rows * hidden. Raises ValueError naming the misfit."""
    if rows < 0 or hidden < 1:
        raise ValueError(f"{name}: need rows >= 0 and hidden >= 1, got rows={rows}, hidden={hidden}")
    for what, arr in gates.items():
        check_size(name, arr, rows * 4 * hidden, f"{what} (rows={rows}, 4 * hidden={4 * hidden})")
    for what, arr in states.items():
        check_size(name, arr, rows * hidden, f"{what} (rows={rows}, hidden={hidden})")
