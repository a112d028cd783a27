"""Fixtures shared by the library tests.

``device`` runs a test on every device of the selected array API:
``NEEDLE_BACKEND=nd`` (default): ``cpu_numpy()``, ``cpu()`` and ``cuda()``
(marked ``gpu``, skipped where it is disabled); ``NEEDLE_BACKEND=np``: the one
numpy ``cpu()``.
"""
import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.backend_selection import BACKEND


def _device_params():
    if BACKEND == "np":
        return [pytest.param(ndl.cpu(), id="np")]
    cuda = ndl.cuda()
    return [
        pytest.param(ndl.cpu_numpy(), id="cpu_numpy"),
        pytest.param(ndl.cpu(), id="cpu"),
        pytest.param(
            cuda,
            id="cuda",
            marks=[pytest.mark.gpu, pytest.mark.skipif(not cuda.enabled(), reason="no CUDA device (cupy + GPU)")],
        ),
    ]


DEVICES = _device_params()

# comparisons between NDArray devices (and devices of a backend of one's own) have nothing to
# compare in numpy mode
collect_ignore = ["test_models_devices.py", "test_fused_fallback.py"] if BACKEND == "np" else []


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _seed_numpy():
    # Every test starts from the same global RNG state: init and devices draw from it.
    np.random.seed(0)
    yield
