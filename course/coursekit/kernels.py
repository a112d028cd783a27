"""A backend made of a notebook's kernels, and the checks that grade one.

An assignment that has students write the kernel table (``compact``, ``ewise_add``, ...,
``matmul``) turns the notebook's functions of those names into a backend module and a device::

    dev = notebook_device("hw3_cpu")                    # the notebook's compact, ewise_add, ...
    x = ndl.Tensor(np.ones((2, 3)), device=dev)         # NDArray, autograd and nn run on them

The module's kernels look the notebook's functions up *when called*, so inside a grading scope
the parts of other tasks are the package's reference, as everywhere else. What the students do
not write comes from here, the same for every notebook:

* the buffers: ``Array`` (a flat float32 buffer whose ``array`` is a 1-D numpy array on the host,
  a 1-D cupy array for a CUDA backend), ``to_numpy``, ``from_numpy`` and ``fill``;
* the argument checks of the package's backends (``backend_checks``), run before a notebook's
  kernel, so a kernel may trust its sizes and views;
* the extensions NDArray uses beyond the table, composed from the notebook's own kernels:
  ``matmul_batched`` (a matmul per batch entry), ``reduce_sum_axis``/``reduce_max_axis`` (a
  compact that moves the reduced axis last, then the reduction), ``sgd_update`` and
  ``adam_update`` (scalar and element-wise kernels).

The checks compare a backend module with numpy formulas on the cases of the package's backend
contract (``needle_kernels.backend_ndarray.contract_cases``), and train a small model on a device.
"""
import contextlib
import ctypes
import ctypes.util
import os
import re
import sys
import time
import types

import numpy as np

from needle_kernels.backend_ndarray import backend_checks as bc
from needle_kernels.backend_ndarray.contract_cases import (SPECIAL_VALUES, RandomDraws, flushed, get, nearer, put,
                                                           strided_view, view_of)
from needle_kernels.backend_ndarray.device import make_device
from needle_kernels.backend_ndarray.kernels import REGISTRY, names as kernel_names

from .cuda import is_host
from .withhold import notebook_namespace

TILE = 8    # __tile_size__ of the package's backends: matmul_tiled's layout
# The families of the table students write, from the package's kernel registry: {name: the numpy
# formula a kernel's output is checked against} for the element-wise ones, names for the others.
EWISE = {k.name: k.numpy for k in REGISTRY if k.family == "ewise" and k.table}
SCALAR = {k.name: k.numpy for k in REGISTRY if k.family == "scalar" and k.table}
UNARY = {k.name: k.numpy for k in REGISTRY if k.family == "unary" and k.table}
STRIDED = kernel_names("strided", table=True)
REDUCTIONS = kernel_names("reduce", table=True)
MATMULS = ("matmul", "matmul_tiled")   # of the registry's products, the two the assignments ask for
KERNELS = STRIDED + tuple(EWISE) + tuple(SCALAR) + tuple(UNARY) + REDUCTIONS + MATMULS


# ---------------------------------------------------------------- buffers

def host_buffers():
    """Array, to_numpy, from_numpy, fill on the host: the numpy backend's (``Array.array`` is a
    1-D float32 numpy array, what a Cython kernel takes as a ``float[::1]``)."""
    from needle_kernels.backend_ndarray import ndarray_backend_numpy as host
    return types.SimpleNamespace(Array=host.Array, to_numpy=host.to_numpy, from_numpy=host.from_numpy,
                                 fill=host.fill)


def device_buffers(cp):
    """Array, to_numpy, from_numpy, fill in the memory of ``cp`` (cupy, or its host stand-in ``cupy_host``):
    ``Array.array`` is a 1-D float32 device array, which a kernel launch passes as a ``float*``."""

    class Array:
        """A flat float32 buffer in device memory (``array``: a 1-D device array of ``size`` elements)."""

        __slots__ = ("array",)

        def __init__(self, size):
            self.array = cp.empty(bc.check_array_size(size), dtype=cp.float32)

        @property
        def size(self):
            return self.array.size

        def ptr(self):
            return int(self.array.data.ptr)

    def to_numpy(a, shape, strides, offset):
        shape, strides, offset = bc.read_view("to_numpy", shape, strides, offset)
        bc.check_view(a.size, shape, strides, offset)
        return _host_view(cp.asnumpy(a.array), shape, strides, offset).copy()

    def from_numpy(arr, out):
        bc.check_size("from_numpy", out, np.size(arr), "out")
        out.array = cp.asarray(np.ascontiguousarray(arr, dtype=np.float32).reshape(-1))

    def fill(out, val):
        out.array = cp.asarray(np.full(out.size, bc.check_scalar("fill", val), dtype=np.float32))

    # cupy compiles every kernel to flush float32 subnormals to zero; its host stand-in keeps them
    return types.SimpleNamespace(Array=Array, to_numpy=to_numpy, from_numpy=from_numpy, fill=fill,
                                 flushes_subnormals=not is_host(cp))


