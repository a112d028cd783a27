"""Which cupy runs a notebook's CUDA cells: the real one on a GPU, the host stand-in elsewhere.

CUDA cells written against cupy (``RawModule``/``RawKernel``, ``asarray``/``asnumpy``/``empty``,
``cuda.Device().synchronize()``) run unchanged on both, so they can be graded on any machine::

    from coursekit.cuda import cupy_or_host, describe
    cp = cupy_or_host()
    print("CUDA runs on:", describe(cp))

``COURSEKIT_CUDA`` overrides the choice: ``host`` always takes the stand-in (to check a notebook on
a GPU machine as a CPU-only grader would), ``gpu`` refuses to fall back. The stand-in is the
package's ``needle_kernels.backend_ndarray.cupy_host``, which its CUDA backend is tested on too.
"""
import os

# is_host(cp): True when cp is the host stand-in rather than cupy on a GPU
from needle_kernels.backend_ndarray.cupy_host import is_stand_in as is_host

ENV_VAR = "COURSEKIT_CUDA"

_why_host = None


def _real_cupy():
    """(cupy, None) when cupy imports and sees a usable GPU, else (None, why not)."""
    try:
        import cupy
    except ImportError:
        return None, "cupy is not installed"
    except Exception as exc:  # a broken install
        return None, f"cupy failed to import: {type(exc).__name__}: {exc}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver
        return None, f"cupy sees no CUDA driver: {type(exc).__name__}: {exc}"
    if count <= 0:
        return None, "cupy sees no GPU"
    return cupy, None


def cupy_or_host():
    """Real cupy when ``cupy.cuda.runtime.getDeviceCount() > 0``, else the package's host stand-in."""
    global _why_host
    choice = os.environ.get(ENV_VAR, "").strip().lower()
    if choice not in ("", "auto", "gpu", "host"):
        raise ValueError(f"{ENV_VAR}={choice!r}: use 'gpu', 'host' or leave it unset")
    if choice != "host":
        cupy, why = _real_cupy()
        if cupy is not None:
            _why_host = None
            return cupy
        if choice == "gpu":
            raise RuntimeError(f"{ENV_VAR}=gpu, but {why}")
        _why_host = why
    else:
        _why_host = f"{ENV_VAR}=host"
    from needle_kernels.backend_ndarray import cupy_host
    return cupy_host


def describe(cp):
    """One line naming what runs the kernels: the GPU, or the host stand-in and why it was chosen."""
    if is_host(cp):
        why = f" ({_why_host})" if _why_host else ""
        return f"host stand-in for cupy: kernels compiled with g++ and run on the CPU{why}"
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    return f"GPU {name} (cupy {cp.__version__})"
