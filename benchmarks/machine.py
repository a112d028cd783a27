"""The machine a benchmark ran on, printed above its figures.

A timing means little without its machine: the same kernels run about twice as
fast with AVX-512 as with AVX2, numpy's matmul depends on the BLAS it was built
with and the kernel that BLAS picked for this CPU, and every library's default
thread count follows the cores it sees. ``describe()`` gives one line each for
the CPU, the native backend's choices, numpy's BLAS and (when the caller has
imported it) PyTorch.
"""
import ctypes
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
    cache blocks (kc, mc, nc), and its threads; or why the backend is missing."""
    try:
        from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu
    except ImportError as exc:
        return f"not built ({exc})"
    k = cpu.isa()
    return (f"{k['name']} (this CPU can run {', '.join(cpu.available_isas())}); matmul register tile "
            f"{k['mr']}x{k['nr']}, cache blocks kc {k['kc']} mc {k['mc']} nc {k['nc']}; "
            f"{cpu.get_num_threads()} threads")


def _openblas_call(name, restype):
    """Call OpenBLAS's ``name`` in the copy numpy loaded, or None when numpy's BLAS is not OpenBLAS.

    numpy's wheels rename the symbols of their OpenBLAS (``scipy_`` prefix, ``64_`` suffix for
    64-bit integers), so each spelling is tried; the library is found among the process's mappings
    (Linux), as it is a private copy that ctypes cannot find by name.
    """
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for symbol in (name, name + "64_", "scipy_" + name, "scipy_" + name + "64_"):
            if hasattr(lib, symbol):
                fn = getattr(lib, symbol)
                fn.restype = restype
                return fn()
    return None


def numpy_blas():
    """numpy's version, the BLAS it was built with, and (OpenBLAS) the kernel it chose and its threads."""
    np.ones((2, 2)) @ np.ones((2, 2))  # numpy loads its BLAS on the first product
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    line = f"numpy {np.__version__}: BLAS {blas.get('name', '?')} {blas.get('version', '')}".rstrip()
    core = _openblas_call("openblas_get_corename", ctypes.c_char_p)
    if core is not None:
        line += f", kernels for {core.decode()}, {_openblas_call('openblas_get_num_threads', ctypes.c_int)} threads"
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
