"""The strided NDArray and its three backends (numpy reference, Cython + OpenMP, cupy CUDA)."""
import os

# libgomp's idle threads spin (300,000 times) before they sleep, so a kernel after some Python
# finds them awake; that is right while they are the only threads computing. Whoever starts
# processes on shared cores sets a short spin (the hub, the test suite: GOMP_SPINCOUNT=1000).
# Within one process, numpy's OpenBLAS keeps a pool of its own when told not to share
# needle_kernels' threads (blas_sharing.py), and two pools that spin keep each other off the
# cores, so the spin is short then too (benchmarks/bench_backend.py --only beside). The runtime
# reads this when the extension first loads.
if (os.environ.get("NEEDLE_SHARE_BLAS_THREADS", "1") == "0" and "OMP_WAIT_POLICY" not in os.environ
        and "GOMP_SPINCOUNT" not in os.environ):
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
