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
from ..labels import class_indices

__all__ = ["EmbeddingGather", "EmbeddingScatter", "EmbeddingLookup", "embedding_lookup"]


def _ids_like(name, ids, num_rows, a):
    """The integer ids (numpy) as an array of a's kind and device: integer-valued float32, as every
    array holds numbers, which holds every integer up to 2**24 exactly. Each is checked to be in
    [0, num_rows) here, on the host where they are, so a bad one raises at the call on every device
    (the CUDA kernels check them too, but report only at the next synchronization)."""
    ids = class_indices(ids, num_rows, name)
    if ids.size and ids.max() > 2**24:
        raise ValueError(f"embedding: id {ids.max()} is beyond 2**24, which float32 ids cannot hold exactly")
    return array_api.array(ids.astype(np.float32), dtype=a.dtype, device=device_of(a))


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
        return array_api.embedding_gather(weight, _ids_like("embedding_gather", self.ids, weight.shape[0], weight))

    def gradient(self, out_grad, node):
        return EmbeddingScatter(self.ids, node.inputs[0].shape[0])(out_grad)


class EmbeddingScatter(TensorOp):
    """out (N, D) with out[n] = sum of g[r] over the r with ids[r] = n: one_hot(ids)^T @ g."""

    def __init__(self, ids, num_rows):
        self.ids, self.num_rows = ids, num_rows

    def compute(self, g):
        return array_api.embedding_scatter(g, _ids_like("embedding_scatter", self.ids, self.num_rows, g),
                                           self.num_rows)

    def gradient(self, out_grad, node):
        return EmbeddingGather(self.ids)(out_grad)


class EmbeddingLookup(TensorOp):
    """out[..., :] = weight[ids[...], :]: weight (N, D), ids (any shape) -> ids.shape + (D,).

    d weight = rows of g summed into the rows they were read from; ids get no gradient.
    """

    def compute(self, weight, ids):
        rows = array_api.embedding_gather(weight, array_api.reshape(ids, (ids.size,)))
        return array_api.reshape(rows, tuple(ids.shape) + (weight.shape[1],))

    def gradient(self, out_grad, node):
        weight, ids = node.inputs
        idx = np.asarray(ids.realize_cached_data()).astype(np.int64).reshape(-1)
        n, d = weight.shape
        return EmbeddingScatter(idx, n)(out_grad.reshape((idx.size, d))), None


def embedding_lookup(weight, ids):
    return EmbeddingLookup()(weight, ids)
