"""Suite-wide settings: hypothesis profiles and the data directory."""
import os
import pathlib

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile("thorough", max_examples=400, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
if "NEEDLE_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    # Tests use the real MNIST/PTB files when they sit beside the checkout.
    os.environ["NEEDLE_DATA_DIR"] = str(SHARED_DATA)


if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    # The suite's workers, and the notebook kernels and graders they start, compute on the same
    # cores at once: threads left spinning after a kernel (libgomp's default spin lasts
    # milliseconds) would keep the other processes' kernels waiting, so they sleep soon.
    os.environ["GOMP_SPINCOUNT"] = "1000"

from figures import FIGURES_ENV, pytest_configure, pytest_terminal_summary  # noqa: E402,F401
