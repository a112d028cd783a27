"""Optimizers. Updates are computed on the arrays behind ``.data``: no graph is
built and no Tensor outlives a step (``autograd.TENSOR_COUNTER`` stays flat)."""
import math

from .autograd import Tensor
from .backend_selection import array_api, device_of

# Each update rule is one call of the array API (sgd_update, adam_update): on
# NDArrays a fused kernel, one pass over each parameter instead of a dozen
# element-wise kernels and temporaries; in numpy mode the same formula in numpy.


class Optimizer:
    def __init__(self, params):
        self.params = list(params)

    def step(self):
        raise NotImplementedError()

    def reset_grad(self):
        for p in self.params:
            p.grad = None

    zero_grad = reset_grad

    def clip_grad_norm(self, max_norm=0.25):
        """Scale all gradients so their joint L2 norm is at most ``max_norm``."""
        return clip_grad_norm(self.params, max_norm)


def _zeros_like(array):
    return array_api.full(array.shape, 0.0, dtype=array.dtype, device=device_of(array))


def _assign(p, array):
    # through .data, as needle's optimizers do; the temporary Tensor dies here
    p.data = Tensor.make_const(array)


class SGD(Optimizer):
    """p -= lr * u with u = momentum * u + (1 - momentum) * (grad + weight_decay * p).

    Momentum is an exponential moving average (needle's convention; torch's SGD
    accumulates u = momentum * u + grad instead).
    """

    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0):
        super().__init__(params)
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.u = {}

    def step(self):
        for p in self.params:
            if p.grad is None:
                continue
            param = p.realize_cached_data()
            u = None
            if self.momentum:
                u = self.u.get(p)
                if u is None:  # zeros: the first step then gives (1 - momentum) * grad exactly
                    u = self.u[p] = _zeros_like(param)
            _assign(p, array_api.sgd_update(
                param, p.grad.realize_cached_data(), u, self.lr, self.momentum, self.weight_decay))


class Adam(Optimizer):
    """Adam with bias correction and L2 weight decay added to the gradient:

    m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,
    p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
    """

    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
        super().__init__(params)
        self.lr = lr
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.weight_decay = weight_decay
        self.t = 0
        self.m = {}
        self.v = {}

    def step(self):
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        live = [p for p in self.params if p.grad is not None]
        for p in live:
            if p not in self.m:  # zeros: the first step then gives the unfused formula's values exactly
                self.m[p] = _zeros_like(p.realize_cached_data())
                self.v[p] = _zeros_like(p.realize_cached_data())
        # every parameter in one call: one pass of one kernel over all of them where the device has it
        new = array_api.adam_update_many(
            [p.realize_cached_data() for p in live], [p.grad.realize_cached_data() for p in live],
            [self.m[p] for p in live], [self.v[p] for p in live],
            self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, c1, c2)
        for p, array in zip(live, new):
            _assign(p, array)


def clip_grad_norm(params, max_norm):
    """Scale the gradients of ``params`` in place so that their joint L2 norm is at
    most ``max_norm`` (as torch.nn.utils.clip_grad_norm_); returns the norm before."""
    params = [p for p in params if p.grad is not None]
    total = 0.0
    for p in params:
        g = p.grad.realize_cached_data()
        total += _sq(g)
    norm = math.sqrt(total)
    scale = max_norm / (norm + 1e-6)
    if scale < 1:
        for p in params:
            p.grad = Tensor.make_const(p.grad.realize_cached_data() * scale)
    return norm


def _sq(array):
    """The sum of squares of an array, as a Python float."""
    return float(array_api.sum(array * array))
