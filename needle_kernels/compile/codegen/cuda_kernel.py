"""Run a generated CUDA kernel through cupy's RawKernel (compiled by NVRTC on first launch)."""
import numpy

from .cuda_source import cuda_source
from .program import validate_program

_LOADED = {}
_BLOCK = 256


class FusedCudaKernel:
    """``kernel(out, [a0, ...], n)`` on flat float32 cupy arrays."""

    def __init__(self, program, n_inputs):
        import cupy

        self.program = validate_program(program, n_inputs)
        self.n_inputs = n_inputs
        self.name, self.source = cuda_source(self.program, n_inputs)
        self._kernel = cupy.RawKernel(self.source, self.name)

    def __call__(self, out, ins, n):
        if n == 0:
            return
        blocks = min((n + _BLOCK - 1) // _BLOCK, 65535 * 32)
        self._kernel((blocks,), (_BLOCK,), (out, *ins, numpy.int64(n)))


def cuda_kernel(program, n_inputs):
    key = (tuple(program), n_inputs)
    kernel = _LOADED.get(key)
    if kernel is None:
        kernel = _LOADED[key] = FusedCudaKernel(program, n_inputs)
    return kernel