def _host_view(flat, shape, strides, offset):
    """The numpy view (shape, strides, offset in elements) of the 1-D float32 array ``flat``."""
    if 0 in shape:
        return np.empty(shape, np.float32)
    return np.lib.stride_tricks.as_strided(flat[offset:], shape, tuple(4 * s for s in strides))


# ---------------------------------------------------------------- the module

def _checked(name):
    """The argument check of kernel ``name``: returns the arguments as the kernel receives them."""
    if name == "compact":
        def check(a, out, shape, strides, offset):
            shape, strides, offset = bc.read_view(name, shape, strides, offset)
            bc.check_view(a.size, shape, strides, offset)
            bc.check_size(name, out, bc.prod(shape), "out")
            return a, out, shape, strides, offset
    elif name == "ewise_setitem":
        def check(a, out, shape, strides, offset):
            shape, strides, offset = bc.read_view(name, shape, strides, offset)
            bc.check_view(out.size, shape, strides, offset, "out")
            bc.check_size(name, a, bc.prod(shape), "a")
            return a, out, shape, strides, offset
    elif name == "scalar_setitem":
        def check(size, val, out, shape, strides, offset):
            shape, strides, offset = bc.read_view(name, shape, strides, offset)
            bc.check_view(out.size, shape, strides, offset, "out")
            if size != bc.prod(shape):
                raise ValueError(f"{name}: size {size} != prod(shape {shape})")
            return int(size), bc.check_scalar(name, val), out, shape, strides, offset
    elif name in EWISE:
        def check(a, b, out):
            bc.check_same_size(name, a=a, b=b, out=out)
            return a, b, out
    elif name in SCALAR:
        def check(a, val, out):
            bc.check_same_size(name, a=a, out=out)
            return a, bc.check_scalar(name, val), out
    elif name in UNARY:
        def check(a, out):
            bc.check_same_size(name, a=a, out=out)
            return a, out
    elif name in REDUCTIONS:
        def check(a, out, reduce_size):
            bc.check_reduce(name, a, out, int(reduce_size))
            return a, out, int(reduce_size)
    elif name in ("matmul", "matmul_tiled"):
        def check(a, b, out, m, n, p):
            m, n, p = int(m), int(n), int(p)
            if name == "matmul_tiled" and (m % TILE or n % TILE or p % TILE):
                raise ValueError(f"{name}: m={m}, n={n}, p={p} must be multiples of the tile size {TILE}")
            bc.check_matmul(name, a, b, out, m, n, p)
            return a, b, out, m, n, p
    else:
        raise LookupError(name)
    return check


def _notebook_kernel(name, notebook_name):
    check = _checked(name)

    def kernel(*args):
        args = check(*args)
        fn = notebook_namespace().get(notebook_name)
        if fn is None:
            raise NameError(f"{notebook_name} is not defined in this notebook yet")
        fn(*args)

    kernel.__name__ = name
    kernel.__doc__ = f"The notebook's {notebook_name}, after the package's argument checks."
    return kernel


def notebook_backend(name, buffers=None, prefix="", kernels=KERNELS):
    """A backend module whose ``kernels`` are the notebook's functions ``prefix + kernel``.

    ``buffers`` (``host_buffers()`` when None) gives Array, to_numpy, from_numpy and fill. The
    extensions NDArray needs besides the table are composed from the module's own kernels.
    """
    buffers = host_buffers() if buffers is None else buffers
    mod = types.ModuleType(name, f"The kernel table of the notebook's {prefix or ''}kernels.")
    mod.__device_name__ = name
    mod.__tile_size__ = TILE
    flushes = getattr(buffers, "flushes_subnormals", False)
    mod.flushes_subnormals = lambda: flushes  # as ndarray_backend_cuda.flushes_subnormals()
    for attr in ("Array", "to_numpy", "from_numpy", "fill"):
        setattr(mod, attr, getattr(buffers, attr))
    for kernel in kernels:
        setattr(mod, kernel, _notebook_kernel(kernel, prefix + kernel))
    _add_extensions(mod)
    return mod


