"""The reference backend: the flat kernel table written in numpy.

This module *defines* what every backend function means. The Cython + OpenMP
backend (``ndarray_backend_cpu``) and the cupy CUDA backend
(``ndarray_backend_cuda``) export the same names with the same arguments and
must agree with this file to float32 rounding.

Conventions shared by every backend
-----------------------------------
* An ``Array`` is a flat float32 buffer of ``size`` elements; ``ptr()`` is its
  address, so two NDArray views can be seen to share memory.
* ``shape``/``strides`` are tuples of ints, strides counted in *elements*,
  ``offset`` an element offset into the flat buffer.
* Element-wise and reduction kernels take *compact* inputs (row-major, offset
  0, buffer size equal to the number of elements); NDArray compacts first.
* Comparisons return 0.0/1.0 floats.
* Sizes are checked at the Python boundary: a mismatch raises ``ValueError``
  naming the argument, never reads or writes out of bounds.
"""
import numpy as np

# shared by the three backends, so each raises the same messages for the same mistakes
from .backend_checks import (
    check_array_size,
    check_batchnorm,
    check_bias_add,
    check_col2im,
    check_conv_implicit,
    check_embedding,
    check_labels,
    check_layernorm,
    check_lstm,
    check_matmul as _check_matmul,
    check_optim as _check_optim,
    check_optim_lists,
    check_reduce as _check_reduce,
    check_reduce_axis as _check_reduce_axis,
    check_same_size,
    check_scalar,
    check_size,
    check_softmax,
    check_softmax_xent,
    check_view,
    check_winograd_input,
    check_winograd_output,
    check_winograd_conv,
    check_winograd_weight_grad,
    prod,
    read_view,
)
from .. import fused_specs
from ..fused_specs import NUMPY
from ..labels import scatter_rows
from .memory_counter import MemoryCounter

__device_name__ = "cpu_numpy"
__tile_size__ = 8


# Bytes held by live Arrays (memory_counter.py): memory_stats() and reset_peak_memory().
_memory = MemoryCounter()
_account = _memory.account
memory_stats = _memory.memory_stats
reset_peak_memory = _memory.reset_peak_memory


class Array:
    """A flat float32 buffer."""

    __slots__ = ("array",)

    def __init__(self, size):
        self.array = np.empty(check_array_size(size), dtype=np.float32)
        _account(self.array.nbytes)

    def __del__(self):
        array = getattr(self, "array", None)
        if array is not None and _account is not None:  # (None: the interpreter is shutting down)
            _account(-array.nbytes)

    @property
    def size(self):
        return self.array.size

    def ptr(self):
        return self.array.ctypes.data


# ---------------------------------------------------------------- transfers

def _view(a, shape, strides, offset, what="a"):
    check_view(a.size, shape, strides, offset, what)
    item = a.array.itemsize
    return np.lib.stride_tricks.as_strided(
        a.array[offset:] if a.size else a.array, shape, tuple(s * item for s in strides)
    )


def to_numpy(a, shape, strides, offset):
    """A new numpy float32 array with the elements of the strided view."""
    shape, strides, offset = read_view("to_numpy", shape, strides, offset)
    return _view(a, shape, strides, offset).copy()


def from_numpy(arr, out):
    """Copy a numpy array (any float dtype, any layout) into out in row-major order."""
    check_size("from_numpy", out, np.size(arr), "out")
    out.array[:] = np.asarray(arr, dtype=np.float32).ravel()


def fill(out, val):
    out.array.fill(check_scalar("fill", val))


# ---------------------------------------------------------------- strided copies

def compact(a, out, shape, strides, offset):
    """out[i] = a[offset + sum_k idx_k(i) * strides[k]], i running row-major over shape."""
    shape, strides, offset = read_view("compact", shape, strides, offset)
    check_size("compact", out, prod(shape), "out")
    out.array[:] = _view(a, shape, strides, offset).ravel()


def ewise_setitem(a, out, shape, strides, offset):
    """Write the compact a into the strided view (shape, strides, offset) of out."""
    shape, strides, offset = read_view("ewise_setitem", shape, strides, offset)
    check_size("ewise_setitem", a, prod(shape), "a")
    _view(out, shape, strides, offset, "out")[...] = a.array.reshape(shape)


def scalar_setitem(size, val, out, shape, strides, offset):
    """Set every element of the strided view of out to val; size == prod(shape)."""
    shape, strides, offset = read_view("scalar_setitem", shape, strides, offset)
    if size != prod(shape):
        raise ValueError(f"scalar_setitem: size {size} != prod(shape {tuple(shape)})")
    _view(out, shape, strides, offset, "out")[...] = check_scalar("scalar_setitem", val)


# ---------------------------------------------------------------- element-wise

def _ewise(name, fn):
    def kernel(a, b, out):
        check_same_size(name, a=a, b=b, out=out)
        out.array[:] = fn(a.array, b.array)
    kernel.__name__ = name
    kernel.__doc__ = f"out = {name[6:]}(a, b) element-wise on compact arrays of equal size."
    return kernel


