"""Devices: a name plus the flat kernel table (a backend module) that runs there.

``cpu()`` is the Cython + OpenMP backend, ``cpu_numpy()`` the numpy reference,
``cuda()`` the cupy backend; ``make_device(name, module)`` makes a device of a backend
written elsewhere (a notebook's kernels). A device whose module cannot load is *disabled*
(``enabled()`` is False and ``reason`` says why) rather than an import error,
so code can ask ``ndl.cuda().enabled()`` on any machine.

``NK_DEBUG=1`` (or :func:`set_debug`) prints one line per kernel call: its
name, argument sizes, threads (CPU) or grid/block (GPU), and wall time.
"""
import functools
import importlib
import os
import sys
import time

import numpy as np

from ..labels import one_hot_rows
from . import kernels as _kernels

_DEBUG = os.environ.get("NK_DEBUG", "0") not in ("", "0")


def set_debug(flag=True):
    """Turn the per-kernel debug printer on or off at run time."""
    global _DEBUG
    _DEBUG = bool(flag)
    for dev in _DEVICES.values():  # kernels cached before the switch must be looked up again
        dev._forget_kernels()


def _describe(arg):
    if hasattr(arg, "size") and hasattr(arg, "ptr"):
        return f"Array[{arg.size}]"
    if isinstance(arg, np.ndarray):
        return f"ndarray{arg.shape}"
    if isinstance(arg, tuple):
        return "(" + ",".join(str(x) for x in arg) + ")"
    if isinstance(arg, float):
        return f"{arg:g}"
    return str(arg)


def _work_size(args):
    sizes = [a.size for a in args if hasattr(a, "ptr")]
    return max(sizes) if sizes else 0


class BackendDevice:
    """A device: ``name`` and ``mod``, the backend module implementing the kernel table."""

    def __init__(self, name, mod, reason=None):
        self.name = name
        self.mod = mod
        self.reason = reason
        self._cached = []

    def __eq__(self, other):
        return isinstance(other, BackendDevice) and self.name == other.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name + "()"

    def enabled(self):
        return self.mod is not None

    def _require(self):
        if self.mod is None:
            raise RuntimeError(f"device {self} is not available here: {self.reason}")

    def __getattr__(self, name):
        # Only reached for names not defined on the class: the kernel table.
        if name.startswith("__") and name != "__tile_size__":
            raise AttributeError(name)
        mod = self.__dict__.get("mod")
        if mod is None:
            raise RuntimeError(f"device {self.name}() is not available here: {self.__dict__.get('reason')}")
        try:
            fn = getattr(mod, name)
        except AttributeError:
            raise AttributeError(f"device {self.name}(): its backend {getattr(mod, '__name__', mod)!r} "
                                 f"has no {name!r}") from None
        if _DEBUG and callable(fn) and not isinstance(fn, type):
            return self._traced(name, fn)
        # Cache on the instance: kernel lookups happen on every array operation,
        # and an instance attribute is found without calling __getattr__ again.
        self.__dict__[name] = fn
        self._cached.append(name)
        return fn

    def _forget_kernels(self):
        for name in self._cached:
            self.__dict__.pop(name, None)
        self._cached.clear()

    def _traced(self, name, fn):
        mod = self.mod

        def traced(*args):
            sync = getattr(mod, "synchronize", None)
            if sync:
                sync()
            start = time.perf_counter()
            result = fn(*args)
            if sync:
                sync()
            elapsed = (time.perf_counter() - start) * 1e3
            if hasattr(mod, "last_launch"):
                where = mod.last_launch()
            elif hasattr(mod, "num_threads_for"):
                where = f"threads={mod.num_threads_for(_work_size(args))}"
            else:
                where = "threads=1"
            sizes = " ".join(_describe(a) for a in args)
            print(f"[nk] {self.name}.{name} {sizes} {where} {elapsed:.3f} ms", file=sys.stderr)
            return result

        return traced

    # ------------------------------------------------------------ constructors
    @property
    def array_type(self):
        """NDArray, the class the constructors below build.

        Imported on first use: ndarray.py imports this module at its top (for
        default_device), so this one cannot import it at its own.
        """
        return _ndarray_class()

    def _check_dtype(self, dtype):
        if dtype not in (None, "float32", np.float32) and np.dtype(dtype) != np.float32:
            raise ValueError(f"NDArray supports dtype float32 only, got {dtype!r}")

    def rand(self, *shape, dtype="float32"):
        """Uniform [0, 1) from numpy's global RNG (float64 draws cast to float32)."""
        self._check_dtype(dtype)
        return self.array_type(np.random.rand(*shape).astype(np.float32), device=self)

    def randn(self, *shape, dtype="float32"):
        """Standard normal from numpy's global RNG, cast to float32."""
        self._check_dtype(dtype)
        return self.array_type(np.random.randn(*shape).astype(np.float32), device=self)

    def one_hot(self, n, i, dtype="float32"):
        """Rows of the n x n identity picked by the integer indices i."""
        self._check_dtype(dtype)
        return self.array_type(one_hot_rows(n, i.numpy() if hasattr(i, "numpy") else i), device=self)

    def empty(self, shape, dtype="float32"):
        self._check_dtype(dtype)
        return self.array_type.make(tuple(shape), device=self)

    def full(self, shape, fill_value, dtype="float32"):
        arr = self.empty(shape, dtype)
        arr.fill(fill_value)
        return arr


