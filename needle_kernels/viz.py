"""Pictures of a Tensor's autograd graph: the ops that made it and their shapes.

* ``graph_text(t)``: one line per node in topological order (always works).
* ``graph_dot(t)``: the graph in Graphviz's DOT language (a string).
* ``draw_graph(t)``: a picture for a notebook: a ``graphviz.Source`` when the
  ``graphviz`` package and the ``dot`` program are installed, otherwise a
  matplotlib Figure (laid out by depth, leaves on the left).
"""
import shutil

from .autograd import TensorTuple, find_topo_sort

_PARAMS = ("scalar", "axes", "axis", "shape", "index", "stride", "padding", "dilation", "kernel_size")


def _op_label(op):
    params = []
    for name in _PARAMS:
        value = getattr(op, name, None)
        if value is not None and not callable(value):
            params.append(f"{name}={value}")
    return type(op).__name__ + (f"({', '.join(params)})" if params else "")


def _shape(node):
    data = node.realize_cached_data()
    if isinstance(node, TensorTuple):
        return "(" + ", ".join(str(tuple(x.shape)) for x in data) + ")"
    return str(tuple(data.shape))


def _nodes(tensor):
    order = find_topo_sort([tensor])
    return order, {node: i for i, node in enumerate(order)}


def graph_text(tensor):
    """The graph as text, e.g. ``%2 = EWiseMul(%0, %1)  shape (2, 3)``."""
    order, ids = _nodes(tensor)
    lines = []
    for node in order:
        shape = _shape(node)
        if node.op is None:
            kind = "parameter" if type(node).__name__ == "Parameter" else "leaf"
            grad = ", requires_grad" if node.requires_grad else ""
            lines.append(f"%{ids[node]} = {kind}  shape {shape}{grad}")
        else:
            args = ", ".join(f"%{ids[x]}" for x in node.inputs)
            lines.append(f"%{ids[node]} = {_op_label(node.op)}({args})  shape {shape}")
    return "\n".join(lines)


def graph_dot(tensor, rankdir="LR"):
    """The graph in the DOT language: ops as boxes, leaves as ellipses, edges input -> use."""
    order, ids = _nodes(tensor)
    out = [f"digraph autograd {{\n  rankdir={rankdir};\n  node [fontname=monospace, fontsize=10];"]
    for node in order:
        if node.op is None:
            style = "shape=ellipse, style=filled, fillcolor=lightblue" if node.requires_grad else "shape=ellipse"
            label = f"%{ids[node]}\\n{_shape(node)}"
        else:
            style = "shape=box, style=rounded"
            label = f"%{ids[node]} {_op_label(node.op)}\\n{_shape(node)}"
        out.append(f'  n{ids[node]} [label="{label}", {style}];')
        for inp in node.inputs:
            out.append(f"  n{ids[inp]} -> n{ids[node]};")
    out.append("}")
    return "\n".join(out)


def _has_graphviz():
    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


def draw_graph(tensor, backend=None):
    """A displayable picture of ``tensor``'s graph.

    ``backend`` is ``"graphviz"``, ``"matplotlib"`` or None (graphviz when available).
    """
    if backend is None:
        backend = "graphviz" if _has_graphviz() else "matplotlib"
    if backend == "graphviz":
        import graphviz

        return graphviz.Source(graph_dot(tensor))
    if backend != "matplotlib":
        raise ValueError(f"draw_graph: backend must be 'graphviz' or 'matplotlib', got {backend!r}")
    return _draw_matplotlib(tensor)


def _draw_matplotlib(tensor):
    from matplotlib.figure import Figure

    order, ids = _nodes(tensor)
    # depth = longest path from a leaf: every edge points to the right
    depth = {}
    for node in order:
        depth[node] = 1 + max((depth[x] for x in node.inputs), default=-1)
    columns = {}
    for node in order:
        columns.setdefault(depth[node], []).append(node)
    n_cols = max(columns) + 1
    n_rows = max(len(c) for c in columns.values())
    # a Figure not registered with pyplot: shown once, when returned to a notebook
    fig = Figure(figsize=(max(4.0, 2.6 * n_cols), max(2.0, 1.0 * n_rows + 0.5)))
    ax = fig.add_subplot()
    ax.set_axis_off()
    pos = {}
    for col, nodes in columns.items():
        for row, node in enumerate(nodes):
            pos[node] = (col, (len(nodes) - 1) / 2.0 - row)
    for node in order:
        for inp in node.inputs:
            ax.annotate("", xy=pos[node], xytext=pos[inp],
                        arrowprops=dict(arrowstyle="->", color="gray", shrinkA=28, shrinkB=28))
    for node in order:
        x, y = pos[node]
        if node.op is None:
            text, color = f"%{ids[node]} {_shape(node)}", ("lightblue" if node.requires_grad else "white")
        else:
            text, color = f"%{ids[node]} {type(node.op).__name__}\n{_shape(node)}", "lightyellow"
        ax.text(x, y, text, ha="center", va="center", fontsize=8, family="monospace",
                bbox=dict(boxstyle="round", facecolor=color, edgecolor="black"))
    ax.set_xlim(-0.6, n_cols - 0.4)
    ax.set_ylim(-n_rows / 2.0 - 0.2, n_rows / 2.0 + 0.2)
    return fig
