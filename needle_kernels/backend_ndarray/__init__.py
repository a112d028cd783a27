"""The strided NDArray and its three backends (numpy reference, Cython + OpenMP, cupy CUDA)."""
import os

# After a parallel region, libgomp's threads spin for a while before sleeping
# (300,000 spins by default). A thread that has gone to sleep costs the next
# kernel a wake-up, which on a virtual machine can take far longer than the
# kernel (a halted vCPU is woken through the hypervisor): a training step's
# kernels, a millisecond of Python apart, should find their threads awake.
# Spinning threads, though, take the cores another thread pool needs: with
# numpy's OpenBLAS on a pool of its own, a notebook's loop of numpy products
# and needle_kernels kernels ran several times slower under a long spin. So the
# spin is long (GOMP_SPINCOUNT=100000, a few milliseconds) where numpy's
# OpenBLAS will run on these same threads (blas_sharing.py), and short (10000)
# where it keeps its own pool (benchmarks/bench_wait_policy.py prints the
# loops; benchmarks/README.md has the figures). The runtime reads this when the
# extension first loads; set OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    from .blas_sharing import will_share

    os.environ["GOMP_SPINCOUNT"] = "100000" if will_share() else "10000"
from .device import (
    BackendDevice,
    all_devices,
    cpu,
    cpu_numpy,
    cuda,
    default_device,
    get_num_threads,
    set_debug,
    set_num_threads,
)
from .ndarray import NDArray
from .ndarray_functions import (
    add,
    array,
    as_strided,
    broadcast_to,
    concatenate,
    device_of,
    divide,
    element_strides,
    empty,
    equal,
    exp,
    flip,
    full,
    greater,
    log,
    matmul,
    max,
    maximum,
    multiply,
    negative,
    ones,
    pad,
    power,
    reshape,
    split,
    stack,
    subtract,
    sum,
    summation,
    swapaxes,
    tanh,
    transpose,
    zeros,
)
from .ndarray_fused import *  # the registry's fused functions (kernels.FUSED_FUNCTIONS)
from ..shapes import broadcast_shapes
