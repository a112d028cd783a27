"""Convolution as a matrix product (im2col), and the flip/dilate ops around it.

Layout: images are NHWC ``(N, H, W, C)``, weights ``(K, K, C_in, C_out)``.
NHWC keeps the channels of one pixel contiguous, so a K x K window of all
channels is a block that ``as_strided`` can describe without copying:

    cols[n, i, j, ki, kj, c] = A[n, i*s + ki, j*s + kj, c]

with strides ``(sN, s*sH, s*sW, sH, sW, sC)``. Reshaping ``cols`` to
``(N*Ho*Wo, K*K*C_in)`` is the one copy (im2col proper); multiplying by the
weight seen as ``(K*K*C_in, C_out)`` is the convolution.

A 3x3 convolution of stride 1 with enough channels runs as Winograd's F(2x2, 3x3)
instead, where the device has its tile transforms: 16 products of (tiles, C_in) by
(C_in, C_out), 2.25x fewer multiply-adds than im2col's product and no im2col copy.
"""
import functools

import numpy

from ..autograd import SavedForBackward, Tensor, TensorOp
from ..backend_selection import array_api, device_of, element_strides
from ..shapes import normalize_axes
from .ops_mathematic import Transpose, crop, reshape, summation, transpose


class Flip(TensorOp):
    """out = a reversed along ``axes``.  da = flip(g, axes)."""

    def __init__(self, axes):
        self.axes = (axes,) if isinstance(axes, int) else tuple(axes)

    def compute(self, a):
        return array_api.flip(a, normalize_axes(self.axes, a.ndim, "flip"))

    def gradient(self, out_grad, node):
        return flip(out_grad, self.axes)


def flip(a, axes):
    return Flip(axes)(a)


class _Dilation(TensorOp):
    """An op that spaces (or gathers) entries ``dilation + 1`` apart along ``axes`` (an int or a sequence).

    Only the constructor is shared: each op's compute and gradient stay in its own class
    body, where a build that withholds one op's code finds and removes them.
    """

    def __init__(self, axes, dilation):
        self.axes = (axes,) if isinstance(axes, int) else tuple(axes)
        self.dilation = int(dilation)


class Dilate(_Dilation):
    """Insert ``dilation`` zeros after every entry along ``axes`` (needle's layout:
    an axis of n becomes n * (dilation + 1), trailing zeros included).

    da = undilate(g, axes, dilation).
    """

    def compute(self, a):
        if self.dilation == 0:
            return a
        axes = normalize_axes(self.axes, a.ndim, "dilate")
        shape = tuple(n * (self.dilation + 1) if i in axes else n for i, n in enumerate(a.shape))
        out = array_api.full(shape, 0.0, dtype=a.dtype, device=device_of(a))
        out[tuple(slice(None, None, self.dilation + 1) if i in axes else slice(None) for i in range(a.ndim))] = a
        return out

    def gradient(self, out_grad, node):
        return undilate(out_grad, self.axes, self.dilation)


def dilate(a, axes, dilation):
    return Dilate(axes, dilation)(a)


class UnDilate(_Dilation):
    """Keep every ``(dilation + 1)``-th entry along ``axes`` (a view).  da = dilate(g, axes, dilation)."""

    def compute(self, a):
        if self.dilation == 0:
            return a
        axes = normalize_axes(self.axes, a.ndim, "undilate")
        return a[tuple(slice(None, None, self.dilation + 1) if i in axes else slice(None) for i in range(a.ndim))]

    def gradient(self, out_grad, node):
        return dilate(out_grad, self.axes, self.dilation)


def undilate(a, axes, dilation):
    return UnDilate(axes, dilation)(a)


def _window_view(a, kernel_size, stride):
    """The (N, Ho, Wo, K, K, C) view of NHWC ``a``'s K x K windows: no copy."""
    n, h, w, c = a.shape
    k, s = kernel_size, stride
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    if ho <= 0 or wo <= 0:
        raise ValueError(f"a {k}x{k} window does not fit an input of shape {tuple(a.shape)} (NHWC)")
    sn, sh, sw, sc = element_strides(a)
    return array_api.as_strided(a, (n, ho, wo, k, k, c), (sn, sh * s, sw * s, sh, sw, sc))


