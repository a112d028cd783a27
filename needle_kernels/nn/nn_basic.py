"""The core nn modules: Parameter, Module and the basic layers."""
import math
from typing import List

import numpy

from .. import init, ops
from ..autograd import Tensor
from ..backend_selection import array_api


class Parameter(Tensor):
    """A Tensor that a Module owns and an optimizer updates."""


def _unpack_params(value: object) -> List[Tensor]:
    """Every Parameter in ``value`` (a Parameter, a Module, or dicts, lists and tuples of them), in
    order, each once."""
    seen, params = set(), []
    _collect_params(value, seen, params)
    return params


def _collect_params(value, seen, params):
    """Append to ``params`` the Parameters found in ``value`` and not in ``seen``: the whole walk in
    one pass with one set (a training loop asks for a model's parameters every step)."""
    if isinstance(value, Parameter):
        if id(value) not in seen:
            seen.add(id(value))
            params.append(value)
    elif isinstance(value, Module):
        if type(value).parameters is Module.parameters:
            _collect_params(value.__dict__, seen, params)
        else:  # a module that lists its parameters itself
            for p in value.parameters():
                _collect_params(p, seen, params)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_params(v, seen, params)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_params(v, seen, params)


def _child_modules(value: object) -> List["Module"]:
    if isinstance(value, Module):
        return [value] + value._children()
    if isinstance(value, dict):
        modules = []
        for _, v in value.items():
            modules += _child_modules(v)
        return modules
    if isinstance(value, (list, tuple)):
        modules = []
        for v in value:
            modules += _child_modules(v)
        return modules
    return []


class Module:
    """A layer: holds Parameters and sub-modules found through its attributes."""

    def __init__(self):
        self.training = True

    def parameters(self) -> List[Tensor]:
        """Every Parameter of this module and its sub-modules, in attribute order, each once."""
        return _unpack_params(self.__dict__)

    def _children(self) -> List["Module"]:
        return _child_modules(self.__dict__)

    def eval(self):
        self.training = False
        for m in self._children():
            m.training = False
        return self

    def train(self):
        self.training = True
        for m in self._children():
            m.training = True
        return self

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


def _check_last_dim(module, x, dim):
    if len(x.shape) < 1 or x.shape[-1] != dim:
        raise ValueError(f"{type(module).__name__}: expected input (..., {dim}), got shape {x.shape}")


class Identity(Module):
    def forward(self, x):
        return x


class Linear(Module):
    """y = x W + b with W (in_features, out_features), b (1, out_features).

    W is Kaiming uniform with fan_in = in_features; b is drawn as a
    (out_features, 1) Kaiming uniform (fan_in = out_features) and reshaped,
    as needle does, so seeded runs match needle's numbers.
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype="float32"):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(init.kaiming_uniform(in_features, out_features, device=device, dtype=dtype))
        self.bias = None
        if bias:
            b = init.kaiming_uniform(out_features, 1, device=device, dtype=dtype)
            self.bias = Parameter(b.reshape((1, out_features)))

    def forward(self, X: Tensor) -> Tensor:
        _check_last_dim(self, X, self.in_features)
        lead = X.shape[:-1]
        # a 2-D product is one backend matmul; (B, T, in) inputs are flattened to it
        x2d = X if len(X.shape) == 2 else X.reshape((-1, self.in_features))
        if self.bias is None:
            out = x2d @ self.weight
        else:  # the product and the bias in one op
            out = ops.matmul_bias(x2d, self.weight, self.bias)
        return out if len(X.shape) == 2 else out.reshape(lead + (self.out_features,))


class Flatten(Module):
    """(B, d1, d2, ...) -> (B, d1*d2*...)."""

    def forward(self, X):
        return X.reshape((X.shape[0], -1))


class ReLU(Module):
    """max(x, 0) entry by entry, as a module."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class Sequential(Module):
    """Apply the given modules one after the other."""

    def __init__(self, *modules):
        super().__init__()
        self.modules = modules

    def forward(self, x: Tensor) -> Tensor:
        for module in self.modules:
            x = module(x)
        return x


