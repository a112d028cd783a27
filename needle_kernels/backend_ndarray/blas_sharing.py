"""numpy's OpenBLAS and needle_kernels' kernels on one set of threads.

numpy's OpenBLAS (pthreads build) has a thread pool of its own whose workers spin
after each call; needle_kernels' kernels run on libgomp's team. A notebook alternates
the two all the time, and a kernel started right after a numpy product found
OpenBLAS's workers on its cores and waited for time slices
(``benchmarks/bench_backend.py --only beside`` prints the difference). OpenBLAS 0.3.27
and later let the caller run its parallel jobs (``openblas_set_threads_callback_function``):
:func:`share_blas_threads` hands it the extension's C function that runs them on libgomp's
team, so both libraries take turns on the same threads.

It is done when the Cython backend loads, for every pthreads OpenBLAS loaded then
(numpy's; call :func:`share_blas_threads` again after importing another, such as
scipy's). ``NEEDLE_SHARE_BLAS_THREADS=0`` leaves OpenBLAS its own pool. In a forked
child both go back to what survives fork: OpenBLAS its own pool (its fork handler
restarts it) and the kernels one thread.
"""
import ctypes
import os

import threadpoolctl

# The setter's name in the builds numpy and scipy ship (their symbols are renamed) and
# in a plain libopenblas.
_SETTER_NAMES = (
    "scipy_openblas_set_threads_callback_function64_",
    "scipy_openblas_set_threads_callback_function",
    "openblas_set_threads_callback_function",
)

_setters = {}  # filepath -> the library's setter, or None where it has none
_sharing = {}  # filepath -> whether its jobs run on needle_kernels' threads now


def _setter(filepath):
    lib = ctypes.CDLL(filepath)  # already loaded: the same handle, no second copy
    for name in _SETTER_NAMES:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_void_p]
            fn.restype = None
            return fn
    return None


def blas_libraries():
    """The BLAS libraries loaded in this process, as threadpoolctl describes them, each with
    ``shares_threads``: whether its parallel jobs run on needle_kernels' threads."""
    libs = [lib for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]
    for lib in libs:
        lib["shares_threads"] = _sharing.get(lib["filepath"], False)
    return libs


def share_blas_threads(enable=True):
    """Run the parallel jobs of every loaded pthreads OpenBLAS on needle_kernels' threads
    (``enable=False``: give each its own pool back). Returns :func:`blas_libraries`.

    An OpenBLAS older than 0.3.27 has no callback and keeps its pool; one built with
    OpenMP already runs on an OpenMP runtime and is left alone."""
    from . import ndarray_backend_cpu as cpu

    callback = cpu.blas_threads_callback() if enable else None
    paths = [lib["filepath"] for lib in threadpoolctl.threadpool_info()
             if lib["internal_api"] == "openblas" and lib.get("threading_layer") == "pthreads"]
    for path in paths:
        if path not in _setters:
            _setters[path] = _setter(path)
        if _setters[path]:
            _setters[path](callback)
            _sharing[path] = enable
    return blas_libraries()


def _after_fork_in_child():
    from . import ndarray_backend_cpu as cpu

    cpu.after_fork_in_child()
    for setter in _setters.values():
        if setter:
            setter(None)
    _sharing.clear()


def share_on_load():
    """What the Cython backend calls as it loads."""
    os.register_at_fork(after_in_child=_after_fork_in_child)
    if os.environ.get("NEEDLE_SHARE_BLAS_THREADS", "1") != "0":
        share_blas_threads()
