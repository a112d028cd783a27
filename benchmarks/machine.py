"""The machine a benchmark ran on, printed above its figures.

A timing means little without its machine: the same kernels run about twice as
fast with AVX-512 as with AVX2, numpy's matmul depends on the BLAS it was built
with and the kernel that BLAS picked for this CPU, and every library's default
thread count follows the cores it sees. ``describe()`` gives one line each for
the CPU, the native backend's choices, numpy's BLAS and (when the caller has
imported it) PyTorch.
"""
import os
import platform
import re
import subprocess

import numpy as np


def cpu_model():
    """The CPU's model name: /proc/cpuinfo, else ``lscpu`` (ARM's cpuinfo has no model name), else platform."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        found = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
        if found:
            return found.group(1).strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def usable_cores():
    """Cores this process may run on (a container or ``taskset`` may allow fewer than the machine has)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def native_backend():
    """The Cython backend's instruction set, its matmul micro-kernel's register tile (mr x nr) and
    cache blocks (kc, mc, band) with the CPU family they were tuned for, and its threads; or why the
    backend is missing."""
    try:
        from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu
    except ImportError as exc:
        return f"not built ({exc})"
    from needle_kernels.backend_ndarray import cpu_tuning

    k, conv, tuned, direct = cpu.isa(), cpu.conv_blocking(), cpu_tuning.applied(), cpu.gemm_direct_rule()
    rows = (f" by products of fewer than {direct['rows']} rows or at most {direct['narrow']} columns "
            f"(or {direct['deep']} deep, A row-major and B packed in strips)" if direct["rows"] else "")
    return (f"tuned for {tuned.get('family', '?')}: {k['name']} (this CPU can run "
            f"{', '.join(cpu.available_isas())}); matmul register tile {k['mr']}x{k['nr']}, cache blocks "
            f"kc {k['kc']} mc {k['mc']} band {k['band']} ({tuned.get('source', '?')}), B read in place up to "
            f"{direct['limit']} floats{rows}; convolution blocks "
            f"of {conv['winograd']} floats (Winograd) and {conv['implicit']} (implicit); "
            f"{cpu.get_num_threads()} threads")


def numpy_blas():
    """numpy's version, the BLAS it was built with, and (threadpoolctl's view) the kernels it chose,
    its threads and whether they are needle_kernels' (blas_sharing.py)."""
    np.ones((2, 2)) @ np.ones((2, 2))  # numpy loads its BLAS on the first product
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    line = f"numpy {np.__version__}: BLAS {blas.get('name', '?')} {blas.get('version', '')}".rstrip()
    try:
        # the Cython backend shares numpy's BLAS threads as it loads: load it, as a first op would
        from needle_kernels.backend_ndarray import blas_sharing, ndarray_backend_cpu  # noqa: F401
    except ImportError:
        return line
    for lib in blas_sharing.blas_libraries():
        pool = "needle_kernels' OpenMP threads" if lib["shares_threads"] else "its own thread pool"
        line += (f"; {lib['internal_api']} kernels for {lib.get('architecture', '?')}, "
                 f"{lib['num_threads']} threads, on {pool}")
    return line


def pytorch(torch):
    """PyTorch's version, intra-op threads and the vector instructions its CPU kernels use."""
    return (f"torch {torch.__version__}: {torch.get_num_threads()} threads, "
            f"CPU capability {torch.backends.cpu.get_cpu_capability()}")


def describe(torch=None):
    """Lines naming the machine. PyTorch is described only when the caller passes the module it has
    imported: importing it here would load its OpenMP runtime into a process that times without it."""
    lines = [f"cpu: {cpu_model()}, {os.cpu_count()} cores ({usable_cores()} usable by this process)",
             f"needle_kernels cpu backend: {native_backend()}",
             numpy_blas()]
    if torch is not None:
        lines.append(pytorch(torch))
    return lines
