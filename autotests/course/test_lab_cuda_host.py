"""The custom-operator lab's CUDA cells run, also on machines without a GPU.

The lab executes here as in ``test_lectures.py``, but its kernel finds the host stand-in for cupy
(``cupy_host/cupy``) first on its path: ``CUDA_SOURCE`` is compiled with g++ and every launch runs
the kernels on the CPU, through the lab's own glue (``RawModule``, grids and blocks, ``np.int32``
arguments, ``asarray``/``asnumpy`` copies, ``synchronize``). The lab's own checks then compare the
kernels with numpy, with finite differences and with the library's autograd, and its training
asserts that the loss curve matches numpy's. The stand-in's docstring says what it cannot check.
"""
import os
import re
import shutil
from pathlib import Path

import pytest

from nbhelpers import LECTURES, REPO, assert_ran_as_a_lecture, execute_notebook, kernel_env, output_text

LAB = LECTURES / "lab_custom_operator.ipynb"
CUPY_HOST = Path(__file__).resolve().parent / "cupy_host"
FINAL_LOSS = re.compile(r"^\s*(.+?): final loss ([0-9.]+), test error ([0-9.]+)", re.M)


def execute_on_host(notebook, build_dir):
    """Execute ``notebook`` with the host stand-in as its ``cupy``; returns (notebook, seconds)."""
    env = kernel_env({"CUPY_HOST_BUILD_DIR": str(build_dir)})
    env["PYTHONPATH"] = os.pathsep.join([str(CUPY_HOST), env["PYTHONPATH"]])
    return execute_notebook(notebook, timeout=600, env=env)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_lab_cuda_cells_run_on_the_host_stand_in(tmp_path, record_property):
    nb, seconds = execute_on_host(LAB, tmp_path)
    record_property("seconds", round(seconds, 1))
    print(f"{LAB.relative_to(REPO)} executed with the host stand-in for cupy in {seconds:.1f}s")
    text = output_text(nb)

    assert "CUDA device: host stand-in (g++)" in text, "the lab did not pick up the host stand-in for cupy"
    assert "skipped (no GPU)" not in text and "No GPU" not in text, "a CUDA cell was skipped"
    # the kernels against numpy and finite differences (cell 4), then against the library's autograd
    assert "CUDA kernels agree with numpy" in text
    assert re.search(r"cuda \(via host\): forward and gradients match the library's autograd", text)
    # training: the lab asserts every loss curve equals numpy's; the printed final losses say so too
    finals = {name: float(loss) for name, loss, _ in FINAL_LOSS.findall(text)}
    assert "cuda (via host)" in finals, f"no CUDA training run in the output: {finals}"
    assert abs(finals["cuda (via host)"] - finals["numpy"]) <= 0.01, finals
    assert re.search(r"CUDA \(naive kernels\):\s+[0-9.]+ ms", text), "no CUDA timing row"

    assert_ran_as_a_lecture(f"{LAB.stem} with the host stand-in", nb, seconds)