def _scalar(name, fn):
    def kernel(a, val, out):
        check_same_size(name, a=a, out=out)
        out.array[:] = fn(a.array, np.float32(check_scalar(name, val)))
    kernel.__name__ = name
    kernel.__doc__ = f"out = {name[7:]}(a, val) element-wise with a float scalar."
    return kernel


def _unary(name, fn):
    def kernel(a, out):
        check_same_size(name, a=a, out=out)
        out.array[:] = fn(a.array)
    kernel.__name__ = name
    kernel.__doc__ = f"out = {name[6:]}(a) element-wise."
    return kernel


ewise_add = _ewise("ewise_add", np.add)
ewise_mul = _ewise("ewise_mul", np.multiply)
ewise_div = _ewise("ewise_div", np.divide)
ewise_maximum = _ewise("ewise_maximum", np.maximum)
ewise_eq = _ewise("ewise_eq", lambda x, y: (x == y).astype(np.float32))
ewise_ge = _ewise("ewise_ge", lambda x, y: (x >= y).astype(np.float32))
# The activations' adjoints (out_grad x): relu's at its input y, tanh's and sigmoid's at their
# output y. (1 - y)(1 + y) is 1 - y**2 without the cancellation near |y| = 1.
ewise_relu_backward = _ewise("ewise_relu_backward", lambda x, y: x * (y > 0).astype(np.float32))
ewise_tanh_backward = _ewise("ewise_tanh_backward", lambda x, y: x * ((np.float32(1) - y) * (np.float32(1) + y)))
ewise_sigmoid_backward = _ewise("ewise_sigmoid_backward", lambda x, y: x * y * (np.float32(1) - y))

scalar_add = _scalar("scalar_add", np.add)
scalar_mul = _scalar("scalar_mul", np.multiply)
scalar_div = _scalar("scalar_div", np.divide)
scalar_power = _scalar("scalar_power", np.power)
scalar_maximum = _scalar("scalar_maximum", np.maximum)
scalar_eq = _scalar("scalar_eq", lambda x, v: (x == v).astype(np.float32))
scalar_ge = _scalar("scalar_ge", lambda x, v: (x >= v).astype(np.float32))

ewise_log = _unary("ewise_log", np.log)
ewise_exp = _unary("ewise_exp", np.exp)
ewise_tanh = _unary("ewise_tanh", np.tanh)


# ---------------------------------------------------------------- matmul

def matmul(a, b, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p), all compact row-major."""
    _check_matmul("matmul", a, b, out, m, n, p)
    out.array[:] = (a.array.reshape(m, n) @ b.array.reshape(n, p)).ravel()


def matmul_t(a, b, out, m, n, p, trans_a, trans_b):
    """out (m, p) = A @ B, where a holds A (m, n) row-major or, when trans_a, the row-major (n, m)
    array whose transpose A is; likewise b holds B (n, p) or, when trans_b, a (p, n) array (an
    extension: NDArray multiplies a transposed view with it instead of copying it first)."""
    _check_matmul("matmul_t", a, b, out, m, n, p)
    A = a.array.reshape(n, m).T if trans_a else a.array.reshape(m, n)
    B = b.array.reshape(p, n).T if trans_b else b.array.reshape(n, p)
    out.array[:] = (A @ B).ravel()


def matmul_bias(a, b, bias, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p) + bias (p elements) on every row: a linear layer (an
    extension: the CPU backend adds the bias as it stores each tile of the product)."""
    _check_matmul("matmul_bias", a, b, out, m, n, p)
    check_size("matmul_bias", bias, p, f"bias (p={p})")
    out.array[:] = (a.array.reshape(m, n) @ b.array.reshape(n, p) + bias.array).ravel()


def embedding_gather(weight, ids, out, num_rows, rows, dim):
    """out (rows, dim) = the rows of weight (num_rows, dim) that ids (rows integer-valued floats,
    each in [0, num_rows)) name: an embedding's lookup (an extension)."""
    check_embedding("embedding_gather", num_rows, rows, dim, weight, ids, out)
    idx = check_labels("embedding_gather", ids.array, num_rows)
    out.array[:] = weight.array.reshape(num_rows, dim)[idx].ravel()


def embedding_scatter(g, ids, out, num_rows, rows, dim):
    """out (num_rows, dim) = one_hot(ids)^T @ g: row n the sum of the rows of g (rows, dim) whose
    id is n, 0 for an id no row has; an embedding's gradient (an extension)."""
    check_embedding("embedding_scatter", num_rows, rows, dim, out, ids, g)
    idx = check_labels("embedding_scatter", ids.array, num_rows)
    out.array[:] = scatter_rows(g.array.reshape(rows, dim), idx, num_rows).ravel()


