"""ONNX export of a traced graph (needs the optional ``onnx`` package: ``pip install -e '.[onnx]'``).

Each IR op becomes the ONNX ops that compute the same thing (opset 17):
element-wise ops map one to one (a scalar becomes a 0-d initializer), ``sum``
/ ``max`` / ``logsumexp`` are ``Reduce*`` with keepdims=0, ``split`` is
``Split`` + ``Squeeze`` and ``stack`` ``Unsqueeze`` + ``Concat`` (an LSTM
stays the Sigmoid, Tanh, MatMul, Split and Concat it was traced as), and
constants are initializers.

Layouts: needle's ``conv`` works on NHWC images with weights (K, K, C_in,
C_out); ONNX's Conv on NCHW with (C_out, C_in, K, K). The export wraps it
in Transposes (NHWC -> NCHW -> NHWC) and stores a constant weight already
permuted to (C_out, C_in, K, K). Pooling, traced as a strided window view
(``im2col``) reduced over its two window axes, becomes MaxPool / AveragePool.
"""
import numpy

from ...ops import Transpose
from ..trace.tracer import trace

OPSET = 17
_INT64_MAX = numpy.iinfo(numpy.int64).max


class _Builder:
    def __init__(self, graph):
        from onnx import helper

        self.helper = helper
        self.graph = graph
        self.users = graph.users()
        self.nodes, self.initializers = [], []
        self.names = {}  # IR node -> ONNX value name (a list of names for a tuple node)
        self.count = 0

    def fresh(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array, hint="const"):
        from onnx import numpy_helper

        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(numpy.ascontiguousarray(array), name))
        return name

    def scalar(self, value, dtype):
        return self.const(numpy.array(value, dtype=dtype), "scalar")

    def ints(self, values):
        return self.const(numpy.array(list(values), dtype=numpy.int64), "ints")

    def op(self, op_type, inputs, n_outputs=1, **attrs):
        outputs = [self.fresh(op_type.lower()) for _ in range(n_outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), outputs, **attrs))
        return outputs if n_outputs != 1 else outputs[0]


def _axes(axes, ndim):
    if axes is None:
        return list(range(ndim))
    axes = (axes,) if isinstance(axes, int) else axes
    return sorted(int(a) % ndim for a in axes)


def _is_pool(node, users):
    """im2col(x, k, s) read only by max/sum over its window axes (3, 4): a pooling."""
    return node.op == "im2col" and users and all(
        u.op in ("max", "sum") and _axes(u.attrs["axes"], 6) == [3, 4] for u in users)


def _emit(b, node):
    """ONNX nodes for one IR node; returns its value name (or list of names)."""
    x = [b.names.get(i) for i in node.inputs]
    dtype = numpy.dtype(node.dtype)
    ndim_in = len(node.inputs[0].shape) if node.inputs and not node.inputs[0].is_tuple else None
    op, attrs = node.op, node.attrs
    simple = {"add": "Add", "mul": "Mul", "div": "Div", "power": "Pow", "neg": "Neg", "relu": "Relu",
              "tanh": "Tanh", "sigmoid": "Sigmoid", "exp": "Exp", "log": "Log", "matmul": "MatMul"}
    if op in simple:
        return b.op(simple[op], x)
    scalar_ops = {"add_scalar": "Add", "mul_scalar": "Mul", "div_scalar": "Div", "power_scalar": "Pow"}
    if op in scalar_ops:
        return b.op(scalar_ops[op], [x[0], b.scalar(attrs["scalar"], dtype)])
    if op == "transpose":
        return b.op("Transpose", x, perm=list(Transpose(attrs["axes"])._perm(ndim_in)))
    if op == "reshape":
        return b.op("Reshape", [x[0], b.ints(node.shape)])
    if op == "broadcast_to":
        return b.op("Expand", [x[0], b.ints(node.shape)])
    if op == "sum":
        axes = _axes(attrs["axes"], ndim_in)
        if node.inputs[0].op == "im2col" and _is_pool(node.inputs[0], b.users[node.inputs[0]]):
            return _pool(b, node, "AveragePool", scale=node.inputs[0].attrs["kernel_size"] ** 2)
        return b.op("ReduceSum", [x[0], b.ints(axes)], keepdims=0) if axes else x[0]
    if op == "max":
        if node.inputs[0].op == "im2col" and _is_pool(node.inputs[0], b.users[node.inputs[0]]):
            return _pool(b, node, "MaxPool")
        return b.op("ReduceMax", x, axes=_axes(attrs["axes"], ndim_in), keepdims=0)
    if op == "logsumexp":
        return b.op("ReduceLogSumExp", x, axes=_axes(attrs["axes"], ndim_in), keepdims=0)
    if op == "logsoftmax":
        return b.op("LogSoftmax", x, axis=_axes(attrs["axis"], ndim_in)[0])
    if op == "make_tuple":
        return list(x)
    if op == "tuple_get_item":
        return x[0][attrs["index"]]
    if op == "split":
        axis = _axes(attrs["axis"], ndim_in)[0]
        n = node.inputs[0].shape[axis]
        parts = b.op("Split", [x[0], b.ints([1] * n)], n_outputs=n, axis=axis)
        parts = parts if isinstance(parts, list) else [parts]
        return [b.op("Squeeze", [p, b.ints([axis])]) for p in parts]
    if op == "stack":
        axis = _axes(attrs["axis"], len(node.shape))[0]
        return b.op("Concat", [b.op("Unsqueeze", [p, b.ints([axis])]) for p in x[0]], axis=axis)
    if op == "pad":
        lo, hi = zip(*attrs["pad_width"])
        return b.op("Pad", [x[0], b.ints(lo + hi), b.scalar(0.0, dtype)], mode="constant")
    if op == "crop":
        shape = node.inputs[0].shape
        lo, hi = zip(*attrs["pad_width"])
        ends = [n - h for n, h in zip(shape, hi)]
        return b.op("Slice", [x[0], b.ints(lo), b.ints(ends), b.ints(range(len(shape)))])
    if op == "flip":
        axes = _axes(attrs["axes"], ndim_in)
        return b.op("Slice", [x[0], b.ints([-1] * len(axes)), b.ints([-_INT64_MAX] * len(axes)), b.ints(axes),
                              b.ints([-1] * len(axes))])
    if op == "undilate":
        axes = _axes(attrs["axes"], ndim_in)
        step = attrs["dilation"] + 1
        return b.op("Slice", [x[0], b.ints([0] * len(axes)), b.ints([_INT64_MAX] * len(axes)), b.ints(axes),
                              b.ints([step] * len(axes))])
    if op == "conv":
        return _conv(b, node, x)
    if op == "im2col":
        if _is_pool(node, b.users[node]):
            return None  # emitted by its max / sum user
        raise NotImplementedError("ONNX export: a window view (im2col) that is not a pooling")
    if op == "embedding":
        return b.op("Gather", [x[0], b.op("Cast", [x[1]], to=7)], axis=0)  # 7 = INT64
    if op == "gather_rows":
        return b.op("Gather", [x[0], b.const(numpy.asarray(attrs["ids"], dtype=numpy.int64), "ids")], axis=0)
    raise NotImplementedError(
        f"ONNX export: no ONNX form for op {op!r} (export the traced graph before fusion)" if op == "fused"
        else f"ONNX export: no ONNX form for op {op!r}")