def notebook_device(name, buffers=None, prefix="", kernels=KERNELS):
    """``make_device(name, notebook_backend(...))``: a device running the notebook's kernels."""
    return make_device(name, notebook_backend(name, buffers, prefix, kernels))


def _add_extensions(mod):
    """matmul_batched, reduce_*_axis, sgd_update and adam_update from the module's own kernels."""

    def matmul_batched(a, b, out, batch, m, n, p):
        """out[k] = a[k] @ b[k]: each pair compacted out of the batch, multiplied, written back."""
        bc.check_matmul("matmul_batched", a, b, out, m, n, p, batch)
        if m * p == 0:
            return
        ta, tb, to = mod.Array(m * n), mod.Array(n * p), mod.Array(m * p)
        for k in range(batch):
            if n:
                mod.compact(a, ta, (m, n), (n, 1), k * m * n)
                mod.compact(b, tb, (n, p), (p, 1), k * n * p)
            mod.matmul(ta, tb, to, m, n, p)
            mod.ewise_setitem(to, out, (m, p), (p, 1), k * m * p)

    def reduction(kernel):
        def reduce_axis(a, out, outer, reduce_size, inner):
            """a seen as (outer, reduce_size, inner) reduced over the middle axis: the axis moved
            last by a compact, then the contiguous reduction."""
            bc.check_reduce_axis(f"{kernel}_axis", a, out, outer, reduce_size, inner)
            if outer * inner == 0:
                return
            moved = mod.Array(a.size)
            mod.compact(a, moved, (outer, inner, reduce_size), (reduce_size * inner, 1, inner), 0)
            getattr(mod, kernel)(moved, out, reduce_size)
        reduce_axis.__name__ = f"{kernel}_axis"
        return reduce_axis

    def sgd_update(param, grad, u, out, lr, momentum, weight_decay):
        """ndarray_backend_numpy.sgd_update, one element-wise kernel at a time."""
        arrays = dict(param=param, grad=grad, out=out)
        if u is not None:
            arrays["u"] = u
        lr, momentum, weight_decay = bc.check_optim("sgd_update", arrays, (lr, momentum, weight_decay))
        tmp = mod.Array(param.size)
        g = grad
        if weight_decay != 0.0:
            g = mod.Array(param.size)
            mod.scalar_mul(param, weight_decay, tmp)
            mod.ewise_add(grad, tmp, g)
        if u is not None:
            mod.scalar_mul(g, 1.0 - momentum, tmp)
            mod.scalar_mul(u, momentum, u)
            mod.ewise_add(u, tmp, u)
            g = u
        mod.scalar_mul(g, -lr, tmp)            # p + (-(g lr)) is p - g lr exactly
        mod.ewise_add(param, tmp, out)

    def adam_update(param, grad, m, v, out, lr, beta1, beta2, eps, weight_decay, c1, c2):
        """ndarray_backend_numpy.adam_update, one element-wise kernel at a time (the square root
        as scalar_power(., 0.5), so to rounding)."""
        lr, beta1, beta2, eps, weight_decay, c1, c2 = bc.check_optim(
            "adam_update", dict(param=param, grad=grad, m=m, v=v, out=out), (lr, beta1, beta2, eps, weight_decay, c1, c2))
        size = param.size
        tmp, tmp2 = mod.Array(size), mod.Array(size)
        g = grad
        if weight_decay != 0.0:
            g = mod.Array(size)
            mod.scalar_mul(param, weight_decay, tmp)
            mod.ewise_add(grad, tmp, g)
        mod.scalar_mul(m, beta1, m)
        mod.scalar_mul(g, 1.0 - beta1, tmp)
        mod.ewise_add(m, tmp, m)
        mod.ewise_mul(g, g, tmp)
        mod.scalar_mul(tmp, 1.0 - beta2, tmp)
        mod.scalar_mul(v, beta2, v)
        mod.ewise_add(v, tmp, v)
        mod.scalar_mul(v, 1.0 / c2, tmp)
        mod.scalar_power(tmp, 0.5, tmp)
        mod.scalar_add(tmp, eps, tmp)
        mod.scalar_mul(m, lr / c1, tmp2)
        mod.ewise_div(tmp2, tmp, tmp2)
        mod.scalar_mul(tmp2, -1.0, tmp2)
        mod.ewise_add(param, tmp2, out)

    mod.matmul_batched = matmul_batched
    mod.reduce_sum_axis = reduction("reduce_sum")
    mod.reduce_max_axis = reduction("reduce_max")
    mod.sgd_update = sgd_update
    mod.adam_update = adam_update


# ---------------------------------------------------------------- checks against numpy

