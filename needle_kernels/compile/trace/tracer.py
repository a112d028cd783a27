"""``trace(module_or_fn, *example_inputs)``: the forward's autograd graph as a ``Graph``.

Eager needle records every op a Tensor that needs a gradient came from
(``op``, ``inputs``). Tracing runs the forward once on copies of the example
inputs marked ``requires_grad=True`` (so every value computed from them
keeps its history), then walks the graph from the outputs:

* a node that is an example input becomes an ``input`` node;
* any other leaf (a parameter, a running mean, a zero initial state, a value
  made only from those) becomes a ``constant`` holding a numpy copy;
* every other node becomes an op node (``op_table`` names it).

``nn.Embedding`` reads its indices on the host, outside the graph; while
tracing, its forward is replaced by an op that takes the indices as an input,
so the graph works for any tokens. A fused op (``matmul_bias``, ``layer_norm``,
``softmax``, ``conv_nchw``, ``lstm_cell``, ``lstm_layer``) is lowered to the generic ops
this graph's passes and the ONNX exporter know, through its own ``decompose`` (see
``lowered``); the modules run as they always do. Trace a module in ``eval()`` mode:
dropout masks and batch statistics of the example batch would otherwise be
frozen into the graph.
"""
import numpy

from ...autograd import Tensor, TensorTuple, find_topo_sort
from ...ops import TupleGetItem, embedding_lookup, make_tuple
from ...nn import Embedding, Module, Parameter
from ..ir.graph import Graph, Node
from ..ir.op_table import describe_op


def _as_tensor(x):
    data = x.realize_cached_data() if isinstance(x, Tensor) else Tensor(x, requires_grad=False).realize_cached_data()
    # a fresh leaf: the caller's tensor keeps its own graph and grad
    return Tensor.make_const(data, requires_grad=True)


def _flatten(result, flat):
    """Tensors of a nested tuple/list/TensorTuple result, and the nesting as indices into the flat list."""
    if isinstance(result, Tensor):
        flat.append(result)
        return len(flat) - 1
    if isinstance(result, (tuple, list, TensorTuple)):
        return tuple(_flatten(x, flat) for x in result)
    raise TypeError(f"trace: the traced function must return Tensors (or tuples of them), got {type(result).__name__}")


def _embedding_modules(module):
    return [m for m in [module] + module._children() if isinstance(m, Embedding)]


def _shape_dtype(value):
    data = value.realize_cached_data()
    if isinstance(value, TensorTuple):
        return tuple(tuple(x.shape) for x in data), str(numpy.dtype(data[0].dtype)) if data else "float32", True
    return tuple(data.shape), str(numpy.dtype(data.dtype)), False


def host_copy(value):
    """A numpy copy of a Tensor's array (a tuple of copies for a TensorTuple): constants own their values."""
    data = value.realize_cached_data()
    if isinstance(value, TensorTuple):
        return tuple(numpy.array(x, copy=True) for x in data)
    return numpy.array(data, copy=True)


def trace(module_or_fn, *example_inputs):
    """Run ``module_or_fn(*example_inputs)`` once and return its graph (a ``Graph``).

    ``graph(*inputs)`` then computes the same outputs for new inputs of the same
    shapes; ``print(graph)`` shows one node per line.
    """
    inputs = [_as_tensor(x) for x in example_inputs]
    patched = _embedding_modules(module_or_fn) if isinstance(module_or_fn, Module) else []
    for m in patched:
        # an instance attribute shadows the class's forward; Module.__call__ calls self.forward
        m.forward = (lambda mod: lambda x: embedding_lookup(mod.weight, x if isinstance(x, Tensor)
                                                     else Tensor(numpy.asarray(x, dtype="float32"), requires_grad=False)))(m)
    try:
        result = module_or_fn(*inputs)
    finally:
        for m in patched:
            del m.__dict__["forward"]
    flat = []
    structure = _flatten(result, flat)
    return graph_of(lowered(flat), inputs, structure)


def lowered(outputs):
    """``outputs`` recomputed with every op that has a ``decompose`` replaced by it.

    Walks the graph in order: a fused op's node becomes its decomposition on the (lowered)
    inputs, a node whose inputs changed is computed again by its own op, and an element of
    a decomposed tuple op is that element itself. Nodes below no fused op stay as they are.
    """
    new = {}
    for value in find_topo_sort(list(outputs)):
        if value.op is None:
            continue
        inputs = [new.get(id(x), x) for x in value.inputs]
        decompose = getattr(value.op, "decompose", None)
        if isinstance(value.op, TupleGetItem) and isinstance(inputs[0], tuple):
            new[id(value)] = inputs[0][value.op.index]
        elif decompose is not None:
            new[id(value)] = decompose(*inputs)
        elif any(a is not b for a, b in zip(inputs, value.inputs)):
            new[id(value)] = value.op(*(make_tuple(*x) if isinstance(x, tuple) else x for x in inputs))
    return [_as_value(new.get(id(x), x)) for x in outputs]


def _as_value(x):
    return make_tuple(*x) if isinstance(x, tuple) else x


def graph_of(outputs, inputs, structure=None):
    """The Graph computing the Tensors ``outputs`` from the leaves ``inputs``."""
    input_index = {id(x): i for i, x in enumerate(inputs)}
    nodes, made = [], {}
    for value in find_topo_sort(list(outputs)):
        shape, dtype, is_tuple = _shape_dtype(value)
        if id(value) in input_index:
            node = Node(len(nodes), "input", [], {"index": input_index[id(value)]}, shape, dtype)
        elif value.op is None:
            attrs = {"name": "parameter"} if isinstance(value, Parameter) else {}
            node = Node(len(nodes), "constant", [], attrs, shape, dtype, value=host_copy(value), is_tuple=is_tuple)
        else:
            name, attrs = describe_op(value.op)
            node = Node(len(nodes), name, [made[id(x)] for x in value.inputs], attrs, shape, dtype, is_tuple=is_tuple)
        made[id(value)] = node
        nodes.append(node)
    for i, x in enumerate(inputs):  # an input the outputs do not use is still an argument
        if id(x) not in made:
            shape, dtype, _ = _shape_dtype(x)
            node = Node(len(nodes), "input", [], {"index": i}, shape, dtype)
            made[id(x)] = node
            nodes.insert(0, node)
    graph = Graph(nodes, [made[id(x)] for x in outputs], structure)
    return graph.renumbered()
