"""One op that runs a whole chain of element-wise ops as a single generated kernel.

``program`` is a tuple of steps ``(op, args, scalar)`` in order; an argument
is ``"a<i>"`` (the op's i-th input) or ``"v<j>"`` (step j's result) and the
last step is the output. Every input has the output's shape. The kernel is
generated from the program (``codegen``): C compiled with gcc -O3 -fopenmp on
the CPU devices, CUDA C through cupy on a GPU; other arrays (e.g. float64 in
numpy mode) run the program with numpy, which is also its reference meaning.
"""
import numpy

from ...autograd import TensorOp
from ...backend_selection import NDArray, array_api, device_of
from ..codegen import program_numpy


class FusedElementwise(TensorOp):
    """out = program(a_0, ..., a_n), one pass over the entries, no intermediate arrays.

    For inference: differentiate the unfused graph (a fused node has no gradient).
    """

    def __init__(self, program):
        self.program = tuple((op, tuple(args), scalar) for op, args, scalar in program)

    def compute(self, *arrays):
        shape = tuple(arrays[0].shape)
        if any(tuple(a.shape) != shape for a in arrays):
            raise ValueError(f"fused: inputs must share one shape, got {[tuple(a.shape) for a in arrays]}")
        if isinstance(arrays[0], NDArray) and not isinstance(arrays[0], numpy.ndarray):
            return _run_ndarray(self.program, arrays, shape)
        if all(isinstance(a, numpy.ndarray) and a.dtype == numpy.float32 for a in arrays):
            from ..codegen.cpu_kernel import cpu_kernel

            ins = [numpy.ascontiguousarray(a) for a in arrays]
            out = numpy.empty(shape, dtype=numpy.float32)
            cpu_kernel(self.program, len(arrays))(out.ctypes.data, [a.ctypes.data for a in ins], out.size)
            return out
        return program_numpy(self.program, [numpy.asarray(a) for a in arrays])

    def gradient(self, out_grad, node):
        raise NotImplementedError("a fused kernel has no gradient: differentiate the unfused graph")


def _run_ndarray(program, arrays, shape):
    device = device_of(arrays[0])
    compact = [a.compact() for a in arrays]
    out = NDArray.make(shape, device=device)
    size = int(numpy.prod(shape))
    if device.name == "cuda":
        from ..codegen.cuda_kernel import cuda_kernel

        cuda_kernel(program, len(arrays))(out._handle.array, [a._handle.array for a in compact], size)
    else:
        from ..codegen.cpu_kernel import cpu_kernel

        # compact() leaves offset 0 only when it copies; a compact view may start further in
        ptrs = [a._handle.ptr() + 4 * a.offset for a in compact]
        cpu_kernel(program, len(arrays))(out._handle.ptr(), ptrs, size)
    return out
