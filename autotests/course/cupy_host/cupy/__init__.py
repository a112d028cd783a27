"""A host stand-in for the part of cupy that the custom-operator lab uses, to run its CUDA cells on a CPU.

With the folder above this package first on ``PYTHONPATH``, ``import cupy`` finds this module.
``RawModule`` compiles the CUDA C source with g++ behind a small header that defines the CUDA
built-ins, and a launch runs every block and every thread of the grid one after another in one loop
(set ``blockIdx`` and ``threadIdx``, call the kernel). "Device" arrays are numpy arrays in host
memory, laid out as cupy lays them out.

What it checks, as a GPU would or more strictly:

* the kernels' index arithmetic and bounds checks: their results come back through ``asnumpy``
  for the caller to compare;
* launch configurations: grid and block are tuples of 1 to 3 positive ints within CUDA's limits,
  at most 1024 threads a block;
* kernel arguments, packed as cuLaunchKernel reads them: each argument's bytes by address, the
  data pointer for an array, the value's own bytes for a numpy scalar. Where real cupy would pass
  bytes the kernel misreads (a Python int as 8 bytes, a Python float as a double, an np.int64 for
  an ``int``, a float64 array for a ``float*``, too few or too many arguments) the launch raises a
  TypeError naming the argument. Arrays passed to a kernel must be C-contiguous, since the kernel
  sees only the pointer;
* out-of-bounds accesses near a buffer: every buffer lies between guard zones filled with a
  signalling float32 NaN and checked after each launch. A read there brings NaN into the result;
  a write there fails the launch, even of a value computed from such a read, because arithmetic
  turns the signalling NaN into a quiet one with other bits. ``empty`` fills with the same NaN, so
  an output element a kernel forgets to write shows up.

What it cannot check: timing and occupancy (times measured here are those of a serial CPU loop);
races and memory ordering (threads never overlap, so a racy kernel gets one valid answer); anything
that needs the threads of a block to run together (``__syncthreads``, ``__shared__``, warp
intrinsics, which are refused with an error rather than run wrongly); what the real NVRTC compiler
accepts and how the GPU rounds (g++ compiles the source as C++ without fused multiply-adds, so
results agree with a GPU's to rounding, not bitwise). An access far outside every buffer may crash
the process instead of failing cleanly.
"""
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import weakref

import numpy as np

float32 = np.float32
float64 = np.float64
int32 = np.int32
int64 = np.int64

_GXX = shutil.which("g++")
_GUARD_BYTES = 4096
_NAN_BYTES = np.array([0x7FA5A5A5], dtype="<u4").view(np.uint8)  # a signalling float32 NaN
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2 ** 31 - 1, 65535, 65535)
_THREADS_PER_BLOCK = 1024

# Every live device array, so that a launch can check all guard zones, not only its arguments'.
_live_arrays = weakref.WeakSet()


# ---------------------------------------------------------------- device arrays

