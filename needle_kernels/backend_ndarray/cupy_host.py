"""A host stand-in for the part of cupy that launches CUDA C kernels, to run them on a CPU.

With this module in place of ``cupy`` (``sys.modules["cupy"]``, or handed out by a chooser such as
the course's ``coursekit.cuda.cupy_or_host()``), code written against cupy runs unchanged where
there is no GPU: the CUDA backend (``ndarray_backend_cuda`` and its ``cuda/*.cu`` sources) in its
tests, a notebook's CUDA cells while they are graded. ``RawModule`` compiles the CUDA C source
with g++ behind a small header that defines the CUDA built-ins, and a launch runs every block of
the grid one after another, and the threads of a block one after another (set ``blockIdx`` and
``threadIdx``, call the kernel). "Device" arrays are numpy arrays in host memory, laid out as
cupy lays them out.

Kernels that synchronise a block (``__syncthreads()``, with ``__shared__`` tiles) or exchange
values within a warp (``__shfl_sync`` and its ``_up``/``_down``/``_xor`` forms, ``__syncwarp``)
run each thread of a block as a coroutine with its own stack: every thread runs up to its next
barrier or shuffle; a shuffle completes once every lane its mask names has reached one, and a
barrier once every thread of the block has arrived, as on a GPU.

What it checks, as a GPU would or more strictly:

* the kernels' index arithmetic and bounds checks: their results come back through ``asnumpy``
  for the caller to compare;
* launch configurations: grid and block are tuples of 1 to 3 positive ints within CUDA's limits,
  at most 1024 threads a block;
* kernel arguments, packed as cuLaunchKernel reads them: each argument's bytes by address, the
  data pointer for an array, the value's own bytes for a numpy scalar or a one-element numpy array
  (a struct passed by value, as a structured dtype of the same size). Where real cupy would pass
  bytes the kernel misreads (a Python int as 8 bytes, a Python float as a double, an np.int64 for
  an ``int``, a float64 array for a ``float*``, too few or too many arguments) the launch raises a
  TypeError naming the argument. Arrays passed to a kernel must be C-contiguous, since the kernel
  sees only the pointer;
* out-of-bounds accesses near a buffer: every buffer lies between guard zones filled with a
  signalling float32 NaN and checked after each launch. A read there brings NaN into the result;
  a write there fails the launch, even of a value computed from such a read, because arithmetic
  turns the signalling NaN into a quiet one with other bits. ``empty`` fills with the same NaN, so
  an output element a kernel forgets to write shows up;
* shared memory: ``__shared__`` arrays are filled with the same NaN at the start of every block,
  so a thread that reads an element no thread of its block has written gets NaN. Threads run in a
  fixed order between barriers (thread 0 up to its next ``__syncthreads()``, then thread 1, ...),
  so the classic races of a tiled kernel give wrong results rather than lucky ones: without the
  barrier after loading a tile, thread 0 reads elements the others have not loaded yet; without
  the barrier before loading the next one, thread 0 overwrites the tile that the others still read;
* a ``__syncthreads()`` that only some threads of a block reach (a barrier inside a branch that
  differs between the block's threads, or after an early ``return``) fails the launch: on a GPU it
  hangs or corrupts results; so does a shuffle whose mask names a lane that never joins it. A
  lane that reads from a lane outside the shuffle (beyond the block, or not in the mask) gets the
  signalling NaN's bits.

What it cannot check: timing and occupancy (times measured here are those of a serial CPU loop);
races that the fixed order above hides, and memory ordering between blocks (blocks never overlap,
so a kernel whose blocks race gets one valid answer); warp votes (``__ballot_sync``,
``__any_sync``, ``__all_sync``, ``__activemask``), cooperative groups, dynamic shared memory
(``extern __shared__``, the ``shared_mem`` launch argument) and
``__syncthreads_count``/``_and``/``_or``, which are refused with an error rather than run wrongly;
bank conflicts and coalescing; what the real NVRTC compiler accepts and how the GPU rounds (g++
compiles the source as C++ without fused multiply-adds, so results agree with a GPU's to
rounding, not bitwise). Of NVRTC's options it takes ``-D`` macros, ``-std=`` and those that ask
for the IEEE float32 arithmetic g++ does anyway (``--ftz=false``, ``--prec-div=true``,
``--prec-sqrt=true``, ``--fmad=false``); any other is refused. An access far outside every
buffer may crash the process instead of failing cleanly, and so may a kernel whose locals overflow
a thread's coroutine stack (64 KiB).
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

class MemoryPointer:
    """The address of a device array's first element (``ndarray.data``, as in cupy)."""

    def __init__(self, ptr):
        self.ptr = ptr