def _run(mod, kernel, inputs, out_size, *args, scalar=None, fill=-7.0):
    """getattr(mod, kernel)(*inputs, [scalar,] out, *args) on fresh buffers; the whole out buffer."""
    arrays = [put(mod, x) for x in inputs]
    if scalar is not None:
        arrays.append(scalar)
    out = mod.Array(out_size)
    mod.fill(out, fill)
    getattr(mod, kernel)(*arrays, out, *args)
    return get(mod, out)


def _same(got, want, what, rtol=0.0, atol=0.0):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: {got.size} elements, expected {want.size}")
    if rtol == 0 and atol == 0:
        ok = (got == want) | (np.isnan(got) & np.isnan(want))
    else:
        with np.errstate(invalid="ignore"):
            ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        raise AssertionError(f"{what}: element {k} is {float(got[k]):.8g}, expected {float(want[k]):.8g} "
                             f"({int((~ok).sum())} of {ok.size} elements differ)")


def _describe(shape, strides, offset, size):
    return f"view shape={tuple(shape)} strides={tuple(strides)} offset={offset} of a buffer of {size}"


LARGE_VIEWS = [  # (base shape, view): the kernels' multi-threaded paths, from the package's contract
    ((300, 200), lambda v: v.T),
    ((24, 50, 40), lambda v: v.transpose(2, 0, 1)),
    ((300, 400), lambda v: v[::-1, ::2]),
    ((100000,), lambda v: v[::-3]),
    ((700, 1), lambda v: np.broadcast_to(v, (700, 300))),
    ((20, 15, 20, 10), lambda v: v[1:, ::-1, 2:17:3].transpose(3, 1, 0, 2)),
]


def _strided_cases(count, seed, allow_broadcast, large):
    for i in range(count):
        yield strided_view(RandomDraws(seed + i), allow_broadcast=allow_broadcast)
    if large:
        rng = np.random.default_rng(seed)
        for shape, transform in LARGE_VIEWS:
            n = int(np.prod(shape))
            base = rng.standard_normal(n + 5).astype(np.float32)
            view = transform(base[:n].reshape(shape))
            if allow_broadcast or 0 not in view.strides:
                yield (base,) + view_of(base, view) + (view,)


def check_strided(mod, kernel, count=60, seed=0, large=True):
    """``compact``, ``ewise_setitem`` or ``scalar_setitem`` of ``mod`` on the contract's strided views
    (steps of either sign, offsets, permuted and broadcast axes, empty and 0-d views)."""
    rng = np.random.default_rng(seed)
    for buf, shape, strides, offset, view in _strided_cases(count, seed, kernel != "ewise_setitem", large):
        what = f"{kernel} on a {_describe(shape, strides, offset, buf.size)}"
        if kernel == "compact":
            got = _run(mod, "compact", [buf], view.size, shape, strides, offset)
            _same(got, view.ravel(), what)
            continue
        target = put(mod, buf)
        want = buf.copy()
        if kernel == "ewise_setitem":
            src = rng.standard_normal(view.size).astype(np.float32)
            mod.ewise_setitem(put(mod, src), target, shape, strides, offset)
            _host_view(want, shape, strides, offset)[...] = src.reshape(shape)
        else:
            val = float(np.float32(rng.standard_normal() * 100))
            mod.scalar_setitem(view.size, val, target, shape, strides, offset)
            if view.size:
                _host_view(want, shape, strides, offset)[...] = val
        _same(get(mod, target), want, what + " (the whole buffer after it)")


def _pair(rng, size):
    a = (rng.standard_normal(size) * 300).astype(np.float32)
    b = (rng.standard_normal(size) * 300).astype(np.float32)
    b = np.where(rng.random(size) < 0.3, a, b).astype(np.float32)     # ties, for eq and ge
    k = min(size, SPECIAL_VALUES.size)
    if size and rng.random() < 0.5:
        a[:k] = SPECIAL_VALUES[:k]
    return a, b


