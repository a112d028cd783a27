"""Graph passes: each takes a Graph and returns a new one computing the same outputs."""
from .constant_folding import constant_folding
from .dead_code import dead_code_elimination
from .fusion import fuse_elementwise


def optimize(graph):
    """Constant folding, then dead-code elimination, then element-wise fusion."""
    return fuse_elementwise(dead_code_elimination(constant_folding(graph)))