class ndarray:
    """A 'device' array: a numpy view into host memory that has guard zones on both sides.

    Slicing gives a view that shares the memory (and the guard zones) of the array it came from.
    """

    def __init__(self, shape, dtype=float64, strides=None):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._raw = np.resize(_NAN_BYTES, 2 * _GUARD_BYTES + nbytes)  # unwritten memory reads as NaN
        self._host = np.ndarray(shape, dtype, buffer=self._raw, offset=_GUARD_BYTES, strides=strides)
        self._base = None
        self._data_bytes = nbytes
        self._intact_guards = self._guards()
        _live_arrays.add(self)

    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    ndim = property(lambda self: self._host.ndim)
    size = property(lambda self: self._host.size)
    strides = property(lambda self: self._host.strides)
    nbytes = property(lambda self: self._host.nbytes)
    data = property(lambda self: MemoryPointer(self._pointer()))

    def __getitem__(self, index):
        """A view (slices) into the same memory; its guard zones are those of the whole array."""
        host = self._host[index]
        if not isinstance(host, np.ndarray) or not np.may_share_memory(host, self._host) and host.size:
            raise NotImplementedError("the host stand-in for cupy indexes device arrays by slices only")
        view = object.__new__(ndarray)
        view._host, view._raw = host, self._raw
        view._base = self._base if self._base is not None else self  # keeps the memory and its guards alive
        return view

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

    def set(self, arr):
        """Copy the host array ``arr`` (same shape and dtype) into this one."""
        arr = np.asarray(arr)
        if arr.dtype != self.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if arr.shape != self.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        self._host[...] = arr

    def item(self):
        return self._host.item()

    def sum(self, axis=None, dtype=None):
        return asarray(self._host.sum(axis=axis, dtype=dtype))

    def _pointer(self):
        return self._host.__array_interface__["data"][0]

    def _guards(self):
        return np.concatenate([self._raw[:_GUARD_BYTES], self._raw[_GUARD_BYTES + self._data_bytes:]])

    def _check_guards(self, kernel):
        if not np.array_equal(self._guards(), self._intact_guards):
            raise RuntimeError(f"{kernel} wrote outside a device array of shape {self.shape} and dtype {self.dtype} "
                               "(on a GPU: an illegal address, or silently corrupted memory)")


def is_stand_in(module):
    """True when ``module`` (what code uses as cupy) is this stand-in rather than cupy on a GPU."""
    return getattr(module, "__name__", "") == __name__


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


class _Stream:
    def synchronize(self):
        pass  # every launch has finished when it returns


class _Cuda:
    runtime = _Runtime()
    Device = _Device

    @staticmethod
    def get_current_stream():
        return _Stream()


cuda = _Cuda()


# ---------------------------------------------------------------- compiling and launching kernels