def _pool(b, node, kind, scale=None):
    """max/sum over im2col(x, k, s)'s window axes, x NHWC -> (N, Ho, Wo, C)."""
    window = node.inputs[0]
    k, s = window.attrs["kernel_size"], window.attrs["stride"]
    nchw = b.op("Transpose", [b.names[window.inputs[0]]], perm=[0, 3, 1, 2])
    pooled = b.op(kind, [nchw], kernel_shape=[k, k], strides=[s, s])
    if scale is not None:  # AveragePool is the mean; the traced op is the window's sum
        pooled = b.op("Mul", [pooled, b.scalar(scale, numpy.dtype(node.dtype))])
    return b.op("Transpose", [pooled], perm=[0, 2, 3, 1])


def _conv(b, node, x):
    image, weight = node.inputs
    p, s = node.attrs["padding"], node.attrs["stride"]
    k = weight.shape[0]
    if weight.op == "constant":
        w = b.const(numpy.transpose(weight.value, (3, 2, 0, 1)), "conv_weight")  # (K, K, Ci, Co) -> (Co, Ci, K, K)
    else:
        w = b.op("Transpose", [x[1]], perm=[3, 2, 0, 1])
    nchw = b.op("Transpose", [x[0]], perm=[0, 3, 1, 2])
    out = b.op("Conv", [nchw, w], kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])
    return b.op("Transpose", [out], perm=[0, 2, 3, 1])


def to_onnx(graph, name="needle_kernels"):
    """The ONNX ModelProto of a traced (unfused) Graph; inputs ``input_<i>``, outputs ``output_<i>``."""
    import onnx
    from onnx import TensorProto, helper

    b = _Builder(graph)
    elem = lambda dtype: helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))
    inputs = []
    for node in graph.nodes:
        if node.op == "input":
            name_ = f"input_{node.attrs['index']}"
            inputs.append(helper.make_tensor_value_info(name_, elem(node.dtype), list(node.shape)))
            b.names[node] = name_
        elif node.op == "constant":
            if node.is_tuple:
                b.names[node] = [b.const(v, f"c{node.id}") for v in node.value]
            else:
                b.names[node] = b.const(node.value, f"c{node.id}")
        else:
            b.names[node] = _emit(b, node)
    outputs = []
    for i, node in enumerate(graph.outputs):
        out_name = f"output_{i}"
        b.nodes.append(helper.make_node("Identity", [b.names[node]], [out_name]))
        outputs.append(helper.make_tensor_value_info(out_name, elem(node.dtype), list(node.shape)))
    used = {name_ for n in b.nodes for name_ in n.input}  # e.g. items of a constant tuple nobody reads
    initializers = [t for t in b.initializers if t.name in used]
    onnx_graph = helper.make_graph(b.nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="needle_kernels")
    model.ir_version = 8  # what opset 17 needs; older runtimes refuse newer IR versions
    onnx.checker.check_model(model)
    return model


def export_onnx(module, example_inputs, path):
    """Trace ``module`` on ``example_inputs`` (a Tensor or a tuple of them) and write it to ``path`` as ONNX.

    Returns the ModelProto. Inputs are ``input_<i>``, outputs ``output_<i>``
    in the order the traced forward returns them (nested tuples flattened).
    """
    import onnx

    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    model = to_onnx(trace(module, *example_inputs))
    onnx.save(model, str(path))
    return model