def check_elementwise(mod, kernel, count=40, seed=0, large=True):
    """An ewise_, scalar_ or unary kernel of ``mod`` against numpy in float32, sizes 0 to 40 and
    (``large``) a million, with signed zeros, infinities, NaN and ties among the inputs."""
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(0, 41)) for _ in range(count)] + ([(1 << 20) + 13] if large else [])
    scalars = [0.0, -0.0, 1.0, np.inf, np.nan, 3, -2, 0.5, 2.5, -37.25]
    with np.errstate(all="ignore"):
        for i, size in enumerate(sizes):
            a, b = _pair(rng, size)
            if kernel in EWISE:
                got, formula, inputs = _run(mod, kernel, [a, b], size), EWISE[kernel], [a, b]
                what, tol = f"{kernel} of {size} elements", dict(rtol=1e-6)
            elif kernel == "scalar_power":
                a = np.clip(a, -20, 20).astype(np.float32)
                val = [0, 1, 2, 3, -1, -2, 0.5, 1.5, 2.5, -0.5, 2.0][i % 11]
                got, formula, inputs = _run(mod, kernel, [a], size, scalar=val), np.power, [a, np.float32(val)]
                what, tol = f"{kernel} of {size} elements by {val!r}", dict(rtol=2e-6)
            elif kernel in SCALAR:
                val = scalars[i % len(scalars)]
                if size:
                    a[-1] = val                      # a tie for eq and ge
                got, formula, inputs = _run(mod, kernel, [a], size, scalar=val), SCALAR[kernel], [a, np.float32(val)]
                what, tol = f"{kernel} of {size} elements with {val!r}", dict(rtol=1e-6)
            elif kernel in UNARY:
                a = np.concatenate([a / 3, SPECIAL_VALUES if size % 2 else []]).astype(np.float32)
                got, formula, inputs = _run(mod, kernel, [a], a.size), UNARY[kernel], [a]
                what, tol = f"{kernel} of {a.size} elements", dict(rtol=3.2e-6, atol=1e-37)
            else:
                raise LookupError(kernel)
            want = np.asarray(formula(*inputs), np.float32)
            # on a GPU, the answer from flushed inputs, flushed, counts too
            if getattr(mod, "flushes_subnormals", lambda: False)():
                want = nearer(got, want, flushed(formula(*[flushed(x) for x in inputs])))
            _same(got, want, what, **tol)
    a = np.arange(9, dtype=np.float32)
    with np.errstate(all="ignore"):
        # out may be an input, as NDArray's in-place updates do
        x = put(mod, a)
        args = (x, x) if kernel in EWISE else (x, 2.0) if kernel in SCALAR else (x,)
        getattr(mod, kernel)(*args, x)
        want = (EWISE.get(kernel) or SCALAR.get(kernel) or UNARY.get(kernel))(*([a, a] if kernel in EWISE else
                                                                                [a, np.float32(2.0)] if kernel in SCALAR
                                                                                else [a]))
        _same(get(mod, x), np.asarray(want, np.float32), f"{kernel} with out the same Array as its input",
              rtol=3.2e-6, atol=1e-37)


def check_reduction(mod, kernel, count=40, seed=0, large=True):
    """reduce_sum or reduce_max of ``mod`` against numpy: blocks of 1 to 40 elements, 0 to 12
    outputs, NaN propagating, and (``large``) a reduction of two million elements and many small ones."""
    rng = np.random.default_rng(seed)
    cases = [(int(rng.integers(0, 13)), int(rng.integers(1, 41))) for _ in range(count)]
    cases += [(1, 1 << 21), (5000, 129), (200000, 3)] if large else []
    np_fn = np.sum if kernel == "reduce_sum" else np.max
    for nout, rs in cases:
        # large blocks hold values in [0, 1), as the package's contract has them: a float running sum
        # of a million of those drifts, a double one does not
        a = (rng.standard_normal(nout * rs) * 10 if rs <= 40 else rng.random(nout * rs)).astype(np.float32)
        got = _run(mod, kernel, [a], nout, rs)
        want = np_fn(a.astype(np.float64).reshape(nout, rs), axis=1) if nout else np.zeros(0)
        _same(got, want.astype(np.float32), f"{kernel} of {nout} blocks of {rs}", rtol=2e-5, atol=1e-5 * rs ** 0.5)
    a = np.arange(64, dtype=np.float32)
    a[37] = np.nan
    _same(_run(mod, kernel, [a], 4, 16), np_fn(a.reshape(4, 16), axis=1),
          f"{kernel} of 4 blocks of 16, one holding a NaN (NaN propagates, as in numpy)")


