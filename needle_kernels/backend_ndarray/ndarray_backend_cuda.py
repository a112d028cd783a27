"""The CUDA backend: the flat kernel table of ``ndarray_backend_numpy`` on the GPU.

Buffers are ``cupy`` arrays; every function launches a hand-written kernel
from the ``cuda/*.cu`` sources next to this file, one per family of
kernels (``elementwise.cu``, ``strided.cu``, ``matmul.cu``, ...). Each source is compiled once
per process with NVRTC, on first use, and cupy keeps the binary in its disk
cache between processes.

The module imports on any machine. Without cupy or without a GPU,
``is_available()`` is False, ``unavailable_reason()`` says why, and every
kernel raises ``RuntimeError`` with that reason.

Arguments are checked here, before any launch, with the helpers of the
reference backend, so mistakes raise the same ``ValueError`` messages on
every device. Launches are asynchronous: ``to_numpy`` and ``synchronize()``
wait for them.

``last_launch()`` returns the grid and block of the most recent launch, for
the debug printer.
"""
import os
import re
import threading

import numpy as np

from .backend_checks import (
    check_optim_lists,
    check_matmul as _check_matmul,
    check_optim as _check_optim,
    check_batchnorm,
    check_bias_add,
    check_col2im,
    check_embedding,
    check_conv_implicit,
    check_winograd_input,
    check_winograd_output,
    check_winograd_conv,
    check_winograd_weight_grad,
    check_layernorm,
    check_lstm,
    check_softmax,
    check_softmax_xent,
    check_reduce as _check_reduce,
    check_reduce_axis as _check_reduce_axis,
    check_array_size,
    check_same_size,
    check_scalar,
    check_size,
    check_view,
    label_error,
    prod,
    read_view,
)
from . import kernels as _kernel_registry
from .memory_counter import MemoryCounter

__device_name__ = "cuda"
__tile_size__ = 8

MAX_DIMS = 8          # rank of the StridedView struct in strided.cu
MAX_BLOCKS = 65535    # grid cap per dimension; grid-stride loops cover the rest

# The launch geometry, set here and nowhere else: the sources are compiled with
# these numbers as -D macros (see _COMPILE_OPTIONS) and the launches below use
# the same numbers, so a kernel and its launch cannot disagree.
LAUNCH_GEOMETRY = {
    "NK_THREADS": 256,         # threads per block of the 1-D kernels (and at most, of the row reductions)
    "NK_MATMUL_BLOCK": 128,    # the square tile of out one matmul block computes
    "NK_MATMUL_THREADS": 256,  # threads per matmul block: 16 x 16, each owning an 8 x 8 patch of the tile
    "NK_MIDDLE_LANES": 32,     # blockDim.x of the middle-axis reductions: one warp along the inner axis
    "NK_MIDDLE_ROWS": 8,       # blockDim.y of the middle-axis reductions, a power of two
    "NK_CONV_TILE": 64,        # the square tile of out one implicit-convolution block computes (16 x 16 threads)
    "NK_CONV_DEPTH": 16,       # pixels or taps the implicit convolutions stage per step
}
THREADS = LAUNCH_GEOMETRY["NK_THREADS"]
_MATMUL_BLOCK = LAUNCH_GEOMETRY["NK_MATMUL_BLOCK"]
_MATMUL_THREADS = LAUNCH_GEOMETRY["NK_MATMUL_THREADS"]
_CONV_TILE = LAUNCH_GEOMETRY["NK_CONV_TILE"]
_CONV_DEPTH = LAUNCH_GEOMETRY["NK_CONV_DEPTH"]
_MIDDLE_BLOCK = (LAUNCH_GEOMETRY["NK_MIDDLE_LANES"], LAUNCH_GEOMETRY["NK_MIDDLE_ROWS"], 1)

_SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")


def compile_defines():
    """The -D flags every source is compiled with: the tile size of matmul_tiled and the launch geometry."""
    return (f"-DNK_TILE_SIZE={__tile_size__}",) + tuple(f"-D{k}={v}" for k, v in LAUNCH_GEOMETRY.items())


# Division and square root correctly rounded, as numpy computes them. Subnormals are not asked
# for: cupy appends -ftz=true after the options it is given (see flushes_subnormals).
_COMPILE_OPTIONS = ("-std=c++17", *compile_defines(), "--prec-div=true", "--prec-sqrt=true")

# Host image of ``struct StridedView`` in strided.cu: eighteen int64, so the
# numpy layout and the C layout agree without padding rules.
_VIEW_DTYPE = np.dtype(
    [("shape", np.int64, (MAX_DIMS,)), ("strides", np.int64, (MAX_DIMS,)),
     ("offset", np.int64), ("ndim", np.int64)]
)
assert _VIEW_DTYPE.itemsize == 18 * 8


# ---------------------------------------------------------------- availability

_availability = None  # (bool, reason), computed once


def _probe():
    global _availability
    if _availability is None:
        try:
            import cupy
        except Exception as exc:  # ImportError, or a broken install raising anything
            if isinstance(exc, ImportError):
                reason = "cupy is not installed (pip install needle_kernels[cuda12] or needle_kernels[cuda13])"
            else:
                reason = f"cupy failed to import: {type(exc).__name__}: {exc}"
            _availability = (False, reason)
        else:
            try:
                count = cupy.cuda.runtime.getDeviceCount()
            except Exception as exc:
                _availability = (False, f"no CUDA device: {type(exc).__name__}: {exc}")
            else:
                if count > 0:
                    _availability = (True, "")
                else:
                    _availability = (False, "no CUDA device: cupy sees 0 GPUs")
    return _availability


def is_available():
    """True when cupy imports and sees at least one CUDA device."""
    return _probe()[0]


def unavailable_reason():
    """Why the CUDA backend cannot run here, as a sentence ('' when it can)."""
    return _probe()[1]


def flushes_subnormals():
    """True where the kernels run on a GPU: there a float32 subnormal that a kernel reads or
    writes is a zero of its sign, because cupy compiles every kernel with -ftz=true, appended
    after the caller's options (cupy/cupy#9576), as its own element-wise kernels are. So on a GPU
    1e-40 == 0 and log(1e-40) = -inf; the host stand-in for cupy keeps subnormals, as numpy does."""
    from .cupy_host import is_stand_in

    return not is_stand_in(_require("flushes_subnormals"))


def _require(name):
    if not is_available():
        raise RuntimeError(f"{name}: the CUDA backend is unavailable: {unavailable_reason()}")
    import cupy
    return cupy


# ---------------------------------------------------------------- buffers

# Bytes held by live Arrays (memory_counter.py): memory_stats() and reset_peak_memory().
_memory = MemoryCounter()
_account = _memory.account
memory_stats = _memory.memory_stats
reset_peak_memory = _memory.reset_peak_memory


