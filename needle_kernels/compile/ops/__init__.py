"""The compiler's own op: the fused element-wise kernel its fusion pass makes."""