class SoftmaxLoss(Module):
    """Mean cross-entropy: mean_i (logsumexp(z_i) - z_i[y_i]) for logits z (B, k), labels y (B,)."""

    def forward(self, logits: Tensor, y) -> Tensor:
        if len(logits.shape) != 2:
            raise ValueError(f"SoftmaxLoss: logits must be (batch, classes), got shape {logits.shape}")
        batch, classes = logits.shape
        labels = y.numpy() if isinstance(y, Tensor) else numpy.asarray(y)
        if labels.shape != (batch,):
            raise ValueError(f"SoftmaxLoss: labels shape {labels.shape} does not match logits {logits.shape}")
        # logsumexp(z) - (z * one_hot(y)).sum(), fused: one pass over the logits each way
        return ops.summation(ops.softmax_cross_entropy(logits, labels)) / batch


class BatchNorm1d(Module):
    """y = w * (x - mean) / sqrt(var + eps) + b over the batch axis of x (B, dim).

    Training uses the batch statistics (biased variance) and updates
    running = (1 - momentum) * running + momentum * batch, as needle does
    (torch keeps the unbiased variance in running_var); eval uses the running ones.

    ``fused=True`` (the default) trains with one fused kernel forward and one backward
    (``ops.batch_norm_rows``); ``fused=False`` uses the same formulas in generic ops, the
    readable version, differentiable more than once. Eval mode is always the generic
    affine map with the running statistics: a traced model keeps ops that
    ``compile`` can fuse with their neighbours and export to ONNX.
    """

    def __init__(self, dim, eps=1e-5, momentum=0.1, device=None, dtype="float32", fused=True):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.momentum = momentum
        self.fused = fused
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype))
        self.running_mean = init.zeros(dim, device=device, dtype=dtype)
        self.running_var = init.ones(dim, device=device, dtype=dtype)

    def _fused(self, x, nchw=False, relu=False):
        """The fused training-mode normalisation of the Tensor x (N, dim), or (N, dim, H, W)
        with ``nchw``, and the ReLU after it with ``relu``; the running statistics are updated
        as arrays, outside any graph."""
        mean, var = ops.batch_statistics(x, nchw)
        # every per-channel value the step needs (the running averages, the inverse std, the
        # scale and shift the kernel applies) in one kernel instead of eleven
        weight, bias = self.weight.realize_cached_data(), self.bias.realize_cached_data()
        invstd, scale, shift, running_mean, running_var = array_api.batchnorm_fold(
            mean, var, weight, bias, self.running_mean.realize_cached_data(),
            self.running_var.realize_cached_data(), self.eps, self.momentum)
        self.running_mean.data = Tensor.make_const(running_mean)
        self.running_var.data = Tensor.make_const(running_var)
        return ops.batch_norm_rows(x, self.weight, self.bias, mean, var, self.eps, True, nchw, relu,
                                   folded=(weight, bias, invstd, scale, shift))

    # the statistics live on ``axes`` of x; ``kept`` is their shape with those axes kept as 1
    def _normalize(self, x, axes, kept):
        count = math.prod(x.shape[a] for a in axes)
        if self.training:
            mean = x.sum(axes) / count
            centered = x - mean.reshape(kept).broadcast_to(x.shape)
            var = (centered * centered).sum(axes) / count
            m = self.momentum
            self.running_mean.data = self.running_mean.data * (1 - m) + mean.data * m
            self.running_var.data = self.running_var.data * (1 - m) + var.data * m
        else:
            mean, var = self.running_mean, self.running_var
            centered = x - mean.reshape(kept).broadcast_to(x.shape)
        # fold the weight into the inverse std: one (dim,) product instead of a full-size one
        scale = self.weight * (var + self.eps) ** -0.5
        return centered * scale.reshape(kept).broadcast_to(x.shape) + self.bias.reshape(kept).broadcast_to(x.shape)

    def forward(self, x: Tensor, relu=False) -> Tensor:
        """The normalised x; with ``relu``, relu of it (in training, fused: one op, one pass each way)."""
        if len(x.shape) != 2 or x.shape[1] != self.dim:
            raise ValueError(f"{type(self).__name__}: expected input (batch, {self.dim}), got shape {x.shape}")
        if self.fused and self.training:
            return self._fused(x, relu=relu)
        out = self._normalize(x, (0,), (1, self.dim))
        return ops.relu(out) if relu else out


