"""Softplus, the numerically stable core of binary cross-entropy on logits.

With logits f and targets t in {0, 1}, -t log sigmoid(f) - (1 - t) log(1 - sigmoid(f))
equals t softplus(-f) + (1 - t) softplus(f): a GAN's losses and BCEWithLogitsLoss are
softplus of (signed) logits, so this one op makes them stable.
"""
from ..autograd import TensorOp
from ..backend_selection import array_api
from .ops_mathematic import sigmoid

__all__ = ["Softplus", "softplus"]


class Softplus(TensorOp):
    """out = log(1 + exp(a)), computed as max(a, 0) + log(1 + exp(-|a|)).  da = g * sigmoid(a).

    The naive form overflows for a >> 0 (exp(a) = inf) and loses everything for a << 0;
    in the stable form exp only ever sees -|a| <= 0, so its value lies in (0, 1].
    """

    def compute(self, a):
        magnitude = array_api.maximum(a, -a)
        return array_api.maximum(a, 0.0) + array_api.log(array_api.exp(-magnitude) + 1.0)

    def gradient(self, out_grad, node):
        return out_grad * sigmoid(node.inputs[0])


def softplus(a):
    return Softplus()(a)
