"""`hub/launch.py --threads-per-user`: what each user's kernels compute on, checked before the hub
starts (the system test, test_hub_system.py, reads it from inside a student's kernel)."""
import sys

import pytest

from hub_testkit import REPO

sys.path.insert(0, str(REPO / "hub"))
import launch  # noqa: E402


def test_a_negative_thread_count_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as stop:
        launch.main(["--threads-per-user", "-2", "--prepare-only"])
    assert stop.value.code == 2
    assert "--threads-per-user: -2 is not a number of threads" in capsys.readouterr().err