_PRELUDE = r"""
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <math.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <ucontext.h>

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
#define __align__(n) __attribute__((aligned(n)))

// The vector types with CUDA's alignment, so that a kernel may load a float4 from 16-byte aligned memory.
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float __int_as_float(int bits) { float f; std::memcpy(&f, &bits, sizeof f); return f; }
static inline int __float_as_int(float f) { int bits; std::memcpy(&bits, &f, sizeof bits); return bits; }
// Threads run one at a time, so an atomic operation is a plain one.
static inline float atomicAdd(float* address, float value) {
    const float old = *address;
    *address = old + value;
    return old;
}
static inline int atomicCAS(int* address, int compare, int value) {
    const int old = *address;
    if (old == compare) *address = value;
    return old;
}

// __shared__ arrays are static variables (blocks run one after another, so one copy serves every
// block), registered the first time their declaration runs and filled with a signalling NaN at
// the start of every block: CUDA leaves shared memory uninitialised.
static void* nk_shared_ptr[256];
static std::size_t nk_shared_size[256];
static int nk_shared_count = 0;
static void nk_poison(void* p, std::size_t n) {
    static const unsigned char nan_bytes[4] = {0xA5, 0xA5, 0xA5, 0x7F};  // 0x7FA5A5A5, little-endian
    unsigned char* c = static_cast<unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) c[i] = nan_bytes[i % 4];
}
static bool nk_register_shared(void* p, std::size_t n) {
    for (int k = 0; k < nk_shared_count; ++k)
        if (nk_shared_ptr[k] == p) return true;
    if (nk_shared_count < 256) {
        nk_shared_ptr[nk_shared_count] = p;
        nk_shared_size[nk_shared_count++] = n;
    }
    nk_poison(p, n);
    return true;
}
static void nk_poison_shared() {
    for (int k = 0; k < nk_shared_count; ++k) nk_poison(nk_shared_ptr[k], nk_shared_size[k]);
}

// The threads of a block are coroutines. One that reaches __syncthreads() or a warp exchange hands
// control back to the block's scheduler, which resumes it once the others it waits for have come.
enum { NK_RUNS, NK_AT_BARRIER, NK_RETURNED, NK_AT_EXCHANGE };
struct nk_fiber { ucontext_t ctx; int state; };
static ucontext_t nk_scheduler;
static nk_fiber* nk_current = nullptr;
static unsigned nk_thread = 0;  // the running thread's index in its block (x fastest)
static void nk_wait(int state) {
    nk_current->state = state;
    swapcontext(&nk_current->ctx, &nk_scheduler);
}
static void __syncthreads() {
    if (nk_current == nullptr) return;  // unreachable: sources that use it launch cooperatively
    nk_wait(NK_AT_BARRIER);
}

// A lane's part in a warp exchange (a shuffle, or __syncwarp, which exchanges nothing): the bytes it
// offers, which lane it reads and how, and the bytes it gets.
enum { NK_SHFL_IDX, NK_SHFL_UP, NK_SHFL_DOWN, NK_SHFL_XOR, NK_SYNCWARP };
struct nk_lane { unsigned long long offered, got; unsigned mask; int op, arg, width; };
static nk_lane* nk_lanes = nullptr;  // one per thread of the running block
template <class T> static T nk_exchange(unsigned mask, T value, int op, int arg, int width) {
    static_assert(sizeof(T) <= sizeof(unsigned long long), "a shuffle moves at most 8 bytes");
    nk_lane& me = nk_lanes[nk_thread];
    me.offered = 0;
    std::memcpy(&me.offered, &value, sizeof(T));
    me.mask = mask, me.op = op, me.arg = arg, me.width = width;
    nk_wait(NK_AT_EXCHANGE);
    std::memcpy(&value, &me.got, sizeof(T));
    return value;
}
template <class T> static T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
    return nk_exchange(mask, v, NK_SHFL_IDX, src_lane, width);
}
template <class T> static T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    return nk_exchange(mask, v, NK_SHFL_UP, int(delta), width);
}
template <class T> static T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    return nk_exchange(mask, v, NK_SHFL_DOWN, int(delta), width);
}
template <class T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
    return nk_exchange(mask, v, NK_SHFL_XOR, lane_mask, width);
}
static void __syncwarp(unsigned mask = 0xffffffffu) { nk_exchange(mask, 0, NK_SYNCWARP, 0, warpSize); }
"""

# Compiled before the kernel source, so that the source's macros (#define T 16) cannot reach it.
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

static char nk_error_text[512];
extern "C" const char* nk_error() { return nk_error_text; }

static std::function<void()> nk_body;  // the kernel applied to this launch's arguments
static void nk_fiber_entry() {
    nk_body();
    nk_current->state = NK_RETURNED;  // returning resumes the scheduler (uc_link)
}
static const std::size_t NK_STACK = 64 * 1024;

