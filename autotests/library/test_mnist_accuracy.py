"""End to end: ``scripts/mnist_accuracy.py`` reaches the expected test accuracy on real MNIST.

Runs the script (8,000 train / 2,000 test images of MNIST t10k) in a
subprocess with ``--json`` and checks the accuracies of softmax regression
(numpy and Cython, which must agree), the two-layer MLP and MLPResNet.
Skipped unless the real MNIST t10k files are in the data directory
(``$NEEDLE_DATA_DIR``; ``autotests/conftest.py`` points it at
``../shared/data`` when that sits beside the checkout).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from needle_kernels.data import paths

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "mnist_accuracy.py"
N_TEST = 2000

pytestmark = pytest.mark.slow


def _real_mnist_dir():
    root = paths.data_dir()  # $NEEDLE_DATA_DIR, else the default cache
    missing = [p for p in paths.mnist_paths("t10k", root) if not p.is_file()]
    if missing:
        pytest.skip(f"real MNIST t10k files not in the data directory ({missing[0]} missing; "
                    f"set {paths.ENV_VAR} or run `{paths.fetch_command('mnist')}`)")
    return root


@pytest.fixture(scope="module")
def summary():
    root = _real_mnist_dir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env[paths.ENV_VAR] = str(root)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--data-dir", str(root), "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"script failed:\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("{"), f"no JSON summary at the end of:\n{proc.stdout}"
    data = json.loads(lines[-1])
    data["stdout"] = proc.stdout
    return data


def test_uses_real_mnist(summary):
    assert summary["source"] == "t10k", summary["stdout"]
    assert "real MNIST" in summary["stdout"]
    assert summary["n_test"] == N_TEST


def test_softmax_regression_accuracy(summary):
    acc = summary["accuracy"]
    assert acc["softmax_numpy"] >= 0.88, summary["stdout"]
    assert acc["softmax_cython"] >= 0.88, summary["stdout"]


def test_numpy_and_cython_softmax_agree(summary):
    acc = summary["accuracy"]
    # Same SGD in float32 either way: parameters equal to rounding, at most one test image flips.
    assert summary["max_theta_diff"] < 1e-4, summary["stdout"]
    assert abs(acc["softmax_numpy"] - acc["softmax_cython"]) <= 1 / N_TEST + 1e-12, summary["stdout"]


@pytest.mark.parametrize("model", ["mlp", "mlp_resnet"])
def test_mlp_accuracy(summary, model):
    assert summary["accuracy"][model] >= 0.93, summary["stdout"]


def test_human_readable_table_printed(summary):
    out = summary["stdout"]
    assert "test acc" in out
    for name in summary["names"].values():
        assert name in out