class BatchNorm2d(BatchNorm1d):
    """BatchNorm over N, H and W of an NCHW input: one mean/var per channel."""

    def forward(self, x: Tensor, relu=False) -> Tensor:
        """The normalised x; with ``relu``, relu of it (in training, fused: one op, one pass each way)."""
        if len(x.shape) != 4 or x.shape[1] != self.dim:
            raise ValueError(f"BatchNorm2d: expected input (N, {self.dim}, H, W), got shape {x.shape}")
        if self.fused and self.training:
            # one op that sees NCHW x as (N*H*W, C) rows: a view of the NHWC memory a convolution writes
            return self._fused(x, nchw=True, relu=relu)
        out = self._normalize(x, (0, 2, 3), (1, self.dim, 1, 1))
        return ops.relu(out) if relu else out


class LayerNorm1d(Module):
    """y = w * (x - mean) / sqrt(var + eps) + b over the last axis (dim); any leading axes.

    ``fused=True`` (the default) is one op each way (``ops.layer_norm`` on the rows of x);
    ``fused=False`` the same formulas in generic ops, the readable version, differentiable
    more than once. A traced model (compile, ONNX export) always gets the generic ops."""

    def __init__(self, dim, eps=1e-5, device=None, dtype="float32", fused=True):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.fused = fused
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        _check_last_dim(self, x, self.dim)
        shape = x.shape
        if self.fused:
            rows = x if len(shape) == 2 else x.reshape((math.prod(shape[:-1]), self.dim))
            out = ops.layer_norm(rows, self.weight, self.bias, self.eps)
            return out if len(shape) == 2 else out.reshape(shape)
        kept = shape[:-1] + (1,)
        axis = len(shape) - 1
        mean = (x.sum((axis,)) / self.dim).reshape(kept).broadcast_to(shape)
        centered = x - mean
        var = ((centered * centered).sum((axis,)) / self.dim).reshape(kept)
        inv_std = ((var + self.eps) ** -0.5).broadcast_to(shape)
        lead = (1,) * (len(shape) - 1) + (self.dim,)
        w = self.weight.reshape(lead).broadcast_to(shape)
        b = self.bias.reshape(lead).broadcast_to(shape)
        return centered * inv_std * w + b


class RMSNorm1d(Module):
    """y = w * x / sqrt(mean(x^2) + eps) over the last axis (dim); any leading axes: a layer
    norm without the centring and the bias, one op each way (``ops.rms_norm`` on the rows of x)."""

    def __init__(self, dim, eps=1e-5, device=None, dtype="float32"):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        _check_last_dim(self, x, self.dim)
        shape = x.shape
        rows = x if len(shape) == 2 else x.reshape((math.prod(shape[:-1]), self.dim))
        out = ops.rms_norm(rows, self.weight, self.eps)
        return out if len(shape) == 2 else out.reshape(shape)


class Dropout(Module):
    """Inverted dropout: zero each entry with probability p and scale the rest by 1/(1-p); identity in eval."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        mask = init.randb(*x.shape, p=1 - self.p, device=x.device, dtype=x.dtype)
        return x * mask / (1 - self.p)


class Residual(Module):
    """y = fn(x) + x."""

    def __init__(self, fn: Module):
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x) + x
