"""What a GAN needs beyond the basic layers: LeakyReLU and losses on logits.

A discriminator outputs logits f; D(x) = sigmoid(f) is never formed, because the
cross-entropy of sigmoid(f) is a softplus of f (``ops.softplus``), which stays finite
where log(sigmoid(f)) would be log(0).
"""
import numbers

import numpy

from .. import ops
from ..autograd import Tensor
from .nn_basic import Module

__all__ = ["LeakyReLU", "BCEWithLogitsLoss", "GANLoss"]


class LeakyReLU(Module):
    """y = x for x > 0, negative_slope * x otherwise, written slope * x + (1 - slope) * relu(x).

    Unlike ReLU it passes a gradient (the slope) for negative inputs, so a generator
    gets signal through every unit of the discriminator. At x = 0 the gradient is the
    slope, as in PyTorch.
    """

    def __init__(self, negative_slope=0.01):
        super().__init__()
        if not isinstance(negative_slope, numbers.Real) or isinstance(negative_slope, bool):
            raise TypeError(f"LeakyReLU: negative_slope must be a number, got {negative_slope!r}")
        self.negative_slope = float(negative_slope)

    def forward(self, x: Tensor) -> Tensor:
        slope = self.negative_slope
        if slope == 0.0:
            return ops.relu(x)
        return x * slope + ops.relu(x) * (1.0 - slope)


class BCEWithLogitsLoss(Module):
    """Mean binary cross-entropy of sigmoid(logits) against targets t in [0, 1]:

        mean( softplus(f) - t * f ) = mean( -t log sigmoid(f) - (1 - t) log(1 - sigmoid(f)) )

    over every entry; d/df = (sigmoid(f) - t) / N. ``target`` is a Tensor or array of
    the logits' shape (not differentiated).
    """

    def forward(self, logits: Tensor, target) -> Tensor:
        t = target.numpy() if isinstance(target, Tensor) else numpy.asarray(target)
        if t.shape != tuple(logits.shape):
            raise ValueError(f"BCEWithLogitsLoss: target shape {t.shape} does not match logits {tuple(logits.shape)}")
        t = Tensor(t.astype(numpy.float32), device=logits.device, dtype=logits.dtype, requires_grad=False)
        n = int(numpy.prod(logits.shape))
        return (ops.softplus(logits) - logits * t).sum() / n


class GANLoss(Module):
    """The GAN losses on discriminator logits f, averaged over every entry:

        target "real" (1): mean softplus(-f) = -mean log D,   "fake" (0): mean softplus(f) = -mean log(1 - D)

    with D = sigmoid(f). The discriminator minimises loss(D(x), True) + loss(D(G(z)), False);
    the non-saturating generator minimises loss(D(G(z)), True). d/df = (sigmoid(f) - t) / N.
    """

    def forward(self, logits: Tensor, target_is_real) -> Tensor:
        if not isinstance(target_is_real, (bool, numpy.bool_)):
            raise TypeError("GANLoss: target_is_real must be True (real) or False (fake), "
                            f"got {type(target_is_real).__name__}")
        signed = -logits if target_is_real else logits
        n = int(numpy.prod(logits.shape))
        return ops.softplus(signed).sum() / n
