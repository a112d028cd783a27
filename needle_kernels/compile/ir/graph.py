"""A small graph IR: a list of nodes in topological order, run with needle's ops.

Each node is one of

* ``input``: the i-th argument of the graph (``attrs["index"]``);
* ``constant``: a value known when tracing (a parameter, a buffer such as a
  running mean, anything not computed from an input); ``value`` holds a
  numpy copy (a tuple of them for a constant TensorTuple);
* an op (``relu``, ``matmul``, ...; see ``op_table``) applied to earlier nodes.

Every node has the ``shape`` and ``dtype`` it had when traced (a tuple node
has a tuple of shapes). The graph is specialised to those shapes, as a
tracing JIT is: a different batch size needs a new trace.
"""
import numpy

from ...autograd import Tensor, TensorTuple
from .op_table import build_op


class Node:
    """``%id = op(inputs...) shape dtype``; ``inputs`` are Nodes of the same graph."""

    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "value", "is_tuple")

    def __init__(self, id, op, inputs, attrs, shape, dtype, value=None, is_tuple=False):
        self.id, self.op, self.inputs, self.attrs = id, op, list(inputs), dict(attrs)
        self.shape, self.dtype, self.value, self.is_tuple = shape, dtype, value, is_tuple

    def __repr__(self):
        return self.text()

    def _attr_text(self):
        shown = []
        for key, value in self.attrs.items():
            if key == "op":
                continue
            if key == "program":
                value = "; ".join(_step_text(s) for s in value)
            elif isinstance(value, numpy.ndarray):
                value = f"<{value.shape[0]} ids>"
            shown.append(f"{key}={value}")
        return shown

    def text(self):
        if self.is_tuple:
            kind = f"tuple[{', '.join(str(tuple(s)) for s in self.shape)}]"
        else:
            kind = str(tuple(self.shape))
        if self.op == "input":
            rhs = f"input[{self.attrs['index']}]"
        elif self.op == "constant":
            rhs = "constant" + (f"({self.attrs['name']})" if self.attrs.get("name") else "")
        else:
            args = [f"%{x.id}" for x in self.inputs] + self._attr_text()
            rhs = f"{self.op}({', '.join(args)})"
        return f"%{self.id} = {rhs} {kind} {self.dtype}"


def _step_text(step):
    op, args, scalar = step
    return f"{op}({', '.join(args)}{'' if scalar is None else ', ' + repr(scalar)})"


