"""Weight initializers (Glorot/Xavier and He/Kaiming), on top of ``rand``/``randn``.

Each returns a ``(fan_in, fan_out)`` Tensor unless ``shape`` is given (Kaiming),
drawing from numpy's global RNG like ``init.rand``.
"""
import math

from .init_basic import rand, randn

_GAINS = {"relu": math.sqrt(2.0), "linear": 1.0, "tanh": 5.0 / 3.0, "sigmoid": 1.0}


def _gain(nonlinearity):
    if nonlinearity not in _GAINS:
        raise ValueError(f"unknown nonlinearity {nonlinearity!r}; known: {sorted(_GAINS)}")
    return _GAINS[nonlinearity]


def xavier_uniform(fan_in, fan_out, gain=1.0, **kwargs):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return rand(fan_in, fan_out, low=-a, high=a, **kwargs)


def xavier_normal(fan_in, fan_out, gain=1.0, **kwargs):
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return randn(fan_in, fan_out, mean=0.0, std=std, **kwargs)


def kaiming_uniform(fan_in, fan_out, nonlinearity="relu", shape=None, **kwargs):
    """U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2) for relu."""
    bound = _gain(nonlinearity) * math.sqrt(3.0 / fan_in)
    shape = (fan_in, fan_out) if shape is None else tuple(shape)
    return rand(*shape, low=-bound, high=bound, **kwargs)


def kaiming_normal(fan_in, fan_out, nonlinearity="relu", shape=None, **kwargs):
    """N(0, std^2) with std = gain / sqrt(fan_in), gain = sqrt(2) for relu."""
    std = _gain(nonlinearity) / math.sqrt(fan_in)
    shape = (fan_in, fan_out) if shape is None else tuple(shape)
    return randn(*shape, mean=0.0, std=std, **kwargs)