class ndarray:
    """A 'device' array: a numpy view into host memory that has guard zones on both sides."""

    def __init__(self, shape, dtype=float64, strides=None):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._raw = np.resize(_NAN_BYTES, 2 * _GUARD_BYTES + nbytes)  # unwritten memory reads as NaN
        self._host = np.ndarray(shape, dtype, buffer=self._raw, offset=_GUARD_BYTES, strides=strides)
        self._nbytes = nbytes
        self._intact_guards = self._guards()
        _live_arrays.add(self)

    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    ndim = property(lambda self: self._host.ndim)
    size = property(lambda self: self._host.size)
    strides = property(lambda self: self._host.strides)
    nbytes = property(lambda self: self._nbytes)

    def __len__(self):
        return len(self._host)

    def __repr__(self):
        return f"host-stand-in cupy.ndarray({self._host!r})"

    def __array__(self, *args, **kwargs):
        # as in cupy: a device array never turns into a numpy array behind the caller's back
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` "
                        "to construct a NumPy array explicitly.")

    def get(self):
        return self._host.copy()

    def item(self):
        return self._host.item()

    def sum(self, axis=None, dtype=None):
        return asarray(self._host.sum(axis=axis, dtype=dtype))

    def _pointer(self):
        return self._raw.ctypes.data + _GUARD_BYTES

    def _guards(self):
        return np.concatenate([self._raw[:_GUARD_BYTES], self._raw[_GUARD_BYTES + self._nbytes:]])

    def _check_guards(self, kernel):
        if not np.array_equal(self._guards(), self._intact_guards):
            raise RuntimeError(f"{kernel} wrote outside a device array of shape {self.shape} and dtype {self.dtype} "
                               "(on a GPU: an illegal address, or silently corrupted memory)")


def empty(shape, dtype=float64):
    """An array of NaN (cupy leaves it uninitialised; NaN makes elements a kernel never writes visible)."""
    return ndarray(shape, dtype)


def zeros(shape, dtype=float64):
    out = ndarray(shape, dtype)
    out._host[...] = 0
    return out


def asarray(a, dtype=None):
    """``a`` itself when it is a device array of that dtype, else a copy on the 'device' (cupy's order 'K')."""
    if isinstance(a, ndarray):
        if dtype is None or np.dtype(dtype) == a.dtype:
            return a
        a = a._host
    host = np.asarray(a, dtype=dtype)
    out = ndarray(host.shape, host.dtype, strides=np.empty_like(host, order="K").strides)
    out._host[...] = host
    return out


def ascontiguousarray(a, dtype=None):
    a = asarray(a, dtype)
    if a._host.flags.c_contiguous:
        return a
    out = ndarray(a.shape, a.dtype)
    out._host[...] = a._host
    return out


def asnumpy(a):
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


# ---------------------------------------------------------------- the 'device'

class _Runtime:
    @staticmethod
    def getDeviceCount():
        return 1 if _GXX else 0  # without a compiler there is no device to run kernels on

    @staticmethod
    def getDeviceProperties(device):
        if device != 0:
            raise RuntimeError(f"cudaErrorInvalidDevice: the host stand-in has device 0 only, not {device}")
        return {"name": b"host stand-in (g++)", "maxThreadsPerBlock": _THREADS_PER_BLOCK,
                "maxThreadsDim": _MAX_BLOCK, "maxGridSize": _MAX_GRID}


class _Device:
    def __init__(self, device=0):
        self.id = device

    def synchronize(self):
        pass  # every launch has finished when it returns


class _Cuda:
    runtime = _Runtime()
    Device = _Device


cuda = _Cuda()


# ---------------------------------------------------------------- compiling and launching kernels

_PRELUDE = r"""
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <math.h>
#include <tuple>
#include <type_traits>
#include <utility>

struct dim3 { unsigned x = 1, y = 1, z = 1; };
typedef dim3 uint3;
// Plain globals, not thread_local: one host thread runs every CUDA thread in turn.
static uint3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static const int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
"""

_LAUNCHER = r"""
template <class T> using nk_value_t = std::remove_cv_t<std::remove_pointer_t<T>>;

template <class T> constexpr long nk_size() {
    if constexpr (std::is_void_v<T>) return 0; else return sizeof(T);
}
template <class T> constexpr char nk_kind() {
    return std::is_floating_point_v<T> ? 'f' : std::is_integral_v<T> ? 'i' : '?';
}

// The kernel's parameters as (pointer or not, size of the value or pointee, float or int).
template <class... Args>
static int nk_describe(void (*)(Args...), int* is_pointer, long* size, char* kind, int capacity) {
    int k = 0;
    ((k < capacity ? (is_pointer[k] = std::is_pointer_v<Args>, size[k] = nk_size<nk_value_t<Args>>(),
                      kind[k] = nk_kind<nk_value_t<Args>>()) : 0, ++k), ...);
    return k;
}

// params[k] points at the bytes of argument k, as for cuLaunchKernel. Blocks and their threads run
// one after another, x fastest, which is a valid CUDA schedule for kernels without block-level sync.
template <class... Args, std::size_t... I>
static void nk_run(void (*kernel)(Args...), void** params, const unsigned* g, const unsigned* b,
                   std::index_sequence<I...>) {
    const std::tuple<std::remove_cv_t<Args>...> args{*static_cast<std::remove_cv_t<Args>*>(params[I])...};
    gridDim = {g[0], g[1], g[2]};
    blockDim = {b[0], b[1], b[2]};
    for (unsigned bz = 0; bz < g[2]; ++bz)
        for (unsigned by = 0; by < g[1]; ++by)
            for (unsigned bx = 0; bx < g[0]; ++bx) {
                blockIdx = {bx, by, bz};
                for (unsigned tz = 0; tz < b[2]; ++tz)
                    for (unsigned ty = 0; ty < b[1]; ++ty)
                        for (unsigned tx = 0; tx < b[0]; ++tx) {
                            threadIdx = {tx, ty, tz};
                            kernel(std::get<I>(args)...);
                        }
            }
}

template <class... Args>
static void nk_launch(void (*kernel)(Args...), void** params, const unsigned* g, const unsigned* b) {
    nk_run(kernel, params, g, b, std::index_sequence_for<Args...>{});
}
"""

# Kernels whose threads must run together cannot be run one thread after another.
_NEEDS_CONCURRENT_THREADS = re.compile(
    r"__syncthreads\w*|__syncwarp|__shared__|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__activemask"
    r"|\bcooperative_groups\b")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?void\s+(\w+)\s*\(([^)]*)\)')
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_libraries = {}  # source hash -> loaded library, so each source compiles once per process


def _build_dir():
    path = os.environ.get("CUPY_HOST_BUILD_DIR") or os.path.join(tempfile.gettempdir(), f"cupy_host_{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


def _compile(text):
    """The loaded shared library of ``text``; built once per source, reused across processes."""
    cmd = [_GXX, "-std=c++17", "-O2", "-shared", "-fPIC"]
    key = hashlib.sha256("\0".join(cmd[1:] + [text]).encode()).hexdigest()[:20]
    if key not in _libraries:
        lib = os.path.join(_build_dir(), f"kernels_{key}.so")
        if not os.path.exists(lib):
            src = os.path.join(_build_dir(), f"kernels_{key}.cpp")
            with open(src, "w") as f:
                f.write(text)
            partial = f"{lib}.{os.getpid()}.tmp"  # renamed into place: concurrent builds never see half a file
            proc = subprocess.run(cmd + [src, "-o", partial], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"g++ could not compile the kernel source ({src}):\n{proc.stderr}")
            os.replace(partial, lib)
        _libraries[key] = ctypes.CDLL(lib)
    return _libraries[key]


class RawModule:
    """CUDA C source compiled for the host; ``get_function`` finds its ``extern "C" __global__`` kernels."""

    def __init__(self, code, *, options=()):
        if _GXX is None:
            raise RuntimeError("the host stand-in for cupy needs g++, which is not installed")
        if options:
            raise NotImplementedError(f"the host stand-in for cupy takes no compiler options, got {options!r}")
        bare = _COMMENT.sub(" ", code)
        found = _NEEDS_CONCURRENT_THREADS.search(bare)
        if found:
            raise NotImplementedError(
                f"the host stand-in for cupy runs the threads of a block one after another, so it cannot run "
                f"kernels that use {found.group(0)}; run them on a GPU")
        self._params = {name: [p.strip() for p in params.split(",") if p.strip()]
                        for name, params in _KERNEL.findall(bare)}
        exports = "".join(
            f'extern "C" int nk_describe_{k}(int* p, long* s, char* t, int n) '
            f"{{ return nk_describe({k}, p, s, t, n); }}\n"
            f'extern "C" void nk_launch_{k}(void** a, const unsigned* g, const unsigned* b) '
            f"{{ nk_launch({k}, a, g, b); }}\n" for k in self._params)
        self._lib = _compile(_PRELUDE + code + _LAUNCHER + exports)

    def get_function(self, name):
        if name not in self._params:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name!r} "
                               '(only extern "C" __global__ kernels are found by name)')
        return _Function(self._lib, name, self._params[name])


def _dims(value, what, name, limits):
    """``value`` as three positive ints, checked against CUDA's limits."""
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3 or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in value):
        raise TypeError(f"{name}: {what} must be a tuple of 1 to 3 ints, got {value!r}")
    dims = tuple(int(d) for d in value) + (1,) * (3 - len(value))
    for d, limit, axis in zip(dims, limits, "xyz"):
        if not 1 <= d <= limit:
            raise ValueError(f"{name}: {what}.{axis} = {d} is outside CUDA's limit 1..{limit}")
    return dims


class _Function:
    def __init__(self, lib, name, param_texts):
        self.name = name
        self._launch = getattr(lib, f"nk_launch_{name}")
        self._launch.restype = None
        self._launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]
        describe = getattr(lib, f"nk_describe_{name}")
        n = describe(None, None, None, 0)  # the compiler's count; the source text only labels messages
        is_pointer, size, kind = (ctypes.c_int * n)(), (ctypes.c_long * n)(), (ctypes.c_char * max(n, 1))()
        describe(is_pointer, size, kind, n)
        if len(param_texts) != n:
            param_texts = [f"parameter {k}" for k in range(n)]
        self._signature = [(bool(is_pointer[k]), size[k], kind[k].decode(), param_texts[k]) for k in range(n)]

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        grid = _dims(grid, "grid", self.name, _MAX_GRID)
        block = _dims(block, "block", self.name, _MAX_BLOCK)
        if block[0] * block[1] * block[2] > _THREADS_PER_BLOCK:
            raise ValueError(f"{self.name}: block {block} has more than {_THREADS_PER_BLOCK} threads")
        if shared_mem:
            raise NotImplementedError(f"{self.name}: shared memory needs the threads of a block to run together")
        args = tuple(args)
        if len(args) != len(self._signature):
            raise TypeError(f"{self.name} takes {len(self._signature)} arguments "
                            f"({', '.join(p[3] for p in self._signature)}), got {len(args)}")
        cells = [self._bytes_of(k, a) for k, a in enumerate(args)]  # kept alive until the launch returns
        params = (ctypes.c_void_p * max(len(cells), 1))(*[c.ctypes.data for c in cells])
        self._launch(params, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block))
        for array in list(_live_arrays):
            array._check_guards(self.name)

    def _bytes_of(self, k, arg):
        """The bytes cupy would pass for argument ``k``, refused where the kernel would misread them."""
        is_pointer, size, kind, text = self._signature[k]
        where = f"{self.name}: argument {k} ({text})"
        if is_pointer:
            if arg is None:
                return np.zeros(1, dtype=np.uintp)
            if not isinstance(arg, ndarray):
                raise TypeError(f"{where} is a pointer and needs a device array, got {type(arg).__module__}."
                            f"{type(arg).__name__} (copy it with cupy.asarray)")
            if size and (arg.dtype.itemsize != size or _kind(arg.dtype) != kind):
                raise TypeError(f"{where}: an array of dtype {arg.dtype}, which the kernel would misread")
            if not arg._host.flags.c_contiguous:
                raise TypeError(f"{where}: a non-contiguous array (strides {arg.strides}); the kernel sees only "
                                "the pointer, pass cupy.ascontiguousarray(...)")
            return np.array([arg._pointer()], dtype=np.uintp)
        if isinstance(arg, (int, float)):  # cupy passes these as int64 / float64
            value = np.int64(arg) if isinstance(arg, int) else np.float64(arg)
            if value.dtype.itemsize != size or _kind(value.dtype) != kind:
                raise TypeError(f"{where}: a Python {type(arg).__name__}, which cupy passes as {value.dtype} "
                                f"and the kernel would misread; wrap it, e.g. np.int32(...) or np.float32(...)")
        elif isinstance(arg, np.generic):
            value = arg
            if value.dtype.itemsize != size or _kind(value.dtype) != kind:
                raise TypeError(f"{where}: a scalar of dtype {value.dtype}, which the kernel would misread")
        else:
            raise TypeError(f"{where}: unsupported argument type {type(arg).__name__}")
        return np.array([value])


def _kind(dtype):
    return "f" if dtype.kind == "f" else "i" if dtype.kind in "iub" else "?"
