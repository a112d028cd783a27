"""Pick the array API that Tensors compute with, from ``NEEDLE_BACKEND``.

* ``nd`` (default): ``cached_data`` is a ``backend_ndarray.NDArray`` and the
  devices are the NDArray backends (``cpu()`` Cython + OpenMP, ``cpu_numpy()``,
  ``cuda()``).
* ``np``: ``cached_data`` is a ``numpy.ndarray`` (float32 by default; a floating
  array keeps its dtype, so float64 stays float64); one CPU device.

The choice is made once, at import time, and only here: every op, module and
optimizer is written against ``array_api`` (both array APIs offer the same
functions, fused optimizer updates and col2im included), so no code above it
tests the mode.
"""
import os

BACKEND = os.environ.get("NEEDLE_BACKEND", "nd").strip().lower() or "nd"

if BACKEND == "nd":
    from . import backend_ndarray as array_api
    from .backend_ndarray import (
        NDArray,
        BackendDevice as Device,
        all_devices,
        cpu,
        cpu_numpy,
        cuda,
        default_device,
        device_of,
        element_strides,
    )

elif BACKEND == "np":
    import numpy

    from . import backend_numpy as array_api
    from .backend_numpy import (
        NumpyDevice as Device,
        all_devices,
        cpu,
        cpu_numpy,
        cuda,
        default_device,
        device_of,
        element_strides,
    )

    NDArray = numpy.ndarray

else:
    raise ImportError(
        f"NEEDLE_BACKEND={BACKEND!r} is not a known array API: use 'nd' (the NDArray "
        "backends, the default) or 'np' (plain numpy arrays)"
    )
