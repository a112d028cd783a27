"""Fusion: a connected group of element-wise nodes becomes one ``fused`` node.

A group grows from a root backwards over producers that are element-wise,
have the root's shape (so are all their inputs), and are read only inside the
group (an intermediate needed elsewhere must be stored, so it ends the
group). The group's work becomes a program of steps (``codegen.program``) run
by one generated kernel: one pass over memory instead of one per op, and no
intermediate arrays.
"""
from ..ir.graph import Node
from ..ir.op_table import ELEMENTWISE


def _fusable(node, shape):
    return (node.op in ELEMENTWISE and not node.is_tuple and tuple(node.shape) == shape
            and all(tuple(x.shape) == shape and not x.is_tuple for x in node.inputs))


def _program(members, root):
    """(program, external input nodes) for the members in topological order."""
    names, externals, steps = {}, [], []
    for node in members:
        args = []
        for x in node.inputs:
            if x not in names:
                names[x] = f"a{len(externals)}"
                externals.append(x)
            args.append(names[x])
        scalar = node.attrs.get("scalar")
        steps.append((node.op, tuple(args), scalar))
        names[node] = f"v{len(steps) - 1}"
    return tuple(steps), externals


def fuse_elementwise(graph, min_ops=2):
    """A copy of ``graph`` with every element-wise group of at least ``min_ops`` nodes fused."""
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)
    position = {n: i for i, n in enumerate(graph.nodes)}
    taken = set()
    replaced = {}
    for root in reversed(graph.nodes):
        shape = tuple(root.shape)
        if root in taken or not _fusable(root, shape):
            continue
        group = {root}
        # reverse topological order: a node's users are decided before the node
        for node in reversed(graph.nodes[:position[root]]):
            if (node not in taken and node not in outputs and users[node]
                    and all(u in group for u in users[node]) and _fusable(node, shape)):
                group.add(node)
        if len(group) < min_ops:
            continue
        members = sorted(group, key=position.get)
        program, externals = _program(members, root)
        taken |= group
        replaced[root] = Node(root.id, "fused", externals, {"program": program}, root.shape, root.dtype)
        for node in group - {root}:
            replaced[node] = None
    nodes = []
    for node in graph.nodes:
        if node in replaced:
            if replaced[node] is not None:
                nodes.append(replaced[node])
            continue
        nodes.append(node)
    swap = {old: new for old, new in replaced.items() if new is not None}
    for node in nodes:
        node.inputs = [swap.get(x, x) for x in node.inputs]
    graph.nodes = nodes
    graph.outputs = [swap.get(n, n) for n in graph.outputs]
    return graph.renumbered()