class Array:
    """A flat float32 buffer in GPU memory (a ``cupy`` array)."""

    __slots__ = ("array",)

    def __del__(self):
        array = getattr(self, "array", None)
        if array is not None:
            _account(-4 * array.size)

    def __init__(self, size):
        size = check_array_size(size)
        cupy = _require("Array")
        if size:
            self.array = cupy.empty(size, dtype=np.float32)
        else:
            # cupy gives every empty array the address 0; a one-element buffer
            # keeps addresses distinct, so empty views of different buffers are
            # never taken for views of the same one
            self.array = cupy.empty(1, dtype=np.float32)[:0]
        _account(4 * self.array.size)

    @property
    def size(self):
        return self.array.size

    def ptr(self):
        """The device address of the first element."""
        return self.array.data.ptr


def _check_arrays(name, **arrays):
    for what, arr in arrays.items():
        if not isinstance(arr, Array):
            raise ValueError(
                f"{name}: {what} must be a CUDA backend Array, got {type(arr).__module__}.{type(arr).__name__}"
            )


# ---------------------------------------------------------------- kernels and launches

_compile_lock = threading.Lock()
_modules = {}    # source file -> cupy.RawModule
_functions = {}  # kernel name -> cupy.RawKernel
_last_launch = "no kernel launched yet"


def _source(filename):
    """The text of cuda/<filename> with its local ``#include "x.cuh"`` lines inlined.

    Inlining (rather than passing -I to NVRTC) makes the header part of the
    source text, so cupy's kernel cache sees an edited header as new code.
    """
    with open(os.path.join(_SOURCE_DIR, filename), encoding="utf-8") as f:
        text = f.read()

    def inline(match):
        return _source(match.group(1))

    return re.sub(r'^\s*#include\s+"([^"]+\.cuh)"\s*$', inline, text, flags=re.MULTILINE)


def source_files():
    """Paths of every kernel source (``.cu``) of this backend."""
    return sorted(os.path.join(_SOURCE_DIR, f) for f in os.listdir(_SOURCE_DIR) if f.endswith(".cu"))


# Kernels launched under names the contract does not have (the reductions' row and middle-axis
# forms, and the steps of kernels that take more than one launch), by the source file that
# defines them.
_STEPS = {
    "reduce.cu": ("reduce_sum_rows", "reduce_max_rows", "reduce_sum_middle", "reduce_max_middle"),
    "optim.cu": ("sgd_momentum_update",),
    "conv.cu": ("winograd_grad_tiles", "winograd_weight_output", "conv_implicit_weight_sum"),
    "batchnorm.cu": ("batchnorm_grad_sums", "batchnorm_grad_input", "layernorm_grad_sums", "layernorm_grad_input",
                     "rmsnorm_grad_sums", "rmsnorm_grad_input"),
}
# Every kernel this module launches, by the source file that defines it: the contract's kernels
# that have a __global__ of their own name (the registry's ``cuda`` field), then the steps.
KERNELS = {source: names + _STEPS.get(source, ()) for source, names in _kernel_registry.cuda_sources().items()}
KERNELS.update({source: steps for source, steps in _STEPS.items() if source not in KERNELS})
_SOURCE_OF = {kernel: source for source, kernels in KERNELS.items() for kernel in kernels}


def _kernel(name):
    """The compiled kernel ``name``, compiling its source file on first use."""
    cupy = _require(name)
    function = _functions.get(name)
    if function is None:
        filename = _SOURCE_OF[name]
        with _compile_lock:
            module = _modules.get(filename)
            if module is None:
                module = cupy.RawModule(code=_source(filename), options=_COMPILE_OPTIONS)
                _modules[filename] = module
            function = _functions[name] = module.get_function(name)
    return function