class Im2Col(TensorOp):
    """out[n, i, j, ki, kj, c] = a[n, i*s + ki, j*s + kj, c] for NHWC ``a`` (a strided view).

    da = col2im(g): every window entry adds its adjoint back to the pixel it read.
    """

    def __init__(self, kernel_size, stride=1):
        self.kernel_size = int(kernel_size)
        self.stride = int(stride)

    def compute(self, a):
        if a.ndim != 4:
            raise ValueError(f"im2col: needs an NHWC array, got shape {tuple(a.shape)}")
        return _window_view(a, self.kernel_size, self.stride)

    def gradient(self, out_grad, node):
        return col2im(out_grad, node.inputs[0].shape, self.stride)


def im2col(a, kernel_size, stride=1):
    return Im2Col(kernel_size, stride)(a)


class Col2Im(TensorOp):
    """The adjoint of im2col: out (NHWC ``image_shape``) = sum over windows of their entries.

    out[n, i*s + ki, j*s + kj, c] += cols[n, i, j, ki, kj, c]: ``array_api.col2im``,
    a backend kernel on NDArrays and one strided add per kernel offset (ki, kj)
    in numpy mode, never a loop over pixels.  da = im2col(g).
    """

    def __init__(self, image_shape, stride=1):
        self.image_shape = tuple(int(n) for n in image_shape)
        self.stride = int(stride)

    def compute(self, cols):
        return array_api.col2im(cols, self.image_shape, self.stride)

    def gradient(self, out_grad, node):
        return im2col(out_grad, node.inputs[0].shape[3], self.stride)


def col2im(cols, image_shape, stride=1):
    return Col2Im(image_shape, stride)(cols)


def _live_taps(size, k, stride, padding):
    """``(lo, hi)``: the kernel rows lo..hi that read some row of an input ``size`` rows high
    (the others fall on the zero padding for every output row); lo > hi when none does."""
    out = (size + 2 * padding - k) // stride + 1
    return max(0, padding - (out - 1) * stride), min(k - 1, size - 1 + padding)