@functools.cache
def _ndarray_class():
    from .ndarray import NDArray

    return NDArray


def _load(name, module):
    try:
        mod = importlib.import_module(f"needle_kernels.backend_ndarray.{module}")
    except ImportError as exc:  # the extension was not built, or cupy is missing
        return BackendDevice(name, None, reason=f"{module} could not be imported ({exc})")
    available = getattr(mod, "is_available", None)
    if available is not None and not available():
        reason = mod.unavailable_reason() if hasattr(mod, "unavailable_reason") else "not available"
        return BackendDevice(name, None, reason=reason)
    return BackendDevice(name, mod)


_DEVICES = {}

# What NDArray calls on every device (the table; ndarray_backend_numpy defines each name) and the
# extensions, looked up only when an operation needs them (the fused ones run as generic array
# operations on a device without them): both read from the registry in kernels.py.
KERNEL_TABLE = _kernels.TABLE
EXTENSIONS = _kernels.EXTENSIONS


def make_device(name, module):
    """A device running the kernels of ``module``, a backend written outside the package.

    ``module`` is a module (or any object) exporting the kernel table under the names and
    signatures of ``ndarray_backend_numpy`` (``KERNEL_TABLE``); ``NDArray(x, device=dev)``,
    the ops, autograd and ``nn`` then run on its kernels. The extensions (``EXTENSIONS``) may be
    missing until an operation needs one. A missing table entry, or a name one of the
    package's devices already has, is a ValueError.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"make_device: the name must be an identifier, got {name!r}")
    if name in ("cpu", "cpu_numpy", "cuda"):
        raise ValueError(f"make_device: {name!r} is the name of one of the package's devices")
    missing = [k for k in KERNEL_TABLE if not callable(getattr(module, k, None))]
    if missing:
        raise ValueError(f"make_device({name!r}): the backend lacks {', '.join(missing)} "
                         "(see ndarray_backend_numpy for what each one does)")
    return BackendDevice(name, module)


def _device(name, module):
    if name not in _DEVICES:
        _DEVICES[name] = _load(name, module)
    return _DEVICES[name]


def cpu_numpy():
    """The numpy reference backend."""
    return _device("cpu_numpy", "ndarray_backend_numpy")


def cpu():
    """The Cython + OpenMP backend (the default device)."""
    return _device("cpu", "ndarray_backend_cpu")


def cuda():
    """The cupy CUDA backend; a disabled device where cupy or a GPU is missing."""
    return _device("cuda", "ndarray_backend_cuda")


_warned_fallback = False


def default_device():
    """``cpu()``; falls back to ``cpu_numpy()`` with a warning if the extension is not built."""
    global _warned_fallback
    dev = cpu()
    if dev.enabled():
        return dev
    if not _warned_fallback:
        import warnings
        warnings.warn(
            f"needle_kernels: the Cython backend is unavailable ({dev.reason}); using cpu_numpy(). "
            "Build it with `pip install -e .` from the repository root.",
            RuntimeWarning,
            stacklevel=2,
        )
        _warned_fallback = True
    return cpu_numpy()


def all_devices():
    """Every device, enabled or not."""
    return [cpu(), cuda(), cpu_numpy()]


def set_num_threads(n):
    """Threads used by the OpenMP kernels of cpu() (default: OMP_NUM_THREADS or all cores)."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads: need at least 1 thread, got {n}")
    cpu()._require()
    cpu().mod.set_num_threads(int(n))


def get_num_threads():
    cpu()._require()
    return cpu().mod.get_num_threads()
