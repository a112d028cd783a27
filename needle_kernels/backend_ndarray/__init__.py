"""The strided NDArray and its three backends (numpy reference, Cython + OpenMP, cupy CUDA)."""
import os

# After a parallel region, libgomp's threads spin for a while before sleeping
# (300,000 spins by default). Spinning threads take the cores that others need:
# numpy's OpenBLAS threads where it keeps a pool of its own, PyTorch's, and
# above all another process's kernels (two notebooks on one server, two test
# workers), whose parallel regions then wait for threads the spinners keep off
# the cores. Sleeping at once (OMP_WAIT_POLICY=PASSIVE) instead costs every
# kernel a wake-up, which short kernels run back to back feel most. A short
# spin, GOMP_SPINCOUNT=1000, runs such kernels in a process alone as fast as
# longer spins do (not a kernel after a millisecond of Python: its threads have
# gone to sleep by then, up to 2x slower to start than after 100000 spins), and
# two processes on the same cores within about 2x of sleeping at once, where
# 10000 spins made them 10x slower (benchmarks/bench_wait_policy.py prints each
# policy alone and in pairs; benchmarks/README.md has the figures). The
# runtime reads this when the extension first loads; set OMP_WAIT_POLICY or
# GOMP_SPINCOUNT to choose.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"
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