@functools.lru_cache(maxsize=1024)  # (a pure function of five ints, asked twice per layer per step)
def _tap_plan(h, w, k, stride, padding):
    """How Conv multiplies: ``(lo, hi, pad_width)``, kernel taps lo..hi (of both axes) of an NHWC
    image padded by ``pad_width``.

    On a small image most of a padded kernel can fall outside it: a 3x3 kernel with
    padding 1 on a 1x1 image reads only its centre. Those taps multiply zeros, so the
    kernel is cropped to the ones that read the image (when that block is square) and
    the image is padded only as far as they reach: a ninth of the multiply-adds there.
    """
    whole = (0, k - 1, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    live = _live_taps(h, k, stride, padding)
    if h + 2 * padding < k or w + 2 * padding < k or live != _live_taps(w, k, stride, padding) \
            or live[0] > live[1] or live == (0, k - 1):
        return whole  # all taps read the image, the live ones differ along H and W, or none does
    lo, hi = live
    # the last row a live tap reads is (out - 1) * stride + hi - padding; pad up to it (rows
    # after it, if any, lie beyond the last whole window and are left out by its count)
    widths = [(padding - lo, max(0, ((n + 2 * padding - k) // stride) * stride + hi - padding - (n - 1)))
              for n in (h, w)]
    return lo, hi, ((0, 0), widths[0], widths[1], (0, 0))


# Winograd F(2x2, 3x3) repays its tile transforms only with enough channels to multiply:
# benchmarks/bench_backend.py's "conv 3x3 fwd" rows show it ahead of im2col's product at 32
# channels (ResNet9's residual block) and 64; 16 is the smallest count used, unmeasured below
WINOGRAD_MIN_CHANNELS = 16
# Its weight gradient (F(3x3, 2x2)) gains only on larger maps: on small ones the transforms of
# the image and of g cost as much as the product they save (bench_backend's "conv 3x3 dW" rows)
WINOGRAD_DW_MIN_PIXELS = 64
# Its forward, too, runs only on maps of this many output pixels or more where the backend can
# convolve without an im2col matrix: on small maps the implicit kernel keeps up with it (the
# "conv 3x3 fwd (128,4,4,32)" rows) and needs no padded copy
WINOGRAD_MIN_PIXELS = 64
# An im2col matrix this big (1 MB of floats, a core's L2) or bigger is not made where the backend
# reads the windows where they lie (conv_implicit): writing and reading back a matrix that falls
# out of L2 costs more than gathering the windows in place; below it, making the matrix and
# running the packed product wins (bench_backend.py's "implicit" and "im2col @" rows)
IMPLICIT_MIN_FLOATS = 1 << 18
# G (4 x 3) of F(2x2, 3x3); kron(G, G) (16 x 9) maps a flattened 3x3 kernel to its 4x4 transform
_WINOGRAD_G = numpy.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], numpy.float32)
_WINOGRAD_GG = numpy.kron(_WINOGRAD_G, _WINOGRAD_G)


@functools.lru_cache(maxsize=16)
def _winograd_gg(device):
    """kron(G, G) on ``device``, copied there once (a constant the layer multiplies every step)."""
    return array_api.array(_WINOGRAD_GG, device=device)


def _winograd_shape(k, stride, c_in, c_out):
    return k == 3 and stride == 1 and min(c_in, c_out) >= WINOGRAD_MIN_CHANNELS


def _winograd_fits(image, k, stride, c_in, c_out):
    return _winograd_shape(k, stride, c_in, c_out) and array_api.winograd_runs_on(device_of(image))


def _winograd_conv3x3(image, weight):
    """The stride-1 convolution of the (padded) NHWC ``image`` with the (3, 3, C_in, C_out)
    ``weight``: U = G g G^T for all channel pairs in one product, then the backend's kernel
    (transforms of the input tiles, the 16 tile products, transforms of the products)."""
    c_in, c_out = weight.shape[2], weight.shape[3]
    u = array_api.reshape(_winograd_gg(device_of(image)) @ array_api.reshape(weight, (9, c_in * c_out)),
                          (16, c_in, c_out))
    return array_api.winograd_conv3x3(image, u)


class Conv(TensorOp):
    """out = conv(A, B): A (N, H, W, C_in) NHWC, B (K, K, C_in, C_out), zero padding p, stride s.

    out[n, i, j, o] = sum_{ki, kj, c} A_pad[n, i*s + ki, j*s + kj, c] * B[ki, kj, c, o]
    computed as im2col(A_pad) (N*Ho*Wo, K*K*C_in) @ B (K*K*C_in, C_out).

    dA = ConvInputGradient(B, g),  dB = ConvWeightGradient(A, g): the transposes of the
    forward product, each an op of its own (so differentiable again). Taps that only ever
    meet padding are left out of the product (see ``_tap_plan``).
    """

    def __init__(self, stride=1, padding=0):
        self.stride = int(stride)
        self.padding = int(padding)
        if self.stride < 1 or self.padding < 0:
            raise ValueError(f"conv: stride must be >= 1 and padding >= 0, got {stride} and {padding}")

    def compute(self, A, B):
        if A.ndim != 4 or B.ndim != 4 or B.shape[0] != B.shape[1] or A.shape[3] != B.shape[2]:
            raise ValueError(
                f"conv: input {tuple(A.shape)} (N, H, W, C_in) and weight {tuple(B.shape)} "
                "(K, K, C_in, C_out) do not match"
            )
        k, c_in, c_out = B.shape[0], B.shape[2], B.shape[3]
        lo, hi, pad_width = _tap_plan(A.shape[1], A.shape[2], k, self.stride, self.padding)
        if hi - lo + 1 < k:
            B = B[lo:hi + 1, lo:hi + 1]
        kl = hi - lo + 1
        ho, wo = ((_padded_size(size, pw) - kl) // self.stride + 1 for size, pw in zip(A.shape[1:3], pad_width[1:3]))
        image = A
        if ((not _winograd_shape(kl, self.stride, c_in, c_out) or ho * wo < WINOGRAD_MIN_PIXELS)
                and _implicit_pays(A, A.shape[0] * ho * wo, kl * kl * c_in)):
            # the backend reads the windows from A itself, any view of it (an NCHW batch seen as
            # NHWC too): no padded copy, no im2col matrix, and the weight gradient reads them
            # again from A (saved: the image alone)
            out = array_api.conv_implicit(A, B, self.stride, pad_width[1][0], pad_width[2][0], (ho, wo))
            return SavedForBackward(out, (image, None, None))
        if any(any(pw) for pw in pad_width):
            A = array_api.pad(A, pad_width)
        if _winograd_fits(A, kl, self.stride, c_in, c_out):
            # dB's im2col matrix is made in the backward pass, if it is needed
            return SavedForBackward(_winograd_conv3x3(A, B), (image, A, None))
        cols = _im2col_rows(A, kl, self.stride)
        out = cols @ array_api.reshape(B, (kl * kl * c_in, c_out))
        # the gradient needs exactly these arrays again: the node keeps them, not the op
        return SavedForBackward(array_api.reshape(out, (A.shape[0], ho, wo, c_out)), (image, A, cols))

    def gradient(self, out_grad, node):
        A, B = node.inputs
        return self.gradients(A, B, out_grad, node.saved, A.requires_grad, B.requires_grad)

    def gradients(self, A, B, out_grad, saved=None, need_a=True, need_b=True):
        """(dA, dB) of this convolution of the NHWC Tensors A and B for the adjoint ``out_grad`` of
        its output; ``saved``: the arrays compute saved for A (the image, its padded copy and its
        im2col matrix, None where it made none; None for a node that kept none); None for a
        gradient not needed (``need_a``, ``need_b``: A's is the costly half, with col2im)."""
        input_gradient, weight_gradient = self.gradient_ops(A.shape, B.shape[0], saved)
        dA = input_gradient(B, out_grad) if need_a else None
        dB = weight_gradient(A, out_grad) if need_b else None
        return dA, dB

    def gradient_ops(self, image_shape, kernel_size, saved=None):
        """(ConvInputGradient, ConvWeightGradient): the ops of this convolution's gradients for an
        NHWC input of ``image_shape`` and a K x K kernel (``saved``: see ``gradients``)."""
        return ConvInputGradient(self, image_shape), ConvWeightGradient(self, kernel_size, saved)


class ConvInputGradient(TensorOp):
    """out = dA of ``conv`` (a Conv) for an input of shape ``image_shape``, for inputs (B, g):
    crop(col2im(G @ B^T)) with G = g as (N*Ho*Wo, C_out), the taps that only meet padding left
    out. With stride 1 and the whole kernel it is itself a convolution: of g, padded by
    K - 1 - p, with B flipped in space and its channel axes swapped (so a 3x3 one runs as
    Winograd too, and col2im's scatter is not needed).

    conv is bilinear, <u, out> = <conv(u, B), g> for an adjoint u of out, so
    dB = ConvWeightGradient(u, g) and dg = conv(u, B).
    """

    def __init__(self, conv, image_shape):
        self.conv = conv
        self.image_shape = tuple(image_shape)

    def compute(self, B, g):
        stride, padding = self.conv.stride, self.conv.padding
        k, c_in, c_out = B.shape[0], B.shape[2], B.shape[3]
        lo, hi, pad_width = _tap_plan(self.image_shape[1], self.image_shape[2], k, stride, padding)
        kl = hi - lo + 1
        if stride == 1 and kl == k and padding <= k - 1:
            flipped = array_api.transpose(array_api.flip(B, (0, 1)), (0, 1, 3, 2))
            return Conv(1, k - 1 - padding).compute(g, flipped).output
        n, ho, wo = g.shape[:3]
        live = B[lo:hi + 1, lo:hi + 1] if kl < k else B
        grad2d = array_api.reshape(g, (n * ho * wo, c_out))
        dcols = grad2d @ array_api.transpose(array_api.reshape(live, (kl * kl * c_in, c_out)), (1, 0))
        padded_shape = _padded_shape(self.image_shape, pad_width)
        dA = array_api.col2im(array_api.reshape(dcols, (n, ho, wo, kl, kl, c_in)), padded_shape, stride)
        if any(any(pw) for pw in pad_width):
            dA = dA[tuple(slice(lo_, size - hi_) for (lo_, hi_), size in zip(pad_width, dA.shape))]
        return dA

    def gradient(self, out_grad, node):
        B, g = node.inputs
        dB = self.conv.gradients(out_grad, B, g, need_a=False)[1] if B.requires_grad else None
        dg = self.conv(out_grad, B) if g.requires_grad else None
        return dB, dg


class ConvWeightGradient(TensorOp):
    """out = dB of ``conv`` (a Conv) with a K x K kernel (``kernel_size``), for inputs (A, g):
    X^T @ G with X the im2col matrix of A and G = g as (N*Ho*Wo, C_out), zero for the taps that
    only meet padding. ``saved``: the arrays conv's compute saved for A (see Conv.gradients),
    used when this op meets that very A; X comes from them, or is never made where the
    backend reads the windows in place (conv_implicit) or runs Winograd's F(3x3, 2x2).

    conv is bilinear, <v, out> = <conv(A, v), g> for an adjoint v of out, so
    dA = ConvInputGradient(v, g) and dg = conv(A, v).
    """

    def __init__(self, conv, kernel_size, saved=None):
        self.conv = conv
        self.kernel_size = int(kernel_size)
        self.saved = saved

    def compute(self, A, g):
        stride, k = self.conv.stride, self.kernel_size
        (n, ho, wo, c_out), c_in = g.shape, A.shape[3]
        lo, hi, pad_width = _tap_plan(A.shape[1], A.shape[2], k, stride, self.conv.padding)
        kl = hi - lo + 1
        if self.saved is not None and self.saved[0] is A:
            image, padded, cols = self.saved
        else:  # nothing saved for this A: read its windows in place where that pays, else pad it
            image, padded, cols = A, None, None
            if not _implicit_pays(g, n * ho * wo, kl * kl * c_in):
                padded = array_api.pad(A, pad_width) if any(any(pw) for pw in pad_width) else A
        if padded is None:  # an implicit forward: so is its weight gradient
            dB = array_api.conv_implicit_weight_grad(image, g, kl, stride, pad_width[1][0], pad_width[2][0])
        elif (cols is None and kl == k and ho * wo >= WINOGRAD_DW_MIN_PIXELS
                and _winograd_fits(padded, k, stride, c_in, c_out)):
            # a forward by Winograd kept no im2col matrix, and its weight-gradient kernel makes none
            dB = array_api.winograd_weight_grad(padded, g)
        elif cols is None and _implicit_pays(g, n * ho * wo, kl * kl * c_in):
            # a forward by Winograd on a small map: the windows are read from its padded image
            dB = array_api.conv_implicit_weight_grad(padded, g, kl, stride, 0, 0)
        else:
            if cols is None:
                cols = _im2col_rows(padded, kl, stride)
            # (G^T X)^T rather than X^T G: the transposed copy is of G (C_out wide), not of X (K*K*C_in wide)
            grad2d = array_api.reshape(g, (n * ho * wo, c_out))
            dB = array_api.transpose(array_api.transpose(grad2d, (1, 0)) @ cols, (1, 0))
            dB = array_api.reshape(dB, (kl, kl, c_in, c_out))
        if kl < k:
            dB = array_api.pad(dB, ((lo, k - 1 - hi), (lo, k - 1 - hi), (0, 0), (0, 0)))
        return dB

    def gradient(self, out_grad, node):
        A, g = node.inputs
        dA = self.conv.gradients(A, out_grad, g, need_b=False)[0] if A.requires_grad else None
        dg = self.conv(A, out_grad) if g.requires_grad else None
        return dA, dg


def _padded_size(size, pad):
    return size + pad[0] + pad[1]


def _padded_shape(shape, pad_width):
    return tuple(_padded_size(size, pw) for size, pw in zip(shape, pad_width))


def _implicit_pays(array, rows, cols):
    """Whether to convolve without the (rows, cols) im2col matrix, on ``array``'s device: where the
    device can, and the matrix would not fit in a core's L2 (``IMPLICIT_MIN_FLOATS``)."""
    return rows * cols >= IMPLICIT_MIN_FLOATS and array_api.conv_implicit_runs_on(device_of(array))


def _im2col_rows(image, k, stride):
    """The (N*Ho*Wo, K*K*C) im2col matrix of an NHWC image: the one copy of its windows."""
    view = _window_view(image, k, stride)
    n, ho, wo = view.shape[:3]
    return array_api.reshape(view, (n * ho * wo, k * k * image.shape[3]))


def conv(a, b, stride=1, padding=1):
    return Conv(stride, padding)(a, b)


class ConvNCHW(TensorOp):
    """What ``nn.Conv`` computes, in one op: NCHW x (N, C_in, H, W), weight (K, K, C_in, C_out)
    and an optional bias (C_out,) give the NCHW

        out = transpose(conv(transpose(x, (0, 2, 3, 1)), weight) + bias, (0, 3, 1, 2)),

    with the transposes as views and the bias added by one kernel (``bias_add``) instead of
    six graph nodes each way. The gradient is Conv's (twice differentiable like it), between
    the same transposes; dbias = the sum of g over N, H and W.
    """

    def __init__(self, stride=1, padding=0):
        self.conv = Conv(stride, padding)

    def compute(self, x, weight, bias=None):
        if x.ndim != 4:
            raise ValueError(f"conv_nchw: needs an NCHW array, got shape {tuple(x.shape)}")
        result = self.conv.compute(array_api.transpose(x, (0, 2, 3, 1)), weight)
        out = result.output
        if bias is not None:
            if bias.shape != (out.shape[3],):
                raise ValueError(f"conv_nchw: bias of shape {tuple(bias.shape)} for {out.shape[3]} output channels")
            rows = array_api.reshape(out, (-1, out.shape[3]))
            out = array_api.reshape(array_api.bias_add(rows, bias, in_place=True), out.shape)  # conv's own output
        return SavedForBackward(array_api.transpose(out, (0, 3, 1, 2)), result.saved)

    def gradient(self, out_grad, node):
        return self.gradients(node.inputs, out_grad, node.saved)

    def gradients(self, inputs, out_grad, saved):
        """(dx, dweight[, dbias]) for the inputs (x, weight[, bias]) and the adjoint ``out_grad`` of
        the output; ``saved``: the arrays compute saved (None: none)."""
        x, weight = inputs[0], inputs[1]
        # g as NHWC: the memory layout the next layer's gradient arrives in, so a view, and
        # dbias sums one block of axes
        g = transpose(out_grad, (0, 2, 3, 1))
        # x as the very NHWC view the forward convolved, whose arrays it saved
        image = transpose(x, (0, 2, 3, 1)) if saved is None else \
            Tensor.make_with_data(Transpose((0, 2, 3, 1)), [x], saved[0])
        d_nhwc, dweight = self.conv.gradients(image, weight, g, saved, x.requires_grad, weight.requires_grad)
        grads = (None if d_nhwc is None else transpose(d_nhwc, (0, 3, 1, 2)), dweight)
        if len(inputs) == 3:
            grads += (summation(g, (0, 1, 2)) if inputs[2].requires_grad else None,)
        return grads

    def decompose(self, x, weight, bias=None):
        """The formula above in generic ops (what the compiler and the ONNX exporter know)."""
        from .ops_mathematic import broadcast_to

        out = conv(transpose(x, (0, 2, 3, 1)), weight, stride=self.conv.stride, padding=self.conv.padding)
        if bias is not None:
            out = out + broadcast_to(reshape(bias, (1, 1, 1, out.shape[3])), out.shape)
        return transpose(out, (0, 3, 1, 2))


def conv_nchw(x, weight, bias=None, stride=1, padding=0):
    op = ConvNCHW(stride, padding)
    return op(x, weight) if bias is None else op(x, weight, bias)


def conv_transpose(a, b, stride=1, padding=0, output_padding=0):
    """The transpose (adjoint) of ``conv``: a (N, H, W, C_in) NHWC, b (K, K, C_out, C_in).

    ``conv_transpose(g, B)`` is the gradient of ``conv(x, B)`` with respect to x:
    each input pixel scatters ``a[n, i, j, :] @ B[ki, kj].T`` to the output at
    (i*s + ki - p, j*s + kj - p). Output size (H - 1)*s - 2p + K + output_padding,
    as torch's ConvTranspose2d.
    """
    from .ops_mathematic import pad as pad_op

    n, h, w, c_in = a.shape
    k, k2, c_out, c_in_b = b.shape
    if k != k2 or c_in != c_in_b:
        raise ValueError(
            f"conv_transpose: input {tuple(a.shape)} (N, H, W, C_in) and weight {tuple(b.shape)} "
            "(K, K, C_out, C_in) do not match"
        )
    if not 0 <= output_padding < stride:
        raise ValueError(f"conv_transpose: output_padding {output_padding} must be smaller than stride {stride}")
    full_h, full_w = (h - 1) * stride + k, (w - 1) * stride + k
    out_h, out_w = full_h - 2 * padding + output_padding, full_w - 2 * padding + output_padding
    if out_h <= 0 or out_w <= 0:
        raise ValueError(f"conv_transpose: padding {padding} leaves no output for input {tuple(a.shape)}")
    # (N*H*W, C_in) @ (C_in, K*K*C_out): one product, then scatter the windows
    weight = reshape(transpose(b, (3, 0, 1, 2)), (c_in, k * k * c_out))
    cols = reshape(reshape(a, (n * h * w, c_in)) @ weight, (n, h, w, k, k, c_out))
    full = col2im(cols, (n, full_h, full_w, c_out), stride)
    # crop `padding` from the start; the end is cropped or zero-padded to the output size
    hi_h, hi_w = full_h - padding - out_h, full_w - padding - out_w
    out = crop(full, ((0, 0), (padding, max(hi_h, 0)), (padding, max(hi_w, 0)), (0, 0)))
    if hi_h < 0 or hi_w < 0:
        out = pad_op(out, ((0, 0), (0, max(-hi_h, 0)), (0, max(-hi_w, 0)), (0, 0)))
    return out