def grid_1d(n, threads=THREADS):
    """(grid, block) covering n items with `threads` per block, the grid capped at MAX_BLOCKS.

    Kernels loop with a grid stride, so a capped grid still covers every item.
    """
    blocks = max(1, min(-(-n // threads), MAX_BLOCKS))
    return (blocks, 1, 1), (threads, 1, 1)


def grid_map(n):
    """grid_1d for elementwise.cu's maps, whose threads take four floats at a time."""
    return grid_1d(-(-n // 4))


def _launch(kernel, grid, block, args):
    global _last_launch
    _last_launch = "grid=({},{},{}) block=({},{},{})".format(*grid, *block)
    kernel(grid, block, args)


def last_launch():
    """'grid=(gx,gy,gz) block=(bx,by,bz)' of the most recent kernel launch."""
    return _last_launch


def synchronize():
    """Wait for every launched kernel to finish (launches are asynchronous); raise the
    ValueError for a bad label that one of them met (see _label_errors)."""
    _require("synchronize").cuda.get_current_stream().synchronize()
    _raise_label_error()


# ---------------------------------------------------------------- labels, checked on the GPU
#
# softmax_xent's labels and an embedding's ids index rows inside the kernels. Checking them here
# before each launch would copy them back and wait for the GPU at every call (four times in a
# language model's training step); instead the kernels check each one as they read it (label_ok
# in common.cuh): a bad one is never used as an index, and the first one met is written to a
# small device block, read back at the next synchronization (to_numpy, synchronize), which raises
# the ValueError the other backends raise at the call itself.

_LABEL_KERNELS = ("softmax_xent", "softmax_xent_grad", "embedding_gather", "embedding_scatter")
_label_block = None      # (the cupy module that made it, its int32 (seen, kernel, n, label bits))
_labels_launched = False  # a kernel that checks labels ran since the block was last read
_label_lock = threading.Lock()


def _label_errors(cupy, name):
    """The (errors, kernel) arguments of a launch of the label-checking kernel ``name``."""
    global _label_block, _labels_launched
    with _label_lock:
        if _label_block is None or _label_block[0] is not cupy:
            _label_block = (cupy, cupy.zeros(4, dtype=np.int32))
        _labels_launched = True
        return _label_block[1], np.int32(_LABEL_KERNELS.index(name))


def _raise_label_error():
    """Raise the ValueError for the first bad label a kernel met since the last look (after a
    synchronization: the block is read without waiting for anything still running)."""
    global _labels_launched
    with _label_lock:
        if not _labels_launched:
            return
        _labels_launched = False
        block = _label_block[1]
        seen, kernel, rows, bits = (int(v) for v in block.get())
        if not seen:
            return
        block.set(np.zeros(4, np.int32))
    raise label_error(_LABEL_KERNELS[kernel], np.int32(bits).view(np.float32).item(), rows)


def _i64(x):
    return np.int64(x)


def _f32(x):
    return np.float32(x)


# ---------------------------------------------------------------- transfers

def to_numpy(a, shape, strides, offset):
    """A new numpy float32 array with the elements of the strided view."""
    _require("to_numpy")
    _check_arrays("to_numpy", a=a)
    shape, strides, offset = read_view("to_numpy", shape, strides, offset)
    check_view(a.size, shape, strides, offset)
    out = Array(prod(shape))
    _strided("compact", "to_numpy", a, out, shape, strides, offset)
    result = out.array.get().reshape(shape)
    _raise_label_error()
    return result


def from_numpy(arr, out):
    """Copy a numpy array (any float dtype, any layout) into out in row-major order."""
    _require("from_numpy")
    _check_arrays("from_numpy", out=out)
    check_size("from_numpy", out, np.size(arr), "out")
    if out.size:
        out.array.set(np.ascontiguousarray(arr, dtype=np.float32).ravel())


def fill(out, val):
    """out[i] = val for every element."""
    _require("fill")
    _check_arrays("fill", out=out)
    val = check_scalar("fill", val)
    if out.size:
        _launch(_kernel("fill"), *grid_map(out.size), (out.array, _f32(val), _i64(out.size)))


# ---------------------------------------------------------------- strided copies

def simplify_view(shape, strides):
    """The same positions with fewer dimensions: size-1 dimensions dropped, contiguous neighbours merged.

    Dimensions (n0, s0), (n1, s1) with s0 == n1 * s1 visit the same positions
    as one dimension (n0 * n1, s1), in the same row-major order. Returns
    (shape, strides) as lists; an empty list means a single element.
    """
    merged = []
    for n, s in zip(shape, strides):
        n, s = int(n), int(s)
        if n == 1:
            continue
        if merged and merged[-1][1] == s * n:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    return [n for n, _ in merged], [s for _, s in merged]


def _view_struct(name, shape, strides, offset):
    """The StridedView argument of strided.cu for a view, passed by value."""
    sshape, sstrides = simplify_view(shape, strides)
    if len(sshape) > MAX_DIMS:
        raise ValueError(
            f"{name}: view of rank {len(tuple(shape))} still has rank {len(sshape)} after merging "
            f"contiguous dimensions; the CUDA backend supports at most {MAX_DIMS}"
        )
    view = np.zeros(1, dtype=_VIEW_DTYPE)  # cupy passes a one-element numpy array by value
    view["shape"][0, : len(sshape)] = sshape
    view["strides"][0, : len(sstrides)] = sstrides
    view["offset"] = offset
    view["ndim"] = len(sshape)
    return view


def _strided(kernel_name, name, first, out, shape, strides, offset):
    """Launch a strided.cu kernel; `first` is the source Array (compact, ewise_setitem) or the scalar."""
    n = prod(shape)
    if n == 0:
        return
    view = _view_struct(name, shape, strides, offset)
    first = _f32(first) if kernel_name == "scalar_setitem" else first.array
    _launch(_kernel(kernel_name), *grid_1d(n), (first, out.array, view, _i64(n)))


def compact(a, out, shape, strides, offset):
    """out[i] = a[offset + sum_k idx_k(i) * strides[k]], i running row-major over shape."""
    _require("compact")
    _check_arrays("compact", a=a, out=out)
    shape, strides, offset = read_view("compact", shape, strides, offset)
    check_size("compact", out, prod(shape), "out")
    check_view(a.size, shape, strides, offset)
    _strided("compact", "compact", a, out, shape, strides, offset)


def ewise_setitem(a, out, shape, strides, offset):
    """Write the compact a into the strided view (shape, strides, offset) of out."""
    _require("ewise_setitem")
    _check_arrays("ewise_setitem", a=a, out=out)
    shape, strides, offset = read_view("ewise_setitem", shape, strides, offset)
    check_size("ewise_setitem", a, prod(shape), "a")
    check_view(out.size, shape, strides, offset, what="out")
    _strided("ewise_setitem", "ewise_setitem", a, out, shape, strides, offset)


def scalar_setitem(size, val, out, shape, strides, offset):
    """Set every element of the strided view of out to val; size == prod(shape)."""
    _require("scalar_setitem")
    _check_arrays("scalar_setitem", out=out)
    shape, strides, offset = read_view("scalar_setitem", shape, strides, offset)
    if size != prod(shape):
        raise ValueError(f"scalar_setitem: size {size} != prod(shape {tuple(shape)})")
    val = check_scalar("scalar_setitem", val)
    check_view(out.size, shape, strides, offset, what="out")
    _strided("scalar_setitem", "scalar_setitem", val, out, shape, strides, offset)


# ---------------------------------------------------------------- element-wise

def _ewise(name):
    def kernel(a, b, out):
        _require(name)
        _check_arrays(name, a=a, b=b, out=out)
        check_same_size(name, a=a, b=b, out=out)
        if out.size:
            _launch(_kernel(name), *grid_map(out.size),
                    (a.array, b.array, out.array, _i64(out.size)))
    kernel.__name__ = name
    kernel.__doc__ = f"out = {name[6:]}(a, b) element-wise on compact arrays of equal size."
    return kernel


def _scalar(name):
    def kernel(a, val, out):
        _require(name)
        _check_arrays(name, a=a, out=out)
        check_same_size(name, a=a, out=out)
        val = check_scalar(name, val)
        if out.size:
            _launch(_kernel(name), *grid_map(out.size),
                    (a.array, _f32(val), out.array, _i64(out.size)))
    kernel.__name__ = name
    kernel.__doc__ = f"out = {name[7:]}(a, val) element-wise with a float scalar."
    return kernel


def _unary(name):
    def kernel(a, out):
        _require(name)
        _check_arrays(name, a=a, out=out)
        check_same_size(name, a=a, out=out)
        if out.size:
            _launch(_kernel(name), *grid_map(out.size), (a.array, out.array, _i64(out.size)))
    kernel.__name__ = name
    kernel.__doc__ = f"out = {name[6:]}(a) element-wise."
    return kernel


ewise_add = _ewise("ewise_add")
ewise_mul = _ewise("ewise_mul")
ewise_div = _ewise("ewise_div")
ewise_maximum = _ewise("ewise_maximum")
ewise_eq = _ewise("ewise_eq")
ewise_ge = _ewise("ewise_ge")
ewise_relu_backward = _ewise("ewise_relu_backward")
ewise_tanh_backward = _ewise("ewise_tanh_backward")
ewise_sigmoid_backward = _ewise("ewise_sigmoid_backward")

scalar_add = _scalar("scalar_add")
scalar_mul = _scalar("scalar_mul")
scalar_div = _scalar("scalar_div")
scalar_power = _scalar("scalar_power")
scalar_maximum = _scalar("scalar_maximum")
scalar_eq = _scalar("scalar_eq")
scalar_ge = _scalar("scalar_ge")

ewise_log = _unary("ewise_log")
ewise_exp = _unary("ewise_exp")
ewise_tanh = _unary("ewise_tanh")


# ---------------------------------------------------------------- matmul

def _matmul_launch(kernel_name, a, b, out, batch, m, n, p):
    if out.size == 0:
        return
    tiles = lambda d: -(-d // _MATMUL_BLOCK)  # noqa: E731
    grid = (min(tiles(p), MAX_BLOCKS), min(tiles(m), MAX_BLOCKS), min(batch, MAX_BLOCKS))
    _launch(_kernel(kernel_name), grid, (_MATMUL_THREADS, 1, 1),
            (a.array, b.array, out.array, _i64(batch), _i64(m), _i64(n), _i64(p)))


def _matmul_sizes(name, *sizes):
    names = ("batch", "m", "n", "p")[-len(sizes):]
    out = []
    for what, v in zip(names, sizes):
        try:
            iv = int(v)
        except (TypeError, ValueError):
            iv = None
        if iv is None or iv != v or iv < 0:
            raise ValueError(f"{name}: {what} must be a non-negative integer, got {v!r}")
        out.append(iv)
    return out


def matmul(a, b, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p), all compact row-major."""
    _require("matmul")
    _check_arrays("matmul", a=a, b=b, out=out)
    m, n, p = _matmul_sizes("matmul", m, n, p)
    _check_matmul("matmul", a, b, out, m, n, p)
    _matmul_launch("matmul", a, b, out, 1, m, n, p)


def matmul_batched(a, b, out, batch, m, n, p):
    """out[k] (m, p) = a[k] (m, n) @ b[k] (n, p) for k < batch; blockIdx.z walks k."""
    _require("matmul_batched")
    _check_arrays("matmul_batched", a=a, b=b, out=out)
    batch, m, n, p = _matmul_sizes("matmul_batched", batch, m, n, p)
    _check_matmul("matmul_batched", a, b, out, m, n, p, batch)
    _matmul_launch("matmul", a, b, out, batch, m, n, p)


def matmul_tiled(a, b, out, m, n, p):
    """matmul on the tiled layout: a is (m/T, n/T, T, T), b (n/T, p/T, T, T), out (m/T, p/T, T, T).

    T is ``__tile_size__``; m, n, p must be multiples of T. The kernel is the
    row-major one with a different element address (see matmul.cu).
    """
    _require("matmul_tiled")
    _check_arrays("matmul_tiled", a=a, b=b, out=out)
    m, n, p = _matmul_sizes("matmul_tiled", m, n, p)
    t = __tile_size__
    if m % t or n % t or p % t:
        raise ValueError(f"matmul_tiled: m={m}, n={n}, p={p} must be multiples of the tile size {t}")
    _check_matmul("matmul_tiled", a, b, out, m, n, p)
    _matmul_launch("matmul_tiled", a, b, out, 1, m, n, p)


def _transposed(x, rows, cols):
    """A compact copy of the transpose (cols, rows) of the row-major (rows, cols) x, by strided.cu's
    compact: one pass over x, after which the product reads row-major operands as fast as ever."""
    out = Array(rows * cols)
    _strided("compact", "compact", x, out, (cols, rows), (1, cols), 0)
    return out


def matmul_t(a, b, out, m, n, p, trans_a, trans_b):
    """out (m, p) = A @ B, where a holds A (m, n) row-major or, when trans_a, the row-major (n, m)
    array whose transpose A is; likewise b holds B (n, p) or, when trans_b, a (p, n) array.
    A transposed operand is made row-major first (``_transposed``), then matmul runs."""
    _require("matmul_t")
    _check_arrays("matmul_t", a=a, b=b, out=out)
    m, n, p = _matmul_sizes("matmul_t", m, n, p)
    _check_matmul("matmul_t", a, b, out, m, n, p)
    if out.size == 0:
        return
    a = _transposed(a, n, m) if trans_a else a
    b = _transposed(b, p, n) if trans_b else b
    _matmul_launch("matmul", a, b, out, 1, m, n, p)


def matmul_bias(a, b, bias, out, m, n, p):
    """out (m, p) = a (m, n) @ b (n, p) + bias (p elements) on every row: matmul, then bias_add
    in place on out."""
    _require("matmul_bias")
    _check_arrays("matmul_bias", a=a, b=b, bias=bias, out=out)
    m, n, p = _matmul_sizes("matmul_bias", m, n, p)
    _check_matmul("matmul_bias", a, b, out, m, n, p)
    check_size("matmul_bias", bias, p, f"bias (p={p})")
    if out.size:
        _matmul_launch("matmul", a, b, out, 1, m, n, p)
        bias_add(out, bias, out, m, p)


# ---------------------------------------------------------------- reductions

# Rows of at least this many elements are cut into parts of about this length, each reduced
# by a block of its own, when the rows alone would give fewer than ROW_BLOCKS blocks.
ROW_PART = 16384
ROW_BLOCKS = 1024


def _row_parts(n_out, reduce_size):
    if n_out >= ROW_BLOCKS or reduce_size < 2 * ROW_PART:
        return 1
    return int(min(-(-reduce_size // ROW_PART), -(-ROW_BLOCKS // n_out)))


def _rows_launch(op, a, out, n_out, reduce_size):
    if n_out == 0:
        return
    parts = _row_parts(n_out, reduce_size)
    if parts > 1:  # each part to a partial result, then the (n_out, parts) partials as rows
        partial = Array(n_out * parts)
        _rows_kernel(op, a, partial, n_out, reduce_size, parts)
        _rows_kernel(op, partial, out, n_out, parts, 1)
    else:
        _rows_kernel(op, a, out, n_out, reduce_size, 1)


def _rows_kernel(op, a, out, n_out, reduce_size, parts):
    # One block per output (row or part of a row): a thread per four of its elements (the
    # kernel loads float4s), rounded up to whole warps, at most THREADS.
    quads = -(-int(reduce_size) // parts) // 4 + 1
    threads = min(THREADS, max(32, 1 << (quads - 1).bit_length()))
    grid = (min(n_out * parts, MAX_BLOCKS), 1, 1)
    _launch(_kernel(f"reduce_{op}_rows"), grid, (threads, 1, 1),
            (a.array, out.array, _i64(n_out), _i64(reduce_size), _i64(parts)))


def _middle_launch(op, a, out, outer, reduce_size, inner):
    if outer * inner == 0:
        return
    lanes = _MIDDLE_BLOCK[0]
    tiles = outer * -(-inner // lanes)
    grid = (min(tiles, MAX_BLOCKS), 1, 1)
    _launch(_kernel(f"reduce_{op}_middle"), grid, _MIDDLE_BLOCK,
            (a.array, out.array, _i64(outer), _i64(reduce_size), _i64(inner)))


def reduce_max(a, out, reduce_size):
    """out[i] = max of the contiguous block a[i*reduce_size:(i+1)*reduce_size]."""
    _require("reduce_max")
    _check_arrays("reduce_max", a=a, out=out)
    _check_reduce("reduce_max", a, out, reduce_size)
    _rows_launch("max", a, out, out.size, reduce_size)


def reduce_sum(a, out, reduce_size):
    """out[i] = sum of the contiguous block a[i*reduce_size:(i+1)*reduce_size]."""
    _require("reduce_sum")
    _check_arrays("reduce_sum", a=a, out=out)
    _check_reduce("reduce_sum", a, out, reduce_size)
    _rows_launch("sum", a, out, out.size, reduce_size)


def _reduce_axis(op, name, a, out, outer, reduce_size, inner):
    _require(name)
    _check_arrays(name, a=a, out=out)
    _check_reduce_axis(name, a, out, outer, reduce_size, inner)
    if inner == 1:
        _rows_launch(op, a, out, outer, reduce_size)
    else:
        _middle_launch(op, a, out, outer, reduce_size, inner)


def reduce_sum_axis(a, out, outer, reduce_size, inner):
    """Compact a seen as (outer, reduce_size, inner); out (outer, inner) is the sum over the middle axis."""
    _reduce_axis("sum", "reduce_sum_axis", a, out, outer, reduce_size, inner)


def reduce_max_axis(a, out, outer, reduce_size, inner):
    """Like reduce_sum_axis with max."""
    _reduce_axis("max", "reduce_max_axis", a, out, outer, reduce_size, inner)


# ---------------------------------------------------------------- optimizer steps

def adam_update(param, grad, m, v, out, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """One Adam step, element-wise; m and v are updated in place (see the reference)."""
    _require("adam_update")
    _check_arrays("adam_update", param=param, grad=grad, m=m, v=v, out=out)
    lr, beta1, beta2, eps, weight_decay, c1, c2 = _check_optim(
        "adam_update", dict(param=param, grad=grad, m=m, v=v, out=out), (lr, beta1, beta2, eps, weight_decay, c1, c2))
    if out.size:
        _launch(_kernel("adam_update"), *grid_1d(out.size),
                (param.array, grad.array, m.array, v.array, out.array, _f32(beta1), _f32(1.0 - beta1),
                 _f32(beta2), _f32(1.0 - beta2), _f32(weight_decay), _f32(lr / c1), _f32(1.0 / c2), _f32(eps),
                 _i64(out.size)))


def adam_update_many(params, grads, ms, vs, outs, lr, beta1, beta2, eps, weight_decay, c1, c2):
    """adam_update on each (params[i], grads[i], ms[i], vs[i], outs[i]) of the lists (see the
    reference): one launch per array here."""
    count, _ = check_optim_lists("adam_update_many", (lr, beta1, beta2, eps, weight_decay, c1, c2),
                                 params=params, grads=grads, ms=ms, vs=vs, outs=outs)
    for i in range(count):
        adam_update(params[i], grads[i], ms[i], vs[i], outs[i], lr, beta1, beta2, eps, weight_decay, c1, c2)


def sgd_update(param, grad, u, out, lr, momentum, weight_decay):
    """One SGD step with moving-average momentum; u (or None) is updated in place (see the reference)."""
    _require("sgd_update")
    arrays = dict(param=param, grad=grad, out=out)  # the reference's order, so messages match
    if u is not None:
        arrays["u"] = u
    _check_arrays("sgd_update", **arrays)
    lr, momentum, weight_decay = _check_optim("sgd_update", arrays, (lr, momentum, weight_decay))
    if not out.size:
        return
    if u is None:
        _launch(_kernel("sgd_update"), *grid_1d(out.size),
                (param.array, grad.array, out.array, _f32(lr), _f32(weight_decay), _i64(out.size)))
    else:
        _launch(_kernel("sgd_momentum_update"), *grid_1d(out.size),
                (param.array, grad.array, u.array, out.array, _f32(lr), _f32(momentum), _f32(1.0 - momentum),
                 _f32(weight_decay), _i64(out.size)))


# ---------------------------------------------------------------- convolution

def col2im(cols, out, n, h, w, c, k, s):
    """The adjoint of the im2col window view of an NHWC image (see the reference); one thread per output element."""
    _require("col2im")
    _check_arrays("col2im", cols=cols, out=out)
    n, h, w, c, k, s = (int(x) for x in (n, h, w, c, k, s))
    ho, wo = check_col2im("col2im", cols, out, n, h, w, c, k, s)
    if out.size:
        _launch(_kernel("col2im"), *grid_1d(out.size),
                (cols.array, out.array, _i64(n), _i64(h), _i64(w), _i64(c), _i64(k), _i64(s), _i64(ho), _i64(wo)))


def winograd_input(a, out, n, h, w, c):
    """The transformed 4x4 tiles of a 3x3 convolution's input (see the reference); one thread per (tile, channel)."""
    _require("winograd_input")
    _check_arrays("winograd_input", a=a, out=out)
    n, h, w, c = (int(x) for x in (n, h, w, c))
    th, tw = check_winograd_input("winograd_input", a, out, n, h, w, c)
    if out.size:
        _launch(_kernel("winograd_input"), *grid_1d(out.size // 16),
                (a.array, out.array, _i64(n), _i64(h), _i64(w), _i64(c), _i64(th), _i64(tw)))


def winograd_output(m, out, n, ho, wo, c):
    """The 2x2 output blocks of a 3x3 convolution from its 16 tile products (see the reference)."""
    _require("winograd_output")
    _check_arrays("winograd_output", m=m, out=out)
    n, ho, wo, c = (int(x) for x in (n, ho, wo, c))
    th, tw = check_winograd_output("winograd_output", m, out, n, ho, wo, c)
    if out.size:
        _launch(_kernel("winograd_output"), *grid_1d(m.size // 16),
                (m.array, out.array, _i64(n), _i64(ho), _i64(wo), _i64(c), _i64(th), _i64(tw)))


def winograd_conv3x3(a, u, out, n, h, w, c_in, c_out):
    """The stride-1 3x3 convolution of an image by its transformed kernel (see the reference): the
    input transform, the 16 products as one batched matmul, the output transform."""
    _require("winograd_conv3x3")
    _check_arrays("winograd_conv3x3", a=a, u=u, out=out)
    n, h, w, c_in, c_out = (int(x) for x in (n, h, w, c_in, c_out))
    th, tw = check_winograd_conv("winograd_conv3x3", a, u, out, n, h, w, c_in, c_out)
    tiles = n * th * tw
    if out.size == 0:
        return
    transformed, products = Array(16 * tiles * c_in), Array(16 * tiles * c_out)
    winograd_input(a, transformed, n, h, w, c_in)
    matmul_batched(transformed, u, products, 16, tiles, c_in, c_out)
    winograd_output(products, out, n, h - 2, w - 2, c_out)


def winograd_weight_grad(a, g, out, n, h, w, c_in, c_out):
    """The weight gradient of a stride-1 3x3 convolution (see the reference): the input and
    gradient tiles transformed, the 16 products V[t]^T @ E[t] as one batched matmul (V's
    transpose compacted first), and their transform to the 3x3 kernel."""
    _require("winograd_weight_grad")
    _check_arrays("winograd_weight_grad", a=a, g=g, out=out)
    n, h, w, c_in, c_out = (int(x) for x in (n, h, w, c_in, c_out))
    th, tw = check_winograd_weight_grad("winograd_weight_grad", a, g, out, n, h, w, c_in, c_out)
    tiles, pairs = n * th * tw, c_in * c_out
    if pairs == 0:
        return
    if tiles == 0:
        fill(out, 0.0)
        return
    transformed, transposed = Array(16 * tiles * c_in), Array(16 * tiles * c_in)
    grad_tiles, sums = Array(16 * tiles * c_out), Array(16 * pairs)
    winograd_input(a, transformed, n, h, w, c_in)
    compact(transformed, transposed, (16, c_in, tiles), (tiles * c_in, 1, c_in), 0)
    _launch(_kernel("winograd_grad_tiles"), *grid_1d(tiles * c_out),
            (g.array, grad_tiles.array, _i64(n), _i64(h - 2), _i64(w - 2), _i64(c_out), _i64(th), _i64(tw)))
    matmul_batched(transposed, grad_tiles, sums, 16, c_in, tiles, c_out)
    _launch(_kernel("winograd_weight_output"), *grid_1d(pairs), (sums.array, out.array, _i64(pairs)))


# The weight gradient of conv_implicit sums over every pixel of the batch while its output
# (k*k*c, c_out) may be a single tile, so the pixels are cut into runs summed by blocks of their
# own: enough runs for about this many blocks (a few per SM on a large GPU) ...
_WEIGHT_GRAD_BLOCKS = 256
# ... but no run shorter than this many pixels, whose work would not pay for its partial sums.
_WEIGHT_GRAD_RUN_PIXELS = 512


def _implicit_geometry(name, a, shape, strides, offset, k, s, pad_h, pad_w, ho, wo, c_out, per_pixel, per_tap):
    """The kernel arguments after the buffers, from n to c_out, and (pixels, taps) of the
    implicit im2col matrix, after the reference's checks."""
    view = read_view(name, shape, strides, offset)
    check_conv_implicit(name, a, view, k, s, pad_h, pad_w, ho, wo, c_out, per_pixel, per_tap)
    (n, h, w, c), strides, offset = view
    k, s, pad_h, pad_w, ho, wo, c_out = (int(x) for x in (k, s, pad_h, pad_w, ho, wo, c_out))
    args = tuple(_i64(x) for x in (n, h, w, c, *strides, offset, k, s, pad_h, pad_w, ho, wo, c_out))
    return args, n * ho * wo, k * k * c


def _tiles(d):
    return -(-d // _CONV_TILE)


def _implicit_grid(rows, cols, splits=1):
    """The grid of conv.cu's implicit products: x over tiles of out's columns, y over tiles of its
    rows, z over the runs of the summed dimension."""
    return (min(_tiles(cols), MAX_BLOCKS), min(_tiles(rows), MAX_BLOCKS), min(splits, MAX_BLOCKS))


def conv_implicit(a, shape, strides, offset, w, out, k, s, pad_h, pad_w, ho, wo, c_out):
    """out (n*ho*wo, c_out) = X @ w, X the im2col matrix of the strided NHWC image view (see the
    reference), never made: matmul's tiled product with X's tiles gathered from the image."""
    _require("conv_implicit")
    _check_arrays("conv_implicit", a=a, w=w, out=out)
    args, pixels, _ = _implicit_geometry("conv_implicit", a, shape, strides, offset, k, s, pad_h, pad_w, ho, wo,
                                         c_out, ("out", out), ("w", w))
    if out.size:
        _launch(_kernel("conv_implicit"), _implicit_grid(pixels, int(c_out)), (_MATMUL_THREADS, 1, 1),
                (a.array, w.array, out.array) + args)


def conv_implicit_weight_grad(a, shape, strides, offset, g, out, k, s, pad_h, pad_w, ho, wo, c_out):
    """out (k*k*c, c_out) = X^T @ g, X the im2col matrix of conv_implicit (see the reference): the
    pixels cut into runs whose partial products are added in run order, so the sums repeat exactly."""
    _require("conv_implicit_weight_grad")
    _check_arrays("conv_implicit_weight_grad", a=a, g=g, out=out)
    args, pixels, taps = _implicit_geometry("conv_implicit_weight_grad", a, shape, strides, offset, k, s, pad_h,
                                            pad_w, ho, wo, c_out, ("g", g), ("out", out))
    c_out = int(c_out)
    if out.size == 0:
        return
    if pixels == 0:
        fill(out, 0.0)
        return
    wanted = max(1, min(-(-_WEIGHT_GRAD_BLOCKS // (_tiles(taps) * _tiles(c_out))), pixels // _WEIGHT_GRAD_RUN_PIXELS))
    steps = -(-pixels // _CONV_DEPTH)
    splits = -(-steps // -(-steps // wanted))  # as many runs of whole steps, none of them empty
    sums = out if splits == 1 else Array(splits * out.size)
    _launch(_kernel("conv_implicit_weight_grad"), _implicit_grid(taps, c_out, splits), (_MATMUL_THREADS, 1, 1),
            (a.array, g.array, sums.array) + args + (_i64(splits),))
    if splits > 1:
        _launch(_kernel("conv_implicit_weight_sum"), *grid_1d(out.size),
                (sums.array, out.array, _i64(out.size), _i64(splits)))


# ---------------------------------------------------------------- softmax cross-entropy

def _xent_launch(kernel, rows, cols, args):
    if rows == 0:
        return
    # one block per row, as many threads as the row has elements (whole warps, at most THREADS)
    threads = min(THREADS, max(32, 1 << (int(cols) - 1).bit_length()))
    _launch(_kernel(kernel), (min(rows, MAX_BLOCKS), 1, 1), (threads, 1, 1), args)


def softmax_xent(z, labels, lse, loss, rows, cols):
    """Row-wise log-sum-exp and cross-entropy against integer labels (see the reference); a block per row."""
    cupy = _require("softmax_xent")
    _check_arrays("softmax_xent", z=z, labels=labels, lse=lse, loss=loss)
    rows, cols = int(rows), int(cols)
    check_softmax_xent("softmax_xent", z, labels, rows, cols, lse=lse, loss=loss)
    _xent_launch("softmax_xent", rows, cols, (z.array, labels.array, lse.array, loss.array, _i64(rows), _i64(cols),
                                              *_label_errors(cupy, "softmax_xent")))


def softmax_xent_grad(z, labels, lse, g, out, rows, cols):
    """out = g * (softmax(z) - one_hot(labels)) row by row (see the reference); a block per row."""
    cupy = _require("softmax_xent_grad")
    _check_arrays("softmax_xent_grad", z=z, labels=labels, lse=lse, g=g, out=out)
    rows, cols = int(rows), int(cols)
    check_softmax_xent("softmax_xent_grad", z, labels, rows, cols, lse=lse, g=g, out=out)
    _xent_launch("softmax_xent_grad", rows, cols, (z.array, labels.array, lse.array, g.array, out.array, _i64(rows),
                                                   _i64(cols), *_label_errors(cupy, "softmax_xent_grad")))


# ---------------------------------------------------------------- batch normalization

_BN_BLOCK = (32, 8, 1)  # BN_LANES x BN_ROWS of batchnorm.cu


def _bn_columns_grid(cols):
    return (-(-int(cols) // _BN_BLOCK[0]), 1, 1)


def batchnorm_stats(x, mean, var, rows, cols):
    """Column mean and biased variance of compact x (rows, cols) (see the reference); a block per 32 columns."""
    _require("batchnorm_stats")
    _check_arrays("batchnorm_stats", x=x, mean=mean, var=var)
    rows, cols = int(rows), int(cols)
    check_batchnorm("batchnorm_stats", rows, cols, dict(x=x), dict(mean=mean, var=var))
    _launch(_kernel("batchnorm_stats"), _bn_columns_grid(cols), _BN_BLOCK,
            (x.array, mean.array, var.array, _i64(rows), _i64(cols)))


def bias_add(a, bias, out, rows, cols):
    """out[r, c] = a[r, c] + bias[c] (see the reference)."""
    _require("bias_add")
    _check_arrays("bias_add", a=a, bias=bias, out=out)
    rows, cols = int(rows), int(cols)
    check_bias_add("bias_add", rows, cols, a, bias, out)
    if rows:
        _launch(_kernel("bias_add"), *grid_1d(rows * cols), (a.array, bias.array, out.array, _i64(rows), _i64(cols)))


def batchnorm_fold(mean, var, weight, bias, running_mean, running_var, invstd, scale, shift, new_mean, new_var,
                   cols, eps, momentum):
    """A training-mode batch norm's per-channel values (see the reference): one thread per channel."""
    _require("batchnorm_fold")
    arrays = dict(mean=mean, var=var, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var,
                  invstd=invstd, scale=scale, shift=shift, new_mean=new_mean, new_var=new_var)
    _check_arrays("batchnorm_fold", **arrays)
    cols = int(cols)
    check_batchnorm("batchnorm_fold", 1, cols, {}, arrays)
    eps, momentum = check_scalar("batchnorm_fold", eps), check_scalar("batchnorm_fold", momentum)
    _launch(_kernel("batchnorm_fold"), *grid_1d(cols),
            tuple(a.array for a in arrays.values()) + (_i64(cols), np.float64(eps), _f32(1.0 - momentum),
                                                       _f32(momentum)))


def batchnorm_apply(x, scale, shift, out, rows, cols, relu=False):
    """out[r, c] = x[r, c] * scale[c] + shift[c], with ``relu`` max(that, 0) (see the reference)."""
    _require("batchnorm_apply")
    _check_arrays("batchnorm_apply", x=x, scale=scale, shift=shift, out=out)
    rows, cols = int(rows), int(cols)
    check_batchnorm("batchnorm_apply", rows, cols, dict(x=x, out=out), dict(scale=scale, shift=shift))
    _launch(_kernel("batchnorm_apply"), *grid_1d(rows * cols),
            (x.array, scale.array, shift.array, out.array, _i64(rows), _i64(cols), np.int32(1 if relu else 0)))


def batchnorm_backward(x, dy, mean, invstd, weight, dx, dweight, dbias, rows, cols, batch_stats, relu_out=None):
    """dbias, dweight and dx of the batch norm (see the reference): the column sums, then dx, both
    reading dy through the ReLU's mask where relu_out is given."""
    _require("batchnorm_backward")
    full = dict(x=x, dy=dy, dx=dx) if relu_out is None else dict(x=x, dy=dy, dx=dx, relu_out=relu_out)
    _check_arrays("batchnorm_backward", **full, mean=mean, invstd=invstd, weight=weight, dweight=dweight,
                  dbias=dbias)
    rows, cols = int(rows), int(cols)
    check_batchnorm("batchnorm_backward", rows, cols, full,
                    dict(mean=mean, invstd=invstd, weight=weight, dweight=dweight, dbias=dbias))
    # without a mask the kernels get dy in its place, never read
    mask = (dy.array if relu_out is None else relu_out.array, np.int32(relu_out is not None))
    _launch(_kernel("batchnorm_grad_sums"), _bn_columns_grid(cols), _BN_BLOCK,
            (x.array, dy.array, *mask, mean.array, invstd.array, dweight.array, dbias.array, _i64(rows), _i64(cols)))
    _launch(_kernel("batchnorm_grad_input"), *grid_1d(rows * cols),
            (x.array, dy.array, *mask, mean.array, invstd.array, weight.array, dweight.array, dbias.array,
             dx.array, _i64(rows), _i64(cols), np.int32(1 if batch_stats else 0)))


# ---------------------------------------------------------------- layer normalization

def _row_blocks_launch(kernel, rows, cols, args):
    """A row kernel's launch (layer norm, softmax): a block per row (grid-stride over rows), cols
    rounded up to whole warps threads, at most THREADS."""
    if rows == 0:
        return
    threads = min(THREADS, 32 * -(-cols // 32))
    _launch(_kernel(kernel), (min(rows, MAX_BLOCKS), 1, 1), (threads, 1, 1), args)


def layernorm(x, weight, bias, out, mean, invstd, rows, cols, eps):
    """Row mean, inverse std and the normalised, scaled and shifted rows of compact x (rows, cols)
    (see the reference); a block per row."""
    _require("layernorm")
    _check_arrays("layernorm", x=x, weight=weight, bias=bias, out=out, mean=mean, invstd=invstd)
    rows, cols = int(rows), int(cols)
    check_layernorm("layernorm", rows, cols, dict(x=x, out=out), dict(mean=mean, invstd=invstd),
                    dict(weight=weight, bias=bias))
    eps = check_scalar("layernorm", eps)
    _row_blocks_launch("layernorm", rows, cols,
                    (x.array, weight.array, bias.array, out.array, mean.array, invstd.array, _i64(rows),
                     _i64(cols), np.float64(eps)))


def layernorm_backward(x, dy, mean, invstd, weight, dx, dweight, dbias, rows, cols):
    """dweight, dbias (column sums, a block per 32 columns; zeros when rows is 0) and dx (a block per
    row) of the layer norm (see the reference)."""
    _require("layernorm_backward")
    _check_arrays("layernorm_backward", x=x, dy=dy, mean=mean, invstd=invstd, weight=weight, dx=dx,
                  dweight=dweight, dbias=dbias)
    rows, cols = int(rows), int(cols)
    check_layernorm("layernorm_backward", rows, cols, dict(x=x, dy=dy, dx=dx), dict(mean=mean, invstd=invstd),
                    dict(weight=weight, dweight=dweight, dbias=dbias))
    grid = (min(_bn_columns_grid(cols)[0], MAX_BLOCKS), 1, 1)
    _launch(_kernel("layernorm_grad_sums"), grid, _BN_BLOCK,
            (x.array, dy.array, mean.array, invstd.array, dweight.array, dbias.array, _i64(rows), _i64(cols)))
    _row_blocks_launch("layernorm_grad_input", rows, cols,
                    (x.array, dy.array, mean.array, invstd.array, weight.array, dx.array, _i64(rows), _i64(cols)))


def rmsnorm(x, weight, out, invrms, rows, cols, eps):
    """Row inverse root mean squares and the scaled rows of compact x (rows, cols) (see the
    reference); a block per row."""
    _require("rmsnorm")
    _check_arrays("rmsnorm", x=x, weight=weight, out=out, invrms=invrms)
    rows, cols = int(rows), int(cols)
    check_layernorm("rmsnorm", rows, cols, dict(x=x, out=out), dict(invrms=invrms), dict(weight=weight))
    eps = check_scalar("rmsnorm", eps)
    _row_blocks_launch("rmsnorm", rows, cols,
                       (x.array, weight.array, out.array, invrms.array, _i64(rows), _i64(cols), np.float64(eps)))


def rmsnorm_backward(x, dy, invrms, weight, dx, dweight, rows, cols):
    """dweight (column sums, a block per 32 columns; zeros when rows is 0) and dx (a block per row)
    of the RMS norm (see the reference)."""
    _require("rmsnorm_backward")
    _check_arrays("rmsnorm_backward", x=x, dy=dy, invrms=invrms, weight=weight, dx=dx, dweight=dweight)
    rows, cols = int(rows), int(cols)
    check_layernorm("rmsnorm_backward", rows, cols, dict(x=x, dy=dy, dx=dx), dict(invrms=invrms),
                    dict(weight=weight, dweight=dweight))
    grid = (min(_bn_columns_grid(cols)[0], MAX_BLOCKS), 1, 1)
    _launch(_kernel("rmsnorm_grad_sums"), grid, _BN_BLOCK,
            (x.array, dy.array, invrms.array, dweight.array, _i64(rows), _i64(cols)))
    _row_blocks_launch("rmsnorm_grad_input", rows, cols,
                       (x.array, dy.array, invrms.array, weight.array, dx.array, _i64(rows), _i64(cols)))


# ---------------------------------------------------------------- softmax

def softmax(x, out, rows, cols):
    """out[r] = exp(x[r] - max x[r]) / sum_c exp(x[r, c] - max x[r]) for every row of compact x (rows, cols)
    (see the reference); a block per row. out may be x."""
    _require("softmax")
    _check_arrays("softmax", x=x, out=out)
    rows, cols = int(rows), int(cols)
    check_softmax("softmax", rows, cols, x=x, out=out)
    _row_blocks_launch("softmax", rows, cols, (x.array, out.array, _i64(rows), _i64(cols)))


def softmax_backward(y, g, out, rows, cols):
    """out[r, c] = y[r, c] * (g[r, c] - sum_c' g[r, c'] * y[r, c']), the row sums in double (see the
    reference); a block per row. out may be y or g."""
    _require("softmax_backward")
    _check_arrays("softmax_backward", y=y, g=g, out=out)
    rows, cols = int(rows), int(cols)
    check_softmax("softmax_backward", rows, cols, y=y, g=g, out=out)
    _row_blocks_launch("softmax_backward", rows, cols, (y.array, g.array, out.array, _i64(rows), _i64(cols)))


# ---------------------------------------------------------------- LSTM cell

def lstm_cell(z, c0, h, c, rows, hidden):
    """One LSTM step's new cell and hidden state from the gate pre-activations (see the reference)."""
    _require("lstm_cell")
    _check_arrays("lstm_cell", z=z, c0=c0, h=h, c=c)
    rows, hidden = int(rows), int(hidden)
    check_lstm("lstm_cell", rows, hidden, dict(z=z), dict(c0=c0, h=h, c=c))
    if rows:
        _launch(_kernel("lstm_cell"), *grid_1d(rows * hidden),
                (z.array, c0.array, h.array, c.array, _i64(rows), _i64(hidden)))


def lstm_cell_backward(z, c0, dh, dc, dz, dc0, rows, hidden):
    """The adjoints of lstm_cell's inputs from those of its outputs (see the reference)."""
    _require("lstm_cell_backward")
    _check_arrays("lstm_cell_backward", z=z, c0=c0, dh=dh, dc=dc, dz=dz, dc0=dc0)
    rows, hidden = int(rows), int(hidden)
    check_lstm("lstm_cell_backward", rows, hidden, dict(z=z, dz=dz), dict(c0=c0, dh=dh, dc=dc, dc0=dc0))
    if rows:
        _launch(_kernel("lstm_cell_backward"), *grid_1d(rows * hidden),
                (z.array, c0.array, dh.array, dc.array, dz.array, dc0.array, _i64(rows), _i64(hidden)))


# ---------------------------------------------------------------- embeddings

def embedding_gather(weight, ids, out, num_rows, rows, dim):
    """out (rows, dim) = the rows of weight (num_rows, dim) that ids name (see the reference)."""
    cupy = _require("embedding_gather")
    _check_arrays("embedding_gather", weight=weight, ids=ids, out=out)
    num_rows, rows, dim = int(num_rows), int(rows), int(dim)
    check_embedding("embedding_gather", num_rows, rows, dim, weight, ids, out)
    if rows:
        _launch(_kernel("embedding_gather"), *grid_1d(rows * dim),
                (weight.array, ids.array, out.array, _i64(num_rows), _i64(rows), _i64(dim),
                 *_label_errors(cupy, "embedding_gather")))


def embedding_scatter(g, ids, out, num_rows, rows, dim):
    """out (num_rows, dim) = the sum, row n, of the rows of g (rows, dim) whose id is n (see the
    reference)."""
    cupy = _require("embedding_scatter")
    _check_arrays("embedding_scatter", g=g, ids=ids, out=out)
    num_rows, rows, dim = int(num_rows), int(rows), int(dim)
    check_embedding("embedding_scatter", num_rows, rows, dim, out, ids, g)
    fill(out, 0.0)
    if rows:
        _launch(_kernel("embedding_scatter"), *grid_1d(rows * dim),
                (g.array, ids.array, out.array, _i64(num_rows), _i64(rows), _i64(dim),
                 *_label_errors(cupy, "embedding_scatter")))