def check_matmul(mod, kernel="matmul", count=25, seed=0, large=True):
    """matmul (row-major) or matmul_tiled (the tiled layout) of ``mod`` against numpy in float64."""
    rng = np.random.default_rng(seed)
    if kernel == "matmul":
        cases = [tuple(int(x) for x in rng.integers(0, 41, 3)) for _ in range(count)]
        cases += [(1, 1000, 1), (67, 300, 129), (200, 513, 257)] if large else []
    else:
        cases = [tuple(TILE * int(x) for x in rng.integers(0, 6, 3)) for _ in range(count)]
        cases += [(TILE * 24, TILE * 16, TILE * 32)] if large else []
    for m, n, p in cases:
        a, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((n, p)).astype(np.float32)
        want = a.astype(np.float64) @ b
        if kernel == "matmul_tiled":
            tile = lambda x, r, c: x.reshape(r // TILE, TILE, c // TILE, TILE).transpose(0, 2, 1, 3)
            got = _run(mod, kernel, [tile(a, m, n), tile(b, n, p)], m * p, m, n, p)
            want = tile(want, m, p)
        else:
            got = _run(mod, kernel, [a, b], m * p, m, n, p)
        _same(got, want.ravel().astype(np.float32), f"{kernel} ({m} x {n}) @ ({n} x {p})",
              rtol=1e-4, atol=1e-5 * max(1, n) ** 0.5)


def check_errors(mod, kernel):
    """A call with sizes that do not fit raises ValueError (the module's checks), never writes."""
    a, out = mod.Array(6), mod.Array(5)
    args = {"compact": (a, out, (2, 3), (3, 1), 0), "ewise_setitem": (a, out, (2, 3), (3, 1), 0),
            "scalar_setitem": (6, 1.0, out, (2, 3), (3, 1), 0), "matmul": (a, a, out, 2, 3, 2),
            "matmul_tiled": (a, a, out, 2, 3, 2), "reduce_sum": (a, out, 2), "reduce_max": (a, out, 2)}
    call = args.get(kernel) or ((a, a, out) if kernel in EWISE else (a, 1.0, out) if kernel in SCALAR else (a, out))
    try:
        getattr(mod, kernel)(*call)
    except ValueError:
        return
    raise AssertionError(f"{kernel}: sizes that do not fit were not refused")


# ---------------------------------------------------------------- a model on a device

def check_model(device, steps=4, seed=0, lr=0.05):
    """A 2-layer ReLU MLP with a squared-error loss, trained ``steps`` SGD steps on ``device`` with
    the library (nn.Linear, nn.ReLU, optim.SGD); its losses and final weights against the same
    training written in numpy (float64). Returns the losses."""
    import needle_kernels as ndl
    from needle_kernels import nn, optim

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((24, 10)).astype(np.float32)
    Y = rng.standard_normal((24, 3)).astype(np.float32)
    W1, W2 = (rng.standard_normal((10, 16)) * 0.4).astype(np.float32), (rng.standard_normal((16, 3)) * 0.4).astype(np.float32)
    b1, b2 = (rng.standard_normal((1, 16)) * 0.1).astype(np.float32), (rng.standard_normal((1, 3)) * 0.1).astype(np.float32)

    first, second = nn.Linear(10, 16, device=device), nn.Linear(16, 3, device=device)
    for layer, W, b in ((first, W1, b1), (second, W2, b2)):
        layer.weight, layer.bias = nn.Parameter(W, device=device), nn.Parameter(b, device=device)
    model = nn.Sequential(first, nn.ReLU(), second)
    opt = optim.SGD(model.parameters(), lr=lr)
    Xt, Yt = ndl.Tensor(X, device=device), ndl.Tensor(Y, device=device)
    losses = []
    for _ in range(steps):
        opt.reset_grad()
        loss = ((model(Xt) - Yt) ** 2).sum() / X.shape[0]
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))

    P = [x.astype(np.float64) for x in (W1, b1, W2, b2)]
    want = []
    for _ in range(steps):
        W1_, b1_, W2_, b2_ = P
        h = X @ W1_ + b1_
        r = np.maximum(h, 0)
        d = r @ W2_ + b2_ - Y
        want.append(float((d ** 2).sum() / X.shape[0]))
        dz = 2 * d / X.shape[0]
        dh = (dz @ W2_.T) * (h > 0)
        grads = [X.T @ dh, dh.sum(0, keepdims=True), r.T @ dz, dz.sum(0, keepdims=True)]
        P = [p - lr * g for p, g in zip(P, grads)]
    _same(np.array(losses), np.array(want), f"the losses of {steps} SGD steps of a 2-layer MLP on {device}",
          rtol=1e-4, atol=1e-6)
    _same(first.weight.numpy().ravel(), P[0].ravel().astype(np.float32),
          f"the first layer's weight after {steps} SGD steps on {device}", rtol=1e-4, atol=1e-5)
    return losses


# ---------------------------------------------------------------- what the kernels are made of

_NUMPY_ALLOWED = {"float32", "float64", "intp", "int64", "int32", "uintp", "array", "asarray",
                  "ascontiguousarray", "empty", "zeros", "ndarray", "dtype"}