class Graph:
    """A traced computation: ``nodes`` in topological order, ``outputs`` (Nodes) and the
    nesting of the traced function's result (``structure``), so ``graph(*inputs)``
    returns what the function returned (a Tensor, or tuples of them)."""

    def __init__(self, nodes, outputs, structure=None):
        self.nodes = list(nodes)
        self.outputs = list(outputs)
        self.structure = structure if structure is not None else (0 if len(outputs) == 1 else tuple(range(len(outputs))))
        self._constants = {}  # (node id, device) -> Tensor, made on first run

    # ------------------------------------------------------------ reading
    @property
    def inputs(self):
        return sorted((n for n in self.nodes if n.op == "input"), key=lambda n: n.attrs["index"])

    @property
    def constants(self):
        return [n for n in self.nodes if n.op == "constant"]

    def op_nodes(self):
        return [n for n in self.nodes if n.op not in ("input", "constant")]

    def users(self):
        """Node -> list of the nodes that read it (graph outputs not included)."""
        out = {n: [] for n in self.nodes}
        for n in self.nodes:
            for x in n.inputs:
                out[x].append(n)
        return out

    def __str__(self):
        lines = [n.text() for n in self.nodes]
        lines.append("return " + ", ".join(f"%{n.id}" for n in self.outputs))
        return "\n".join(lines)

    def __repr__(self):
        return f"<Graph: {len(self.op_nodes())} ops, {len(self.constants)} constants, {len(self.inputs)} inputs>"

    def copy(self):
        """A graph of new Nodes (constant values shared: passes replace them, never write into them)."""
        made = {}
        for n in self.nodes:
            made[n] = Node(n.id, n.op, [made[x] for x in n.inputs], n.attrs, n.shape, n.dtype, n.value, n.is_tuple)
        return Graph(list(made.values()), [made[n] for n in self.outputs], self.structure)

    def renumbered(self):
        """The same graph with ids 0, 1, 2, ... in order (after a pass removed or added nodes)."""
        for i, n in enumerate(self.nodes):
            n.id = i
        self._constants = {}
        return self

    # ------------------------------------------------------------ running
    def _constant(self, node, device):
        key = (node.id, str(device))
        tensor = self._constants.get(key)
        if tensor is None:
            if node.is_tuple:
                from ...ops import make_tuple

                tensor = make_tuple(*[Tensor(v, device=device, dtype=v.dtype, requires_grad=False) for v in node.value])
            else:
                tensor = Tensor(node.value, device=device, dtype=node.value.dtype, requires_grad=False)
            self._constants[key] = tensor
        return tensor

    def run(self, *inputs):
        """Evaluate the graph with needle's ops; returns the flat list of outputs (Tensors)."""
        expected = self.inputs
        if len(inputs) != len(expected):
            raise TypeError(f"this graph takes {len(expected)} inputs, got {len(inputs)}")
        args = [x if isinstance(x, Tensor) else Tensor(x, requires_grad=False) for x in inputs]
        for node, x in zip(expected, args):
            if tuple(x.shape) != tuple(node.shape):
                raise ValueError(f"input {node.attrs['index']}: traced for shape {tuple(node.shape)}, got {tuple(x.shape)}")
        device = args[0].device if args else None
        values = {}
        for node in self.nodes:
            if node.op == "input":
                values[node] = args[node.attrs["index"]]
            elif node.op == "constant":
                values[node] = self._constant(node, device)
            else:
                values[node] = build_op(node.op, node.attrs)(*[values[x] for x in node.inputs])
        return [values[n] for n in self.outputs]

    def __call__(self, *inputs):
        flat = self.run(*inputs)
        return _unflatten(self.structure, flat)

    # ------------------------------------------------------------ pictures
    def picture_root(self):
        """A stand-in for the output Tensor that ``viz.graph_text/graph_dot/draw_graph`` can draw."""
        return _picture(self)

    def dot(self, rankdir="LR"):
        from ... import viz

        return viz.graph_dot(self.picture_root(), rankdir=rankdir)

    def draw(self, backend=None):
        from ... import viz

        return viz.draw_graph(self.picture_root(), backend=backend)


def _unflatten(structure, flat):
    if isinstance(structure, int):
        return flat[structure]
    return tuple(_unflatten(s, flat) for s in structure)


# ---------------------------------------------------------------- pictures

class _Shape:
    def __init__(self, shape):
        self.shape = shape


class _PictureNode:
    """Quacks like a Value for viz: ``op``, ``inputs``, ``requires_grad``, ``realize_cached_data()``."""

    def __init__(self, node, inputs):
        self.inputs = inputs
        self.requires_grad = node.op == "input"
        shape = tuple(tuple(s) for s in node.shape) if node.is_tuple else tuple(node.shape)
        self._data = _Shape(shape)
        if node.op in ("input", "constant"):
            self.op = None
        else:
            # viz labels an op by its class name and a few known attributes
            self.op = _op_class(node.op)()
            for key, value in node.attrs.items():
                if key not in ("op", "program", "ids"):
                    setattr(self.op, key, value)

    def realize_cached_data(self):
        return self._data


_OP_CLASSES = {}


def _op_class(name):
    if name not in _OP_CLASSES:
        _OP_CLASSES[name] = type(name, (), {})
    return _OP_CLASSES[name]


def _picture(graph):
    made = {}
    for node in graph.nodes:
        made[node] = _PictureNode(node, [made[x] for x in node.inputs])
    outs = [made[n] for n in graph.outputs]
    if len(outs) == 1:
        return outs[0]
    root = _PictureNode(Node(-1, "outputs", [], {}, (), ""), outs)
    return root
