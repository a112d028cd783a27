"""Embedding lookups: rows of a weight picked by integer ids.

``EmbeddingGather`` / ``EmbeddingScatter`` are what ``nn.Embedding`` runs: the ids are read on
the host and kept in the op. ``EmbeddingLookup`` takes the ids as its second input instead (a
float Tensor of integer values, as needle passes them): ``compile.trace`` puts it in place of
``nn.Embedding``'s forward, so a traced graph reads new tokens rather than replaying the
example's forever.
"""
import numpy as np

from ..autograd import TensorOp
from ..backend_selection import array_api, device_of

__all__ = ["EmbeddingGather", "EmbeddingScatter", "EmbeddingLookup", "embedding_lookup"]


def _host(a):
    # a numpy array as is; an NDArray converts itself (__array__)
    return np.asarray(a)


def _like(x, a):
    """The numpy array x as an array of the same kind and device as a."""
    return array_api.array(np.ascontiguousarray(x), dtype=a.dtype, device=device_of(a))


class EmbeddingGather(TensorOp):
    """out[r] = weight[ids[r]]: rows of weight (N, D) picked by the flat integer ids (R,).

    Equal to one_hot(ids) @ weight without building the (R, N) one-hot
    matrix. Its gradient sums the rows of out_grad into the rows they came
    from (EmbeddingScatter); the two ops are each other's adjoint, so
    gradients of gradients work too.
    """

    def __init__(self, ids):
        self.ids = ids

    def compute(self, weight):
        return _like(_host(weight)[self.ids], weight)

    def gradient(self, out_grad, node):
        return EmbeddingScatter(self.ids, node.inputs[0].shape[0])(out_grad)


class EmbeddingScatter(TensorOp):
    """out (N, D) with out[n] = sum of g[r] over the r with ids[r] = n: one_hot(ids)^T @ g."""

    def __init__(self, ids, num_rows):
        self.ids, self.num_rows = ids, num_rows

    def compute(self, g):
        host = _host(g)
        out = np.zeros((self.num_rows, host.shape[1]), dtype=host.dtype)
        if self.ids.size:
            # np.add.at works one element at a time: on rows sorted stably by id it gets only the
            # repeats of a batch of mostly distinct ids (words), after each id's first row, in the
            # order it alone would add them; ids mostly repeated (positions) are summed a run of
            # rows at a time by reduceat (whose rounding may differ in the last bit)
            order = np.argsort(self.ids, kind="stable")
            ids, rows = self.ids[order], host[order]
            first = np.ones(ids.size, dtype=bool)
            first[1:] = ids[1:] != ids[:-1]
            distinct = ids[first]
            if 2 * distinct.size < ids.size:
                out[distinct] = np.add.reduceat(rows, np.flatnonzero(first), axis=0)
            else:
                out[distinct] = rows[first]
                if distinct.size < ids.size:
                    np.add.at(out, ids[~first], rows[~first])
        return _like(out, g)

    def gradient(self, out_grad, node):
        return EmbeddingGather(self.ids)(out_grad)


class EmbeddingLookup(TensorOp):
    """out[..., :] = weight[ids[...], :]: weight (N, D), ids (any shape) -> ids.shape + (D,).

    d weight = rows of g summed into the rows they were read from; ids get no gradient.
    """

    def compute(self, weight, ids):
        idx = np.asarray(ids).astype(np.int64)
        rows = np.asarray(weight)[idx.reshape(-1)]
        return _like(rows.reshape(idx.shape + (weight.shape[1],)), weight)

    def gradient(self, out_grad, node):
        weight, ids = node.inputs
        idx = np.asarray(ids.realize_cached_data()).astype(np.int64).reshape(-1)
        n, d = weight.shape
        return EmbeddingScatter(idx, n)(out_grad.reshape((idx.size, d))), None


def embedding_lookup(weight, ids):
    return EmbeddingLookup()(weight, ids)
