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


from figures import FIGURES_ENV, pytest_configure, pytest_terminal_summary  # noqa: E402,F401