// Completes every warp exchange that no lane still has to join: each lane waiting at one gets the
// bytes of the lane it reads (a signalling NaN's where that lane is not in the exchange) and runs
// again. Returns how many lanes it released, or -1 (with nk_error_text) for a width CUDA refuses.
static int nk_exchange_in_warps(nk_fiber* fibers, unsigned n) {
    const unsigned long long poison = 0x7FA5A5A57FA5A5A5ull;
    int released = 0;
    for (unsigned first = 0; first < n; first += 32) {
        const unsigned lanes = n - first < 32 ? n - first : 32;
        const unsigned present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        unsigned waiting = 0, named = 0;
        for (unsigned l = 0; l < lanes; ++l)
            if (fibers[first + l].state == NK_AT_EXCHANGE) waiting |= 1u << l, named |= nk_lanes[first + l].mask;
        if (!waiting || (named & present & ~waiting)) continue;
        for (unsigned l = 0; l < lanes; ++l) {
            if (!(waiting >> l & 1)) continue;
            nk_lane& me = nk_lanes[first + l];
            const int width = me.width, lane = int(l), base = lane / (width > 0 ? width : 1) * width;
            if (width < 1 || width > 32 || (width & (width - 1))) {
                snprintf(nk_error_text, sizeof nk_error_text,
                         "a warp shuffle of block (%u,%u,%u) has width %d; it must be a power of two from 1 to 32",
                         blockIdx.x, blockIdx.y, blockIdx.z, width);
                return -1;
            }
            int source = lane;
            if (me.op == NK_SHFL_IDX) source = base + (me.arg & (width - 1));
            if (me.op == NK_SHFL_UP && lane - me.arg >= base) source = lane - me.arg;
            if (me.op == NK_SHFL_DOWN && lane + me.arg < base + width) source = lane + me.arg;
            if (me.op == NK_SHFL_XOR && (lane ^ me.arg) < base + width) source = lane ^ me.arg;
            const bool joined = source >= 0 && source < int(lanes) && (waiting & me.mask) >> source & 1;
            me.got = joined ? nk_lanes[first + source].offered : poison;
            fibers[first + l].state = NK_RUNS;
            ++released;
        }
    }
    return released;
}

// The threads of one block as coroutines, in order of their index (x fastest): each runs up to its
// next __syncthreads(), warp exchange or its end; exchanges complete as soon as their lanes have
// all come, the barrier once every thread waits at it. A barrier that some threads wait at while
// others have returned, or an exchange a lane of its mask never joins, is an error (on a GPU: a
// hang or wrong results).
static int nk_run_block(const unsigned* b, nk_fiber* fibers, char* stacks) {
    const unsigned n = b[0] * b[1] * b[2];
    for (unsigned t = 0; t < n; ++t) {
        getcontext(&fibers[t].ctx);
        fibers[t].ctx.uc_stack.ss_sp = stacks + t * NK_STACK;
        fibers[t].ctx.uc_stack.ss_size = NK_STACK;
        fibers[t].ctx.uc_link = &nk_scheduler;
        makecontext(&fibers[t].ctx, nk_fiber_entry, 0);
        fibers[t].state = NK_RUNS;
    }
    for (unsigned barrier = 1;;) {
        for (unsigned t = 0; t < n; ++t) {
            if (fibers[t].state != NK_RUNS) continue;
            threadIdx = {t % b[0], (t / b[0]) % b[1], t / (b[0] * b[1])};
            nk_thread = t;
            nk_current = &fibers[t];
            swapcontext(&nk_scheduler, &fibers[t].ctx);
            nk_current = nullptr;
        }
        const int released = nk_exchange_in_warps(fibers, n);
        if (released < 0) return 1;
        if (released > 0) continue;
        unsigned waiting = 0, returned = 0, exchanging = n;
        for (unsigned t = 0; t < n; ++t) {
            if (fibers[t].state == NK_AT_EXCHANGE && exchanging == n) exchanging = t;
            if (fibers[t].state == NK_RETURNED) ++returned; else ++waiting;
        }
        if (exchanging < n) {
            snprintf(nk_error_text, sizeof nk_error_text,
                     "a warp shuffle or __syncwarp() of block (%u,%u,%u), thread %u, waits for lanes of its mask "
                     "0x%08x that wait at a __syncthreads() or have returned (on a GPU: a hang or wrong results). "
                     "Every lane a mask names must reach the same shuffle",
                     blockIdx.x, blockIdx.y, blockIdx.z, exchanging, nk_lanes[exchanging].mask);
            return 1;
        }
        if (waiting == 0) return 0;
        if (returned) {
            snprintf(nk_error_text, sizeof nk_error_text,
                     "__syncthreads() number %u of block (%u,%u,%u) was reached by %u of its %u threads; "
                     "the other %u had returned (on a GPU: a hang or wrong results). Every thread of a "
                     "block must reach every __syncthreads(): keep barriers outside branches that differ "
                     "between threads, and guard loads and stores instead of returning early",
                     barrier, blockIdx.x, blockIdx.y, blockIdx.z, waiting, n, returned);
            return 1;
        }
        for (unsigned t = 0; t < n; ++t) fibers[t].state = NK_RUNS;
        ++barrier;
    }
}

