"""Gradients by central differences: the reference backward() is checked against.

    df/dx_j  ~  (f(x + eps e_j) - f(x - eps e_j)) / (2 eps)

The error is O(eps^2) from the Taylor remainder plus (rounding error of f) / eps, so the
inputs are shifted in float64: a float32 input cannot even hold x + eps exactly for small
eps. A function that runs in float32 casts its arguments itself, and then needs a larger
eps (about 1e-2) for its rounding not to swamp the difference.
"""
import numpy as np


def partial_derivative(f, arrays, i, index, eps):
    """df/d arrays[i][index] of the scalar ``f(*arrays)``, by one central difference.

    ``arrays[i]`` is shifted in place and restored, so it should be float64 and ``f`` must
    not keep its arguments beyond the call.
    """
    a = arrays[i]
    old = a[index]
    a[index] = old + eps
    plus = f(*arrays)
    a[index] = old - eps
    minus = f(*arrays)
    a[index] = old
    return (plus - minus) / (2 * eps)


def numerical_gradients(f, arrays, eps):
    """[df/d arrays[i] for each i] of the scalar ``f(*arrays)``, every entry, as float64 arrays.

    ``f`` is called with float64 copies of ``arrays``; the inputs themselves are not touched.
    """
    xs = [np.array(a, dtype=np.float64) for a in arrays]
    return [np.array([partial_derivative(f, xs, i, index, eps) for index in np.ndindex(x.shape)],
                     dtype=np.float64).reshape(x.shape)
            for i, x in enumerate(xs)]
