"""An embedding lookup whose indices are a graph input, for tracing.

``nn.Embedding`` reads its indices on the host and bakes them into its op, so
a traced graph would replay the example's tokens forever. While tracing, the
module's forward is replaced by this op, which takes the indices as its
second input (a float Tensor of integer values, as needle passes them).
"""
import numpy

from ...autograd import TensorOp
from ...backend_selection import array_api, device_of
from ...nn.nn_sequence import EmbeddingScatter


class Embedding(TensorOp):
    """out[..., :] = weight[ids[...], :]: weight (N, D), ids (any shape) -> ids.shape + (D,).

    d weight = rows of g summed into the rows they were read from; ids get no gradient.
    """

    def compute(self, weight, ids):
        idx = numpy.asarray(ids).astype(numpy.int64)
        rows = numpy.asarray(weight)[idx.reshape(-1)]
        out = rows.reshape(idx.shape + (weight.shape[1],))
        return array_api.array(numpy.ascontiguousarray(out), dtype=weight.dtype, device=device_of(weight))

    def gradient(self, out_grad, node):
        weight, ids = node.inputs
        idx = numpy.asarray(ids.realize_cached_data()).astype(numpy.int64).reshape(-1)
        n, d = weight.shape
        return EmbeddingScatter(idx, n)(out_grad.reshape((idx.size, d))), None


def embedding(weight, ids):
    return Embedding()(weight, ids)
