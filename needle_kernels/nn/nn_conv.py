"""Convolution, transposed convolution and pooling modules (NCHW in and out, as torch)."""
import math

from .. import init, ops
from ..autograd import Tensor
from .nn_basic import Module, Parameter


def _check_nchw(module, x, channels):
    if len(x.shape) != 4 or x.shape[1] != channels:
        raise ValueError(f"{type(module).__name__}: expected input (N, {channels}, H, W), got shape {x.shape}")


class Conv(Module):
    """2-D convolution with "same" padding K//2: NCHW in, NCHW out.

    weight (K, K, C_in, C_out), Kaiming uniform with fan_in = K*K*C_in and
    fan_out = K*K*C_out; bias (C_out,) uniform in +-1/sqrt(C_in*K*K). The op
    works in NHWC, so the input and output are transposed (views, no copy); all
    of it is one op, ``ops.conv_nchw``, except while ``compile`` traces the module.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, bias=True, device=None, dtype="float32"):
        super().__init__()
        if isinstance(kernel_size, tuple):
            kernel_size = kernel_size[0]
        if isinstance(stride, tuple):
            stride = stride[0]
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        k = kernel_size
        self.weight = Parameter(init.kaiming_uniform(
            k * k * in_channels, k * k * out_channels, shape=(k, k, in_channels, out_channels),
            device=device, dtype=dtype))
        self.bias = None
        if bias:
            bound = 1.0 / math.sqrt(in_channels * k * k)
            self.bias = Parameter(init.rand(out_channels, low=-bound, high=bound, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        _check_nchw(self, x, self.in_channels)
        return ops.conv_nchw(x, self.weight, self.bias, stride=self.stride, padding=self.kernel_size // 2)


class ConvTranspose(Module):
    """2-D transposed convolution with torch's ConvTranspose2d semantics, NCHW in and out.

    H_out = (H_in - 1) * stride - 2 * padding + kernel_size + output_padding.
    weight layout (K, K, C_out, C_in): the weight of the forward convolution
    C_out -> C_in whose input gradient this layer computes. torch's
    ConvTranspose2d weight (C_in, C_out, K, K) maps to it by ``permute(2, 3, 1, 0)``.
    Init: Kaiming uniform with fan_in = K*K*C_out (torch's fan for this weight);
    bias (C_out,) uniform in +-1/sqrt(C_out*K*K).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 bias=True, device=None, dtype="float32"):
        super().__init__()
        if isinstance(kernel_size, tuple):
            kernel_size = kernel_size[0]
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.output_padding = output_padding
        k = kernel_size
        fan_in = k * k * out_channels
        self.weight = Parameter(init.kaiming_uniform(
            fan_in, k * k * in_channels, shape=(k, k, out_channels, in_channels), device=device, dtype=dtype))
        self.bias = None
        if bias:
            bound = 1.0 / math.sqrt(fan_in)
            self.bias = Parameter(init.rand(out_channels, low=-bound, high=bound, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        _check_nchw(self, x, self.in_channels)
        nhwc = ops.transpose(x, (0, 2, 3, 1))
        out = ops.conv_transpose(nhwc, self.weight, stride=self.stride, padding=self.padding,
                                 output_padding=self.output_padding)
        if self.bias is not None:
            out = out + self.bias.reshape((1, 1, 1, self.out_channels)).broadcast_to(out.shape)
        return ops.transpose(out, (0, 3, 1, 2))


class MaxPool2d(Module):
    """Max pooling over K x K windows of an NCHW input (stride defaults to K), as torch."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    """Average pooling over K x K windows of an NCHW input (stride defaults to K), as torch."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return ops.avg_pool2d(x, self.kernel_size, self.stride, self.padding)
