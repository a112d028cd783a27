"""Needle op classes <-> IR op names and attributes.

An IR node names its op in lowercase (``relu``, ``matmul``, ``add_scalar``)
and keeps the constructor arguments as attributes, so ``build_op(name,
attrs)`` makes a fresh op that computes the same thing. An op class not in
the table is kept as itself (``attrs["op"]``): such a graph still runs, but
only the table's ops can be exported.
"""
import copy

from ..ops import fused_elementwise as _fused
from ... import ops

# (class, IR name, constructor arguments = attribute names)
_TABLE = [
    (ops.EWiseAdd, "add", ()),
    (ops.AddScalar, "add_scalar", ("scalar",)),
    (ops.EWiseMul, "mul", ()),
    (ops.MulScalar, "mul_scalar", ("scalar",)),
    (ops.EWisePow, "power", ()),
    (ops.PowerScalar, "power_scalar", ("scalar",)),
    (ops.EWiseDiv, "div", ()),
    (ops.DivScalar, "div_scalar", ("scalar",)),
    (ops.Negate, "neg", ()),
    (ops.Log, "log", ()),
    (ops.Exp, "exp", ()),
    (ops.ReLU, "relu", ()),
    (ops.Tanh, "tanh", ()),
    (ops.Sigmoid, "sigmoid", ()),
    (ops.Transpose, "transpose", ("axes",)),
    (ops.Reshape, "reshape", ("shape",)),
    (ops.BroadcastTo, "broadcast_to", ("shape",)),
    (ops.Summation, "sum", ("axes",)),
    (ops.Max, "max", ("axes",)),
    (ops.MatMul, "matmul", ()),
    (ops.Stack, "stack", ("axis",)),
    (ops.Split, "split", ("axis",)),
    (ops.Pad, "pad", ("pad_width",)),
    (ops.Crop, "crop", ("pad_width",)),
    (ops.Flip, "flip", ("axes",)),
    (ops.Dilate, "dilate", ("axes", "dilation")),
    (ops.UnDilate, "undilate", ("axes", "dilation")),
    (ops.Im2Col, "im2col", ("kernel_size", "stride")),
    (ops.Col2Im, "col2im", ("image_shape", "stride")),
    (ops.Conv, "conv", ("stride", "padding")),
    (ops.LogSoftmax, "logsoftmax", ("axis",)),
    (ops.LogSumExp, "logsumexp", ("axes",)),
    (ops.MakeTuple, "make_tuple", ()),
    (ops.TupleGetItem, "tuple_get_item", ("index",)),
    (ops.FusedAddScalars, "fused_add_scalars", ("c0", "c1")),
    (ops.EmbeddingGather, "gather_rows", ("ids",)),
    (ops.EmbeddingScatter, "scatter_rows", ("ids", "num_rows")),
    (ops.EmbeddingLookup, "embedding", ()),
    (_fused.FusedElementwise, "fused", ("program",)),
]

_BY_CLASS = {cls: (name, args) for cls, name, args in _TABLE}
_BY_NAME = {name: (cls, args) for cls, name, args in _TABLE}

# Ops computed entry by entry on inputs of the output's shape: what fusion may merge.
ELEMENTWISE = frozenset({
    "add", "mul", "div", "power", "add_scalar", "mul_scalar", "div_scalar", "power_scalar",
    "neg", "relu", "tanh", "sigmoid", "exp", "log",
})


def describe_op(op):
    """(IR name, attributes) of a needle op instance."""
    entry = _BY_CLASS.get(type(op))
    if entry is None:
        return type(op).__name__.lower(), {"op": op}
    name, args = entry
    return name, {a: getattr(op, a) for a in args}


def build_op(name, attrs):
    """A fresh needle op for an IR node (ops keep per-call state, e.g. conv's im2col matrix)."""
    entry = _BY_NAME.get(name)
    if entry is None:
        return copy.copy(attrs["op"])
    cls, args = entry
    return cls(**{a: attrs[a] for a in args})
