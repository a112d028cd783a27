"""Compile a generated C kernel with the Cython backend's toolchain and load it with ctypes.

The compiler is the one Python's build uses (``sysconfig``'s CC, as setuptools
does for the Cython extension) with the same flags, ``-O3 -fopenmp``
(``-march=native`` too when ``NK_NATIVE=1``). Shared libraries are cached in
``$NEEDLE_KERNEL_CACHE`` (default ``~/.cache/needle_kernels/fused``) under a
hash of the source and the command, and written under a temporary name then
renamed, so concurrent processes never load a half-written file.
``NEEDLE_DEBUG_KERNELS=1`` prints each kernel's source and build command.
"""
import ctypes
import hashlib
import os
import shlex
import subprocess
import sysconfig
import tempfile

from .c_source import c_source
from .program import validate_program

_LOADED = {}  # (program, n_inputs) -> FusedCpuKernel


def cache_dir():
    path = os.environ.get("NEEDLE_KERNEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "needle_kernels", "fused")
    os.makedirs(path, exist_ok=True)
    return path


def backend_include_dir():
    """Where the Cython backend's kernel headers are (the generated code includes them)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(package, "backend_ndarray")


def compiler_command():
    """The C compiler and flags: the Cython backend's, plus what a shared library needs."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "gcc")[:1] or ["gcc"]
    flags = ["-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu99", "-Wno-unused-function",
             "-I", backend_include_dir()]
    if os.environ.get("NK_NATIVE") == "1":
        flags.append("-march=native")
    return cc + flags


def build_shared_library(name, source):
    """Compile ``source`` into the cache (once per source and command); returns the library's path."""
    command = compiler_command()
    with open(os.path.join(backend_include_dir(), "ndarray_backend_cpu_kernels.h"), "rb") as f:
        headers = f.read()
    with open(os.path.join(backend_include_dir(), "ndarray_backend_cpu_vmath.h"), "rb") as f:
        headers += f.read()
    # the key covers the included headers too: an edited header rebuilds the kernels
    key = source.encode() + b"\0" + " ".join(command).encode() + b"\0" + headers
    digest = hashlib.sha256(key).hexdigest()[:24]
    directory = cache_dir()
    target = os.path.join(directory, f"{name}_{digest}.so")
    if os.path.exists(target):
        return target
    fd, c_path = tempfile.mkstemp(suffix=".c", prefix=name, dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_so = c_path[:-2] + ".so"
    full = command + [c_path, "-o", tmp_so, "-lm"]
    if os.environ.get("NEEDLE_DEBUG_KERNELS") == "1":
        print(source, "\n$", " ".join(full))
    try:
        proc = subprocess.run(full, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling fused kernel {name} failed ({' '.join(full)}):\n{proc.stderr}\n{source}")
        os.replace(tmp_so, target)
    finally:
        for path in (c_path, tmp_so):
            if os.path.exists(path):
                os.remove(path)
    return target


class FusedCpuKernel:
    """A loaded kernel: ``kernel(out_ptr, [in_ptr, ...], n)`` on float32 buffers of n entries."""

    def __init__(self, program, n_inputs):
        self.program = validate_program(program, n_inputs)
        self.n_inputs = n_inputs
        self.name, self.source = c_source(self.program, n_inputs)
        self.path = build_shared_library(self.name, self.source)
        self._lib = ctypes.CDLL(self.path)
        self._fn = getattr(self._lib, self.name)
        self._fn.restype = None
        self._fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_long]
        self._pointers = ctypes.c_void_p * n_inputs

    def __call__(self, out_ptr, in_ptrs, n):
        if len(in_ptrs) != self.n_inputs:
            raise ValueError(f"{self.name} takes {self.n_inputs} inputs, got {len(in_ptrs)}")
        self._fn(out_ptr, self._pointers(*in_ptrs), n)


def cpu_kernel(program, n_inputs):
    """The compiled kernel of ``program`` (built on first use, then reused)."""
    key = (tuple(program), n_inputs)
    kernel = _LOADED.get(key)
    if kernel is None:
        kernel = _LOADED[key] = FusedCpuKernel(program, n_inputs)
    return kernel