// params[k] points at the bytes of argument k, as for cuLaunchKernel. Blocks run one after another,
// x fastest; so do the threads of a block, between barriers and exchanges when the source has any.
template <class... Args, std::size_t... I>
static int nk_run(void (*kernel)(Args...), void** params, const unsigned* g, const unsigned* b,
                  int cooperative, std::index_sequence<I...>) {
    const std::tuple<std::remove_cv_t<Args>...> args{*static_cast<std::remove_cv_t<Args>*>(params[I])...};
    gridDim = {g[0], g[1], g[2]};
    blockDim = {b[0], b[1], b[2]};
    nk_fiber* fibers = nullptr;
    char* stacks = nullptr;
    if (cooperative) {
        const unsigned n = b[0] * b[1] * b[2];
        fibers = new nk_fiber[n];
        stacks = new char[n * NK_STACK];
        nk_lanes = new nk_lane[n];
        nk_body = [&args, kernel]() { kernel(std::get<I>(args)...); };
    }
    int status = 0;
    for (unsigned bz = 0; bz < g[2] && !status; ++bz)
        for (unsigned by = 0; by < g[1] && !status; ++by)
            for (unsigned bx = 0; bx < g[0] && !status; ++bx) {
                blockIdx = {bx, by, bz};
                nk_poison_shared();
                if (cooperative) {
                    status = nk_run_block(b, fibers, stacks);
                    continue;
                }
                for (unsigned tz = 0; tz < b[2]; ++tz)
                    for (unsigned ty = 0; ty < b[1]; ++ty)
                        for (unsigned tx = 0; tx < b[0]; ++tx) {
                            threadIdx = {tx, ty, tz};
                            kernel(std::get<I>(args)...);
                        }
            }
    nk_body = nullptr;
    delete[] fibers;
    delete[] stacks;
    delete[] nk_lanes;
    nk_lanes = nullptr;
    return status;
}

template <class... Args>
static int nk_launch(void (*kernel)(Args...), void** params, const unsigned* g, const unsigned* b, int cooperative) {
    return nk_run(kernel, params, g, b, cooperative, std::index_sequence_for<Args...>{});
}
"""

# What cannot run on threads that take turns at barriers and exchanges.
_UNSUPPORTED = re.compile(
    r"__syncthreads_(?:count|and|or)\b|__shfl(?!(?:_up|_down|_xor)?_sync\b)\w*|__ballot_sync|__any_sync|__all_sync"
    r"|__activemask|\bcooperative_groups\b|\bextern\s+__shared__")
# What makes the threads of a block take turns (see nk_run_block).
_COOPERATIVE = re.compile(r"\b(?:__syncthreads|__syncwarp|__shfl(?:_up|_down|_xor)?_sync)\s*\(")
_SHARED = re.compile(r"\b__shared__\b([^;{}]*);")
_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s+)?"  # NVRTC takes it before or after the return type
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+' + _BOUNDS + r"void\s+" + _BOUNDS + r"(\w+)\s*\(([^)]*)\)")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# NVRTC's options that ask for the IEEE float32 arithmetic g++ does anyway (no flush to zero,
# correctly rounded division and square root, no fused multiply-adds on x86-64 without -march).
_IEEE_OPTIONS = {"--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=false",
                 "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=false"}
_libraries = {}  # source hash -> loaded library, so each source compiles once per process


def _blank_comments(code):
    """``code`` with every comment turned into spaces (same length, same lines)."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)


