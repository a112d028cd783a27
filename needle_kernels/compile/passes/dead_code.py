"""Dead-code elimination: drop nodes no output depends on (inputs stay: they are the signature)."""


def dead_code_elimination(graph):
    graph = graph.copy()
    live = set()
    stack = list(graph.outputs)
    while stack:
        node = stack.pop()
        if node in live:
            continue
        live.add(node)
        stack.extend(node.inputs)
    graph.nodes = [n for n in graph.nodes if n in live or n.op == "input"]
    return graph.renumbered()
