"""Constant folding: an op whose inputs are all constants is computed once, at compile time.

In a traced model these are the computations on parameters alone (LSTM's
``b_ih + b_hh``, batch norm's ``weight / sqrt(running_var + eps)``, a bias
reshaped and broadcast to the batch), which eager mode repeats every call.
"""
from ...autograd import Tensor, TensorTuple
from ..ir.op_table import build_op
from ..trace.tracer import host_copy


def _tensor(node):
    if node.is_tuple:
        from ...ops import make_tuple

        return make_tuple(*[Tensor(v, dtype=v.dtype, requires_grad=False) for v in node.value])
    return Tensor(node.value, dtype=node.value.dtype, requires_grad=False)


def constant_folding(graph):
    """A copy of ``graph`` where every op node with only constant inputs is a constant."""
    graph = graph.copy()
    for node in graph.nodes:
        if node.op in ("input", "constant") or not node.inputs:
            continue
        if all(x.op == "constant" for x in node.inputs):
            result = build_op(node.op, node.attrs)(*[_tensor(x) for x in node.inputs])
            node.value = host_copy(result)
            node.is_tuple = isinstance(result, TensorTuple)
            node.op, node.inputs, node.attrs = "constant", [], {"name": "folded"}
    return graph.renumbered()
