"""Tracing: run a forward once and record the graph autograd builds."""
from .tracer import trace