def _declarators(text):
    """The names declared by ``float a[16][17], b[16]`` (commas inside brackets or parentheses kept)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    names = []
    for part in parts:
        head = re.sub(r"\[[^\]]*\]", " ", part).split("=")[0]
        head = re.sub(r"__align__\s*\([^)]*\)", " ", head)
        ids = re.findall(r"[A-Za-z_]\w*", head)
        if ids:
            names.append(ids[-1])
    return names


def _with_shared_registered(code, blanked):
    """``code`` with each ``__shared__`` declaration made static and registered (see _PRELUDE)."""
    out, last = [], 0
    for m in _SHARED.finditer(blanked):
        decl = code[m.start(1):m.end(1)]
        registered = " ".join(f"static const bool nk_shared_{name} = nk_register_shared((void*)&{name}, "
                              f"sizeof({name}));" for name in _declarators(blanked[m.start(1):m.end(1)]))
        out += [code[last:m.start()], f"static {decl}; {registered}"]
        last = m.end()
    return "".join(out) + code[last:]


def _build_dir():
    path = os.environ.get("CUPY_HOST_BUILD_DIR") or os.path.join(tempfile.gettempdir(), f"cupy_host_{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


def _read_options(options):
    """(g++'s -std= flag, the source's #define lines) for NVRTC ``options``; refuses what g++ cannot honour."""
    standard, defines = "-std=c++17", []
    for option in options:
        if option.startswith("-D") and len(option) > 2:
            name, equals, value = option[2:].partition("=")
            defines.append(f"#define {name} {value if equals else 1}\n")
        elif re.fullmatch(r"--?std=c\+\+\d\d", option):
            standard = "-" + option.lstrip("-")
        elif option not in _IEEE_OPTIONS:
            raise NotImplementedError(f"the host stand-in for cupy cannot honour the compiler option {option!r}; "
                                      f"it takes -D macros, -std= and {sorted(_IEEE_OPTIONS)}")
    return standard, "".join(defines)


def _compile(text, standard="-std=c++17"):
    """The loaded shared library of ``text``; built once per source, reused across processes."""
    cmd = [_GXX, standard, "-O2", "-shared", "-fPIC"]
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
        standard, defines = _read_options(options)
        bare = _blank_comments(code)
        found = _UNSUPPORTED.search(bare)
        if found:
            raise NotImplementedError(
                f"the host stand-in for cupy runs the threads of a block one after another (taking turns at "
                f"__syncthreads() and warp shuffles), so it cannot run kernels that use {found.group(0)}; "
                "run them on a GPU")
        self._cooperative = bool(_COOPERATIVE.search(bare))
        self._params = {name: [p.strip() for p in params.split(",") if p.strip()]
                        for name, params in _KERNEL.findall(bare)}
        exports = "".join(
            f'extern "C" int nk_describe_{k}(int* nk_p, long* nk_s, char* nk_t, int nk_n) '
            f"{{ return nk_describe({k}, nk_p, nk_s, nk_t, nk_n); }}\n"
            f'extern "C" int nk_launch_{k}(void** nk_a, const unsigned* nk_g, const unsigned* nk_b, int nk_c) '
            f"{{ return nk_launch({k}, nk_a, nk_g, nk_b, nk_c); }}\n" for k in self._params)
        # the options' macros after the launcher, so that they reach the source only, as -D would
        source = defines + '#line 1 "cuda_source.cu"\n' + _with_shared_registered(code, bare)
        self._lib = _compile(_PRELUDE + _LAUNCHER + source + "\n" + exports, standard)

    def get_function(self, name):
        if name not in self._params:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name!r} "
                               '(only extern "C" __global__ kernels are found by name)')
        return _Function(self._lib, name, self._params[name], self._cooperative)


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
    def __init__(self, lib, name, param_texts, cooperative=False):
        self.name = name
        self._lib = lib
        self._cooperative = int(cooperative)
        self._launch = getattr(lib, f"nk_launch_{name}")
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                                 ctypes.c_int]
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
            raise NotImplementedError(f"{self.name}: the host stand-in for cupy has no dynamic shared memory "
                                      "(shared_mem); declare fixed-size __shared__ arrays in the kernel")
        args = tuple(args)
        if len(args) != len(self._signature):
            raise TypeError(f"{self.name} takes {len(self._signature)} arguments "
                            f"({', '.join(p[3] for p in self._signature)}), got {len(args)}")
        cells = [self._bytes_of(k, a) for k, a in enumerate(args)]  # kept alive until the launch returns
        params = (ctypes.c_void_p * max(len(cells), 1))(*[c.ctypes.data for c in cells])
        status = self._launch(params, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), self._cooperative)
        for array in list(_live_arrays):
            array._check_guards(self.name)
        if status:
            error = self._lib.nk_error
            error.restype = ctypes.c_char_p
            raise RuntimeError(f"{self.name}: {error().decode()}")

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
        if isinstance(arg, np.ndarray) and arg.size == 1:  # its one element's bytes, a struct's included
            if arg.dtype.itemsize != size or _kind(arg.dtype) != kind:
                raise TypeError(f"{where}: a one-element array of dtype {arg.dtype} ({arg.dtype.itemsize} bytes), "
                                "which the kernel would misread")
            return np.ascontiguousarray(arg).reshape(1)
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
