"""Ops the compiler adds to needle's: the traced embedding lookup and the fused element-wise kernel."""
