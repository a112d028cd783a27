"""Ops on TensorTuples: build one, read an item, and needle's fused example op."""
from ..autograd import Tensor, TensorOp, TensorTuple, TensorTupleOp, TupleAdjoint


class MakeTuple(TensorTupleOp):
    """out = (a_0, ..., a_n) as one graph node.  da_i = g[i]."""

    def __call__(self, *args):
        # Unlike other nodes it keeps its inputs even when nothing needs a gradient:
        # they are its items (no extra memory), and reading one back is then the
        # item itself, with no node made (see TupleGetItem and the backward pass).
        value = TensorTuple.__new__(TensorTuple)
        value._init(self, args)
        value.realize_cached_data()
        return value

    def compute(self, *args):
        return tuple(args)

    def gradient(self, out_grad, node):
        if not isinstance(out_grad, TensorTuple):
            raise TypeError("the adjoint of a TensorTuple must be a TensorTuple")
        return tuple(out_grad[i] for i in range(len(out_grad)))


def make_tuple(*args):
    return MakeTuple()(*args)


class TupleGetItem(TensorOp):
    """out = a[index] for a TensorTuple a.

    da = a tuple that is g at ``index`` and zero elsewhere: a ``TupleAdjoint``
    holding g alone, so the backward pass adds g to that slot and nothing else.
    """

    def __init__(self, index):
        self.index = index

    def __call__(self, a, fold_const=True):
        if not isinstance(a, TensorTuple):
            raise TypeError(f"tuple_get_item needs a TensorTuple, got {type(a).__name__}")
        n = len(a.realize_cached_data())
        if not -n <= self.index < n:
            raise IndexError(f"TensorTuple index {self.index} out of range for a tuple of {n}")
        self.index %= n
        # reading an item of make_tuple(x, ...) is x itself: no new node
        if fold_const and isinstance(a.op, MakeTuple):
            return a.inputs[self.index]
        return Tensor.make_from_op(self, [a])

    def compute(self, a):
        return a[self.index]

    def gradient(self, out_grad, node):
        return TupleAdjoint(node.inputs[0], {self.index: out_grad})


def tuple_get_item(value, index):
    return TupleGetItem(index)(value)


class FusedAddScalars(TensorTupleOp):
    """out = (a + c0, a + c1): one op with two outputs.  da = g[0] + g[1]."""

    def __init__(self, c0: float, c1: float):
        self.c0 = float(c0)
        self.c1 = float(c1)

    def compute(self, a):
        return a + self.c0, a + self.c1

    def gradient(self, out_grad, node):
        return out_grad[0] + out_grad[1]


def fused_add_scalars(x, c0, c1):
    return FusedAddScalars(c0, c1)(x)