_FORBIDDEN = re.compile(r"\b(needle_kernels|coursekit|stride_tricks|as_strided|einsum|tensordot)\b"
                        r"|\.(sum|max|min|dot|ravel|flatten|reshape|transpose|copy|fill)\s*\(|@")


def _cython_source(fn, name):
    mod = sys.modules.get(getattr(fn, "__module__", None) or "")
    if isinstance(fn, types.FunctionType) or mod is None or not mod.__name__.startswith("_cython_magic_"):
        raise AssertionError(f"{name}: define it in a %%cython cell (this one is not compiled Cython)")
    with open(os.path.join(os.path.dirname(mod.__file__), mod.__name__ + ".pyx")) as fh:
        text = fh.read()
    return mod, text


def check_cython(fn, name, openmp=True):
    """``fn`` was compiled from a %%cython cell (with OpenMP when ``openmp``) whose code does its own
    loops: it imports neither the package nor the course kit, and numpy only names types and
    allocates (no numpy arithmetic, strided views, reshapes or copies)."""
    mod, text = _cython_source(fn, name)
    if openmp:
        with open(mod.__file__, "rb") as fh:
            if b"GOMP_parallel" not in fh.read():
                raise AssertionError(f"{name}: its %%cython cell is not compiled with OpenMP "
                                     "(--compile-args=-fopenmp --link-args=-fopenmp) or has no prange loop")
    code = re.sub(r"#[^\n]*", "", re.sub(r"(\"\"\"|''')[\s\S]*?\1|\"[^\"\n]*\"|'[^'\n]*'", "''", text))
    found = [m.group(0) for m in _FORBIDDEN.finditer(code)]
    aliases = set(re.findall(r"^\s*import\s+numpy\s+as\s+(\w+)", code, re.M)) | (
        {"numpy"} if re.search(r"^\s*import\s+numpy\s*$", code, re.M) else set())
    for alias in aliases:
        found += [f"{alias}.{f}" for f in re.findall(rf"\b{alias}\.(\w+)", code) if f not in _NUMPY_ALLOWED]
    if re.search(r"^\s*from\s+numpy\S*\s+import", code, re.M):
        found.append("from numpy ... import")
    if found:
        raise AssertionError(f"{name}: the %%cython cell it comes from must do the work in its own loops; "
                             f"it uses {sorted(set(found))}")


_HOST_WORK = {"asnumpy", "get", "sum", "max", "min", "maximum", "add", "multiply", "divide", "subtract",
              "power", "exp", "log", "tanh", "equal", "greater_equal", "where", "matmul", "dot", "einsum",
              "tensordot", "as_strided", "to_numpy", "from_numpy", "copyto", "fill", "full", "reshape",
              "ravel", "transpose", "take", "put", "compact"}


def check_launcher(fn, name):
    """``fn`` is a Python function that launches kernels and computes nothing itself: no cupy or
    numpy arithmetic, no copies through the host (``asnumpy``, ``get``), no ``@``."""
    import dis

    code = getattr(fn, "__code__", None)
    if code is None:
        raise AssertionError(f"{name}: write it as a Python function that launches your CUDA kernels")
    used = _HOST_WORK & set(code.co_names)
    if any(i.opname == "BINARY_OP" and i.argrepr in ("@", "@=") for i in dis.get_instructions(code)):
        used.add("@")
    if used:
        raise AssertionError(f"{name}: the kernels do the work, the launch function only launches them "
                             f"(found {sorted(used)})")


# ---------------------------------------------------------------- speed

# The yardstick of the speed check: the plain product on matmul_tiled's own layout, one dot product per
# output element with the sum over k innermost, rows split among the OpenMP threads, compiled with the
# flags of the notebooks' %%cython cells. Reading the layout the timed kernel reads, it leaves in the
# ratio only what blocking the loops buys; against a plain loop on the row-major layout, an untiled loop
# on the tiled layout came out ahead on some CPUs. It is the course's, so a submission cannot make it slow.
_PLAIN_MATMUL_C = r"""
#define T %d
#define AT(x, cols, r, c) x[(((r) / T) * ((cols) / T) + (c) / T) * T * T + ((r) %% T) * T + (c) %% T]

void plain_matmul(const float *a, const float *b, float *out, long m, long n, long p) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < m; i++)
        for (long j = 0; j < p; j++) {
            float acc = 0.0f;
            for (long k = 0; k < n; k++)
                acc += AT(a, n, i, k) * AT(b, p, k, j);
            AT(out, p, i, j) = acc;
        }
}
""" % TILE


