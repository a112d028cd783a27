"""A module whose forward is checkpointed (see ``needle_kernels.checkpoint``)."""
from ..checkpoint import checkpoint
from .nn_basic import Module

__all__ = ["Checkpoint"]


class Checkpoint(Module):
    """``module(x)``, keeping only ``x`` in the forward pass and recomputing the module's
    activations when the backward pass reaches it."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *inputs):
        return checkpoint(self.module, *inputs)
