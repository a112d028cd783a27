"""The graph IR: nodes, the graph, and the table between needle ops and IR op names."""
from .graph import Graph, Node
from .op_table import ELEMENTWISE, build_op, describe_op