def _plain_matmul():
    """The course's plain matmul on the tiled layout as a ctypes function ``f(a, b, out, m, n, p)`` of
    the addresses of float32 arrays in that layout, compiled from C with ``-O3 -fopenmp`` into a fresh
    folder of this process (a library left in a shared folder could be anyone's)."""
    import shutil
    import subprocess
    import tempfile

    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("the speed check compiles the course's plain matmul with gcc, which is not installed")
    folder = tempfile.mkdtemp(prefix="coursekit_plain_matmul_")
    src, lib = os.path.join(folder, "plain_matmul.c"), os.path.join(folder, "plain_matmul.so")
    with open(src, "w") as fh:
        fh.write(_PLAIN_MATMUL_C)
    proc = subprocess.run([compiler, "-O3", "-fopenmp", "-shared", "-fPIC", src, "-o", lib],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the course's plain matmul does not compile:\n{proc.stderr}")
    fn = ctypes.CDLL(lib).plain_matmul
    shutil.rmtree(folder, ignore_errors=True)   # the loaded library stays mapped
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3
    fn.restype = None
    return fn


@contextlib.contextmanager
def _one_openmp_thread():
    """OpenMP's thread count set to 1 for the calls inside. Both kernels of the speed check run on
    libgomp (gcc's OpenMP, loaded once per process), so both then use one core: the ratio measures
    the tiling, and neither the machine's core count nor other work on it sways it, as they sway
    two parallel loops of different lengths."""
    gomp = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")
    before = gomp.omp_get_max_threads()
    gomp.omp_set_num_threads(1)
    try:
        yield
    finally:
        gomp.omp_set_num_threads(before)


def tiled_speedup(mod, n=512, repeats=9, seed=0):
    """``(ratio, plain, tiled)``: how many times faster ``mod.matmul_tiled`` runs than the course's
    plain matmul (``_plain_matmul``), for n x n by n x n, each on one OpenMP thread: the median over
    ``repeats`` pairs of calls of the pair's ratio, and that pair's two times.

    A pair's two calls run back to back, in turns first, so both see the same machine: a machine
    busy with other work (a class grades two notebooks at a time) slows both alike, where the best
    call of each, taken apart, could pair one kernel's quiet moment with the other's busy one. The
    yardstick is the course's own kernel on the tiled layout, not the notebook's ``matmul``.
    ``mod.matmul_tiled``'s product is checked against numpy first: a kernel that skips work is not
    fast.
    """
    if n % TILE:
        raise ValueError(f"tiled_speedup: n = {n} must be a multiple of the tile size {TILE}")
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    tile = lambda z: np.ascontiguousarray(z.reshape(n // TILE, TILE, n // TILE, TILE).transpose(0, 2, 1, 3))
    xt, yt = tile(x), tile(y)
    a, b, out = put(mod, xt), put(mod, yt), mod.Array(n * n)
    plain, ref_out = _plain_matmul(), np.empty(n * n, dtype=np.float32)
    runs = {"plain": lambda: plain(xt.ctypes.data, yt.ctypes.data, ref_out.ctypes.data, n, n, n),
            "tiled": lambda: mod.matmul_tiled(a, b, out, n, n, n)}
    for run in runs.values():
        run()       # warm-up: caches, the OpenMP threads
    want = (x.astype(np.float64) @ y).astype(np.float32)
    _same(ref_out, tile(want).ravel(), f"the course's plain matmul on the tiled layout at n = {n}",
          rtol=1e-4, atol=1e-5 * n ** 0.5)
    _same(get(mod, out), tile(want).ravel(), f"matmul_tiled at n = {n}", rtol=1e-4, atol=1e-5 * n ** 0.5)
    pairs = []
    with _one_openmp_thread():
        for i in range(repeats):
            took = {}
            for name in ("plain", "tiled") if i % 2 == 0 else ("tiled", "plain"):
                t0 = time.perf_counter()
                runs[name]()
                took[name] = time.perf_counter() - t0
            pairs.append((took["plain"] / took["tiled"], took["plain"], took["tiled"]))
    return sorted(pairs)[len(pairs) // 2]


__all__ = ["notebook_backend", "notebook_device", "host_buffers", "device_buffers", "check_strided",
           "check_elementwise", "check_reduction", "check_matmul", "check_errors", "check_model",
           "check_cython", "check_launcher", "tiled_speedup", "KERNELS", "EWISE", "SCALAR", "UNARY",
           "STRIDED", "REDUCTIONS", "TILE", "put", "get"]
