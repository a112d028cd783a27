"""Tracing, graph passes, fused element-wise kernels and ONNX export.

    graph = trace(model, x)          # the forward's graph, for x's shapes
    print(graph)                     # %3 = relu(%2) (4, 3) float32
    fast = optimize(graph)           # constant folding, dead code, fusion
    fast(x)                          # same outputs; fused chains run as one C/CUDA kernel
    export_onnx(model, (x,), "model.onnx")
"""
from .ir import Graph, Node
from .trace import trace
from .passes import constant_folding, dead_code_elimination, fuse_elementwise, optimize
from .export import export_onnx, to_onnx
