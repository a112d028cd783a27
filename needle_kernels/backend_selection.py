"""Pick the array API that Tensors compute with, from ``NEEDLE_BACKEND``.

* ``nd`` (default): ``cached_data`` is a ``backend_ndarray.NDArray`` and the
  devices are the NDArray backends (``cpu()`` Cython + OpenMP, ``cpu_numpy()``,
  ``cuda()``).
* ``np``: ``cached_data`` is a ``numpy.ndarray`` (float32 by default; a floating
  array keeps its dtype, so float64 stays float64); one CPU device.

The choice is made once, at import time, because every op is written against
``array_api`` and must not branch on the mode in its hot path.
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
    )

    def device_of(array):
        """The device an array lives on."""
        return array.device

    def element_strides(array):
        """Strides of an array in elements."""
        return tuple(array.strides)

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
        element_strides,
    )

    NDArray = numpy.ndarray

    def device_of(array):
        """The device an array lives on (numpy mode has only ``cpu()``)."""
        return cpu()

else:
    raise ImportError(
        f"NEEDLE_BACKEND={BACKEND!r} is not a known array API: use 'nd' (the NDArray "
        "backends, the default) or 'np' (plain numpy arrays)"
    )