def matmul_batched(a, b, out, batch, m, n, p):
    """out[k] (m, p) = a[k] (m, n) @ b[k] (n, p) for k < batch (an extension used by NDArray's batched @)."""
    _check_matmul("matmul_batched", a, b, out, m, n, p, batch)
    out.array[:] = np.matmul(a.array.reshape(batch, m, n), b.array.reshape(batch, n, p)).ravel()


def matmul_tiled(a, b, out, m, n, p):
    """matmul on the tiled layout: a is (m/T, n/T, T, T), b (n/T, p/T, T, T), out (m/T, p/T, T, T).

    T is ``__tile_size__``; m, n, p must be multiples of T. Each T x T tile is
    stored contiguously, so a tile product touches three contiguous blocks.
    """
    t = __tile_size__
    if m % t or n % t or p % t:
        raise ValueError(f"matmul_tiled: m={m}, n={n}, p={p} must be multiples of the tile size {t}")
    _check_matmul("matmul_tiled", a, b, out, m, n, p)
    at = a.array.reshape(m // t, n // t, t, t)
    bt = b.array.reshape(n // t, p // t, t, t)
    out.array[:] = np.einsum("ikab,kjbc->ijac", at, bt).ravel()


# ---------------------------------------------------------------- reductions

def reduce_max(a, out, reduce_size):
    """out[i] = max of the contiguous block a[i*reduce_size:(i+1)*reduce_size]."""
    _check_reduce("reduce_max", a, out, reduce_size)
    out.array[:] = a.array[: out.size * reduce_size].reshape(-1, reduce_size).max(axis=1)


def reduce_sum(a, out, reduce_size):
    """out[i] = sum of the contiguous block a[i*reduce_size:(i+1)*reduce_size]."""
    _check_reduce("reduce_sum", a, out, reduce_size)
    out.array[:] = a.array[: out.size * reduce_size].reshape(-1, reduce_size).sum(axis=1)


def reduce_sum_axis(a, out, outer, reduce_size, inner):
    """Compact a seen as (outer, reduce_size, inner); out (outer, inner) is the sum over the middle axis.

    An extension: reducing a leading or middle axis without first copying the
    array into a transposed layout. ``reduce_sum`` is the case inner == 1.
    """
    _check_reduce_axis("reduce_sum_axis", a, out, outer, reduce_size, inner)
    out.array[:] = a.array.reshape(outer, reduce_size, inner).sum(axis=1).ravel()


def reduce_max_axis(a, out, outer, reduce_size, inner):
    """Like reduce_sum_axis with max."""
    _check_reduce_axis("reduce_max_axis", a, out, outer, reduce_size, inner)
    out.array[:] = a.array.reshape(outer, reduce_size, inner).max(axis=1).ravel()


# ---------------------------------------------------------------- optimizer steps
# Extensions: one pass over a parameter instead of a dozen element-wise
# kernels (and as many temporaries). Every argument is a compact Array of the
# same size; the arithmetic is float32, each scalar rounded to float32 once,
# in the order written below. ``out`` may be ``param`` itself.

def adam_update(param, grad, m, v, out, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """One Adam step, element-wise (m and v are updated in place):

        g   = grad + weight_decay * param          (grad itself when weight_decay == 0)
        m   = beta1 * m + (1 - beta1) * g
        v   = beta2 * v + (1 - beta2) * (g * g)
        out = param - (m * (lr / c1)) / (sqrt(v * (1 / c2)) + eps)

    c1 = 1 - beta1**t and c2 = 1 - beta2**t are the bias corrections of step t;
    lr / c1 and 1 / c2 are formed in double precision, then rounded to float32.
    Starting from m = v = 0 this is exactly the unfused update of the first step.
    """
    lr, beta1, beta2, eps, weight_decay, c1, c2 = _check_optim(
        "adam_update", dict(param=param, grad=grad, m=m, v=v, out=out),
        (lr, beta1, beta2, eps, weight_decay, c1, c2))
    f = np.float32
    p, g = param.array, grad.array
    if weight_decay != 0.0:
        g = g + p * f(weight_decay)
    m.array[:] = m.array * f(beta1) + g * f(1.0 - beta1)
    v.array[:] = v.array * f(beta2) + (g * g) * f(1.0 - beta2)
    out.array[:] = p - (m.array * f(lr / c1)) / (np.sqrt(v.array * f(1.0 / c2)) + f(eps))


def adam_update_many(params, grads, ms, vs, outs, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """adam_update on each (params[i], grads[i], ms[i], vs[i], outs[i]) of five lists of one
    length, with the same scalars: a model's whole step in one call, which a native backend runs
    as one pass over all of the arrays (their sizes may differ, and may be 0)."""
    count, _ = check_optim_lists("adam_update_many", (lr, beta1, beta2, eps, weight_decay, c1, c2),
                                 params=params, grads=grads, ms=ms, vs=vs, outs=outs)
    for i in range(count):
        adam_update(params[i], grads[i], ms[i], vs[i], outs[i], lr, beta1, beta2, eps, weight_decay, c1, c2)


def sgd_update(param, grad, u, out, lr, momentum, weight_decay):
    """One SGD step, element-wise, with needle's moving-average momentum:

        g   = grad + weight_decay * param          (grad itself when weight_decay == 0)
        u   = momentum * u + (1 - momentum) * g    (in place; skipped when u is None)
        out = param - lr * u                       (lr * g when u is None)

    Starting from u = 0 the first step gives u = (1 - momentum) * g exactly.
    """
    arrays = dict(param=param, grad=grad, out=out)
    if u is not None:
        arrays["u"] = u
    lr, momentum, weight_decay = _check_optim("sgd_update", arrays, (lr, momentum, weight_decay))
    f = np.float32
    p, g = param.array, grad.array
    if weight_decay != 0.0:
        g = g + p * f(weight_decay)
    if u is not None:
        u.array[:] = u.array * f(momentum) + g * f(1.0 - momentum)
        g = u.array
    out.array[:] = p - g * f(lr)


# ---------------------------------------------------------------- convolution

def col2im(cols, out, n, h, w, c, k, s):
    """The adjoint of the im2col window view of an NHWC image (an extension used by convolution).

    cols is compact (n, ho, wo, k, k, c) with ho = (h - k) // s + 1, wo = (w - k) // s + 1;
    out, compact (n, h, w, c), is overwritten with

        out[b, y, x, ch] = sum over i*s + ki == y, j*s + kj == x of cols[b, i, j, ki, kj, ch],

    the terms added in order of increasing (ki, kj); pixels no window covers are 0.
    """
    ho, wo = check_col2im("col2im", cols, out, n, h, w, c, k, s)
    img = out.array.reshape(n, h, w, c)
    img[...] = 0.0
    windows = cols.array.reshape(n, ho, wo, k, k, c)
    for ki in range(k):
        for kj in range(k):
            img[:, ki:ki + s * (ho - 1) + 1:s, kj:kj + s * (wo - 1) + 1:s, :] += windows[:, :, :, ki, kj, :]


def _implicit_cols(a, view, k, s, pad_h, pad_w, ho, wo):
    """The im2col matrix X (n*ho*wo, k*k*c) that conv_implicit multiplies, made explicit."""
    n, h, w, c = view[0]
    # zero padding as far as the windows reach (none needed past the image's own rows)
    hp, wp = max(h + pad_h, (ho - 1) * s + k), max(w + pad_w, (wo - 1) * s + k)
    padded = np.zeros((n, hp, wp, c), np.float32)
    padded[:, pad_h:pad_h + h, pad_w:pad_w + w] = _view(a, *view, what="the image")
    st = padded.strides
    windows = np.lib.stride_tricks.as_strided(padded, (n, ho, wo, k, k, c),
                                              (st[0], st[1] * s, st[2] * s, st[1], st[2], st[3]))
    return windows.reshape(n * ho * wo, k * k * c)


def conv_implicit(a, shape, strides, offset, w, out, k, s, pad_h, pad_w, ho, wo, c_out):
    """out (n*ho*wo, c_out) = X @ w for the compact w (k*k*c, c_out), where X is the im2col matrix
    of the NHWC image given as the strided view (shape (n, h, w, c), strides, offset) of a:

        X[(b*ho + i)*wo + j, (ki*k + kj)*c + ch] = image[b, i*s + ki - pad_h, j*s + kj - pad_w, ch],

    0 where that falls outside the image (zero padding, on every side). The native backends
    never make X: they build a few of its rows at a time where the product reads them, so a
    convolution costs no im2col matrix in memory, nor a padded or compact copy of the image."""
    view = read_view("conv_implicit", shape, strides, offset)
    check_conv_implicit("conv_implicit", a, view, k, s, pad_h, pad_w, ho, wo, c_out, ("out", out), ("w", w))
    cols = _implicit_cols(a, view, k, s, pad_h, pad_w, ho, wo)
    out.array[:] = (cols @ w.array.reshape(cols.shape[1], c_out)).ravel()


def conv_implicit_weight_grad(a, shape, strides, offset, g, out, k, s, pad_h, pad_w, ho, wo, c_out):
    """out (k*k*c, c_out) = X^T @ g for the compact g (n*ho*wo, c_out): the weight gradient of
    conv_implicit, X the im2col matrix of the image view described there."""
    view = read_view("conv_implicit_weight_grad", shape, strides, offset)
    check_conv_implicit("conv_implicit_weight_grad", a, view, k, s, pad_h, pad_w, ho, wo, c_out, ("g", g),
                        ("out", out))
    cols = _implicit_cols(a, view, k, s, pad_h, pad_w, ho, wo)
    out.array[:] = (cols.T @ g.array.reshape(cols.shape[0], c_out)).ravel()


# Winograd F(2x2, 3x3): a 3x3 convolution of stride 1 as 16 matrix products over the
# channels, one per entry of a transformed 4x4 tile. Tile (b, ti, tj) of an NHWC image is
# d[i][j] = image[b, 2ti + i, 2tj + j] (zero outside the image) and gives the outputs
# (2ti + i, 2tj + j), i, j < 2, of its (h - 2) x (w - 2) convolution:
#   Y = A^T [(G g G^T) . (B^T d B)] A,
#   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  A^T = [1 1 1 0; 0 1 -1 -1],
# with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] for the kernel g (the caller's part).
# Tiles are numbered t = (b * th + ti) * tw + tj, th = (h - 1) // 2, tw = (w - 1) // 2.

def _winograd_bt(d0, d1, d2, d3):
    return d0 - d2, d1 + d2, d2 - d1, d1 - d3


def winograd_input(a, out, n, h, w, c):
    """out (16, n*th*tw, c) = the tiles of the compact NHWC image a (n, h, w, c), transformed:
    out[4u + v, t, ch] = (B^T d B)[u, v] for tile t's d of channel ch."""
    th, tw = check_winograd_input("winograd_input", a, out, n, h, w, c)
    img = np.zeros((n, 2 * th + 2, 2 * tw + 2, c), np.float32)
    img[:, :h, :w] = a.array.reshape(n, h, w, c)
    d = [[img[:, i:i + 2 * th:2, j:j + 2 * tw:2] for j in range(4)] for i in range(4)]
    rows = [_winograd_bt(*(d[i][j] for i in range(4))) for j in range(4)]  # rows[j][u] = (B^T d)[u, j]
    tiles = out.array.reshape(4, 4, n, th, tw, c)
    for u in range(4):
        tiles[u] = np.stack(_winograd_bt(*(rows[j][u] for j in range(4))))


def winograd_output(m, out, n, ho, wo, c):
    """out (n, ho, wo, c) = the 2x2 output blocks of the 16 products m (16, n*th*tw, c),
    th = (ho + 1) // 2: out[b, 2ti + i, 2tj + j, ch] = (A^T M A)[i, j] inside the image."""
    th, tw = check_winograd_output("winograd_output", m, out, n, ho, wo, c)
    q = m.array.reshape(4, 4, n, th, tw, c)
    s = (q[0] + q[1] + q[2], q[1] - q[2] - q[3])  # A^T M
    img = np.empty((n, 2 * th, 2 * tw, c), np.float32)
    for i in range(2):
        img[:, i::2, 0::2] = s[i][0] + s[i][1] + s[i][2]
        img[:, i::2, 1::2] = s[i][1] - s[i][2] - s[i][3]
    out.array[:] = img[:, :ho, :wo].reshape(-1)


def winograd_conv3x3(a, u, out, n, h, w, c_in, c_out):
    """out (n, h-2, w-2, c_out) = the stride-1 3x3 convolution of the compact NHWC image a
    (n, h, w, c_in) whose kernel g has the transform u (16, c_in, c_out), u[4p + q] = (G g G^T)[p, q]:
    winograd_output of the 16 products winograd_input(a)[t] @ u[t]."""
    th, tw = check_winograd_conv("winograd_conv3x3", a, u, out, n, h, w, c_in, c_out)
    tiles = Array(16 * n * th * tw * c_in)
    winograd_input(a, tiles, n, h, w, c_in)
    products = Array(16 * n * th * tw * c_out)
    products.array[:] = np.matmul(tiles.array.reshape(16, -1, c_in), u.array.reshape(16, c_in, c_out)).ravel()
    winograd_output(products, out, n, h - 2, w - 2, c_out)


def _winograd_g(e0, e1):
    # G' e for F(3x3, 2x2): G' = [1 0; 1/2 1/2; 1/2 -1/2; 0 -1]
    half = np.float32(0.5)
    return e0, half * (e0 + e1), half * (e0 - e1), -e1


def winograd_weight_grad(a, g, out, n, h, w, c_in, c_out):
    """out (3, 3, c_in, c_out) = the weight gradient of the stride-1 3x3 convolution of the compact
    NHWC image a (n, h, w, c_in) whose output gradient is g (n, h-2, w-2, c_out):
    out[ki, kj, ci, co] = sum over b, y, x of a[b, y + ki, x + kj, ci] * g[b, y, x, co].

    Winograd F(3x3, 2x2) over the forward's tiles: with the same points as F(2x2, 3x3), the input
    tiles transform by the same B^T (winograd_input); each tile's 2x2 block e of g by
    G' = [1 0; 1/2 1/2; 1/2 -1/2; 0 -1]; the 16 products V[t]^T @ E[t] are summed over the tiles
    and the sums M give dW = A'^T M A' per channel pair, A'^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1]."""
    th, tw = check_winograd_weight_grad("winograd_weight_grad", a, g, out, n, h, w, c_in, c_out)
    tiles = Array(16 * n * th * tw * c_in)
    winograd_input(a, tiles, n, h, w, c_in)
    grad = np.zeros((n, 2 * th, 2 * tw, c_out), np.float32)
    grad[:, :h - 2, :w - 2] = g.array.reshape(n, h - 2, w - 2, c_out)
    e = [[grad[:, i::2, j::2] for j in range(2)] for i in range(2)]
    rows = [_winograd_g(e[0][j], e[1][j]) for j in range(2)]  # rows[j][u] = (G' e)[u, j]
    grad_tiles = np.stack([np.stack(_winograd_g(rows[0][u], rows[1][u])) for u in range(4)])
    m = np.matmul(tiles.array.reshape(16, -1, c_in).transpose(0, 2, 1), grad_tiles.reshape(16, -1, c_out))
    m = m.reshape(4, 4, c_in, c_out)
    s = (m[0] + m[1] + m[2], m[1] - m[2], m[1] + m[2] + m[3])  # A'^T M
    dw = np.stack([np.stack((r[0] + r[1] + r[2], r[1] - r[2], r[1] + r[2] + r[3])) for r in s])
    out.array[:] = dw.ravel()


# ---------------------------------------------------------------- softmax cross-entropy
# Extensions used by nn.SoftmaxLoss: one pass over each row of logits for the
# loss, one for its gradient, where the same formulas written with array
# operations take a max, a broadcast, an exp, a sum, a log, a one-hot product
# and as many temporaries of the logits' size. Labels are float32 ids (an Array
# holds float32), each an integer in [0, cols); z is compact (rows, cols).

def softmax_xent(z, labels, lse, loss, rows, cols):
    """Row-wise log-sum-exp and cross-entropy of logits z against integer labels:

        m_i     = max_j z[i, j]
        lse[i]  = m_i + log(sum_j exp(z[i, j] - m_i))
        loss[i] = lse[i] - z[i, labels[i]]
    """
    check_softmax_xent("softmax_xent", z, labels, rows, cols, lse=lse, loss=loss)
    y = check_labels("softmax_xent", labels.array, cols)
    if rows == 0:
        return
    loss.array[:], lse.array[:] = fused_specs.softmax_cross_entropy(NUMPY, z.array.reshape(rows, cols), y)


def softmax_xent_grad(z, labels, lse, g, out, rows, cols):
    """The gradient of g-weighted rows of softmax_xent's loss with respect to z:

        out[i, j] = g[i] * (exp(z[i, j] - lse[i]) - (1 if j == labels[i] else 0))
    """
    check_softmax_xent("softmax_xent_grad", z, labels, rows, cols, lse=lse, g=g, out=out)
    y = check_labels("softmax_xent_grad", labels.array, cols)
    out.array.reshape(rows, cols)[...] = fused_specs.softmax_cross_entropy_grad(
        NUMPY, z.array.reshape(rows, cols), y, lse.array, g.array)


# ---------------------------------------------------------------- softmax
# Extensions used by ops.softmax (an attention's weights): each row of a compact x
# (rows, cols) in one pass each way, where array operations take a max, a broadcast,
# an exp, a sum and a division forward and five more kernels back.

def softmax(x, out, rows, cols):
    """out[r] = exp(x[r] - max x[r]) / sum_c exp(x[r, c] - max x[r]) for every row (float32). out may be x."""
    check_softmax("softmax", rows, cols, x=x, out=out)
    if rows == 0:
        return
    out.array.reshape(rows, cols)[...] = fused_specs.softmax(NUMPY, x.array.reshape(rows, cols))


def softmax_backward(y, g, out, rows, cols):
    """out[r, c] = y[r, c] * (g[r, c] - sum_c' g[r, c'] * y[r, c']): softmax's adjoint for out_grad g
    at its output y, the row sums in float64. out may be y or g."""
    check_softmax("softmax_backward", rows, cols, y=y, g=g, out=out)
    if rows == 0:
        return
    out.array.reshape(rows, cols)[...] = fused_specs.softmax_backward(
        NUMPY, y.array.reshape(rows, cols), g.array.reshape(rows, cols))


# ---------------------------------------------------------------- batch normalization
# Extensions used by nn.BatchNorm1d/2d: x is compact (rows, cols) with one
# column per channel (NHWC images seen as (N*H*W, C)). Column sums accumulate
# in float64 and are rounded to float32 once, so the three backends agree
# closely whatever order their threads add in.

def batchnorm_stats(x, mean, var, rows, cols):
    """Per column: mean[c] = sum_r x[r, c] / rows and the biased variance
    var[c] = sum_r (x[r, c] - mean[c])**2 / rows, mean in float64 inside the second sum."""
    check_batchnorm("batchnorm_stats", rows, cols, dict(x=x), dict(mean=mean, var=var))
    mean.array[:], var.array[:] = fused_specs.batchnorm_stats(NUMPY, x.array.reshape(rows, cols))


def batchnorm_fold(mean, var, weight, bias, running_mean, running_var, invstd, scale, shift, new_mean, new_var,
                   cols, eps, momentum):
    """Everything a training-mode batch norm works out per channel between its two passes over
    the data, from the batch's mean and biased variance (cols each), in one call:

        invstd   = 1 / sqrt(var + eps)                  (in float64, rounded once)
        scale    = weight * invstd,  shift = bias - mean * scale
        new_mean = running_mean * (1 - momentum) + mean * momentum
        new_var  = running_var * (1 - momentum) + var * momentum

    (float32 arithmetic with (1 - momentum) and momentum rounded to float32), where the same
    formulas as array operations take eleven kernels."""
    check_batchnorm("batchnorm_fold", 1, cols, {}, dict(
        mean=mean, var=var, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var,
        invstd=invstd, scale=scale, shift=shift, new_mean=new_mean, new_var=new_var))
    eps, momentum = check_scalar("batchnorm_fold", eps), check_scalar("batchnorm_fold", momentum)
    results = fused_specs.batchnorm_fold(NUMPY, mean.array, var.array, weight.array, bias.array,
                                         running_mean.array, running_var.array, eps, momentum)
    for out, value in zip((invstd, scale, shift, new_mean, new_var), results):
        out.array[:] = value


def bias_add(a, bias, out, rows, cols):
    """out[r, c] = a[r, c] + bias[c] (float32): a linear layer's bias added to its product in one
    pass, instead of a copy of the broadcast bias and an add. out may be a."""
    check_bias_add("bias_add", rows, cols, a, bias, out)
    out.array.reshape(rows, cols)[...] = a.array.reshape(rows, cols) + bias.array


def batchnorm_apply(x, scale, shift, out, rows, cols, relu=False):
    """out[r, c] = x[r, c] * scale[c] + shift[c] (float32), the normalisation with the weight,
    bias, mean and inverse std folded into one scale and one shift per column; with ``relu``,
    max(that, 0): a batch norm and the ReLU after it in one pass."""
    check_batchnorm("batchnorm_apply", rows, cols, dict(x=x, out=out), dict(scale=scale, shift=shift))
    out.array.reshape(rows, cols)[...] = fused_specs.batchnorm_apply(
        NUMPY, x.array.reshape(rows, cols), scale.array, shift.array, relu)


def batchnorm_backward(x, dy, mean, invstd, weight, dx, dweight, dbias, rows, cols, batch_stats, relu_out=None):
    """Gradients of out = (x - mean) * invstd * weight + bias given dy, with xhat = (x - mean) * invstd:

        dbias[c]   = sum_r dy[r, c]
        dweight[c] = sum_r dy[r, c] * xhat[r, c]
        dx[r, c]   = k[c] * (dy[r, c] - dbias[c] / rows - xhat[r, c] * dweight[c] / rows)   (batch_stats)
        dx[r, c]   = k[c] * dy[r, c]                                                      (otherwise)

    with k = weight * invstd. ``batch_stats`` says mean and invstd are the batch's own (training),
    so they depend on x; otherwise (eval: running statistics) they are constants. The sums
    accumulate in float64 and the dx formula runs in float64 per element, rounded once.

    ``relu_out`` (rows, cols), when given, is the output of a ReLU after the batch norm: dy is
    its adjoint, and dy[r, c] counts only where relu_out[r, c] > 0 (0 elsewhere), so the ReLU's
    gradient takes no pass of its own.
    """
    full = dict(x=x, dy=dy, dx=dx) if relu_out is None else dict(x=x, dy=dy, dx=dx, relu_out=relu_out)
    check_batchnorm("batchnorm_backward", rows, cols, full,
                    dict(mean=mean, invstd=invstd, weight=weight, dweight=dweight, dbias=dbias))
    matrix = lambda a: a.array.reshape(rows, cols)  # noqa: E731
    dx.array.reshape(rows, cols)[...], dweight.array[:], dbias.array[:] = fused_specs.batchnorm_backward(
        NUMPY, matrix(x), matrix(dy), mean.array, invstd.array, weight.array, batch_stats,
        None if relu_out is None else matrix(relu_out))


# ---------------------------------------------------------------- layer normalization
# Extensions used by nn.LayerNorm1d: x is compact (rows, cols) and each row is normalised
# over its cols features; weight and bias have one value per column. Row statistics and
# column sums accumulate in float64, as batch norm's do.

def layernorm(x, weight, bias, out, mean, invstd, rows, cols, eps):
    """Per row r, with the row's mean and biased variance:

        mean[r]   = sum_c x[r, c] / cols
        invstd[r] = 1 / sqrt(sum_c (x[r, c] - mean[r])**2 / cols + eps)
        out[r, c] = (x[r, c] - mean[r]) * invstd[r] * weight[c] + bias[c]

    mean and invstd are kept for layernorm_backward."""
    check_layernorm("layernorm", rows, cols, dict(x=x, out=out), dict(mean=mean, invstd=invstd),
                    dict(weight=weight, bias=bias))
    eps = check_scalar("layernorm", eps)
    out.array.reshape(rows, cols)[...], mean.array[:], invstd.array[:] = fused_specs.layernorm(
        NUMPY, x.array.reshape(rows, cols), weight.array, bias.array, eps)


def layernorm_backward(x, dy, mean, invstd, weight, dx, dweight, dbias, rows, cols):
    """Gradients of layernorm's out given dy, with xhat = (x - mean[r]) * invstd[r] and
    gw = dy * weight:

        dbias[c]   = sum_r dy[r, c]
        dweight[c] = sum_r dy[r, c] * xhat[r, c]
        dx[r, c]   = invstd[r] * (gw[r, c] - sum_c' gw[r, c'] / cols - xhat[r, c] * sum_c' gw * xhat / cols)

    in float64, rounded once."""
    check_layernorm("layernorm_backward", rows, cols, dict(x=x, dy=dy, dx=dx), dict(mean=mean, invstd=invstd),
                    dict(weight=weight, dweight=dweight, dbias=dbias))
    dx.array.reshape(rows, cols)[...], dweight.array[:], dbias.array[:] = fused_specs.layernorm_backward(
        NUMPY, x.array.reshape(rows, cols), dy.array.reshape(rows, cols), mean.array, invstd.array, weight.array)


# ---------------------------------------------------------------- RMS normalization
# Extensions used by nn.RMSNorm1d: each row of a compact x (rows, cols) scaled by the inverse of its
# root mean square, as layernorm without the centring and the bias, in float64, rounded once.

def rmsnorm(x, weight, out, invrms, rows, cols, eps):
    """Per row r:

        invrms[r] = 1 / sqrt(sum_c x[r, c]**2 / cols + eps)
        out[r, c] = x[r, c] * invrms[r] * weight[c]

    invrms is kept for rmsnorm_backward. out may be x."""
    check_layernorm("rmsnorm", rows, cols, dict(x=x, out=out), dict(invrms=invrms), dict(weight=weight))
    eps = check_scalar("rmsnorm", eps)
    out.array.reshape(rows, cols)[...], invrms.array[:] = fused_specs.rmsnorm(
        NUMPY, x.array.reshape(rows, cols), weight.array, eps)


def rmsnorm_backward(x, dy, invrms, weight, dx, dweight, rows, cols):
    """Gradients of rmsnorm's out given dy, with xhat = x[r, c] * invrms[r] and gw = dy * weight:

        dweight[c] = sum_r dy[r, c] * xhat[r, c]
        dx[r, c]   = invrms[r] * (gw[r, c] - xhat[r, c] * sum_c' gw * xhat / cols)

    in float64, rounded once. dx may be dy."""
    check_layernorm("rmsnorm_backward", rows, cols, dict(x=x, dy=dy, dx=dx), dict(invrms=invrms),
                    dict(weight=weight, dweight=dweight))
    dx.array.reshape(rows, cols)[...], dweight.array[:] = fused_specs.rmsnorm_backward(
        NUMPY, x.array.reshape(rows, cols), dy.array.reshape(rows, cols), invrms.array, weight.array)


# ---------------------------------------------------------------- LSTM cell
# Extensions used by nn.LSTMCell: the element-wise part of one step, from the gate
# pre-activations z (rows, 4 * hidden), laid out [i | f | g | o] in each row, and the
# previous cell c0 (rows, hidden). sigmoid(a) is (tanh(a / 2) + 1) / 2, as ops.sigmoid
# computes it (it never overflows).

def lstm_cell(z, c0, h, c, rows, hidden):
    """One step's new cell and hidden state:

        i, f, o = sigmoid(z_i), sigmoid(z_f), sigmoid(z_o);  g = tanh(z_g)
        c = f * c0 + i * g;  h = o * tanh(c)
    """
    check_lstm("lstm_cell", rows, hidden, dict(z=z), dict(c0=c0, h=h, c=c))
    H, C = fused_specs.lstm_cell(NUMPY, z.array.reshape(rows, 4 * hidden), c0.array.reshape(rows, hidden))
    h.array[:], c.array[:] = H.ravel(), C.ravel()


def lstm_cell_backward(z, c0, dh, dc, dz, dc0, rows, hidden):
    """The adjoints of lstm_cell's inputs given those of its outputs (dh, dc), c recomputed:

        t = tanh(c);  d = dc + dh * o * (1 - t * t)
        dz_i = d * g * i * (1 - i);  dz_f = d * c0 * f * (1 - f)
        dz_g = d * i * (1 - g * g);  dz_o = dh * t * o * (1 - o);  dc0 = d * f
    """
    check_lstm("lstm_cell_backward", rows, hidden, dict(z=z, dz=dz), dict(c0=c0, dh=dh, dc=dc, dc0=dc0))
    state = lambda a: a.array.reshape(rows, hidden)  # noqa: E731
    DZ, DC0 = fused_specs.lstm_cell_backward(NUMPY, z.array.reshape(rows, 4 * hidden), state(c0), state(dh),
                                             state(dc))
    dz.array[:], dc0.array[:] = DZ.ravel(), DC0.ravel()
