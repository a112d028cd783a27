"""The custom-operator lab's CUDA cells on the host stand-in for cupy.

The stand-in (``needle_kernels.backend_ndarray.cupy_host``, tested on its own in
``autotests/backend/test_cupy_host.py``) runs CUDA C on the CPU; ``coursekit.cuda.cupy_or_host()``
hands it out where cupy sees no GPU. Checked here:

* the choice between cupy and the stand-in;
* the lab executes as in ``test_lectures.py``, but its ``import cupy`` finds the stand-in:
  ``CUDA_SOURCE`` is compiled with g++ and every launch runs the kernels on the CPU, through the
  lab's own glue (``RawModule``, grids and blocks, ``np.int32`` arguments, ``asarray``/``asnumpy``
  copies, ``synchronize``). The lab's own checks then compare the kernels with numpy, with finite
  differences and with the library's autograd, and its training asserts that the loss curve
  matches numpy's.
"""
import os
import re
import shutil

import pytest

from nbhelpers import LECTURES, REPO, assert_ran_as_a_lecture, execute_notebook, kernel_env, output_text

LAB = LECTURES / "lab_custom_operator.ipynb"
FINAL_LOSS = re.compile(r"^\s*(.+?): final loss ([0-9.]+), test error ([0-9.]+)", re.M)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def execute_on_host(notebook, build_dir):
    """Execute ``notebook`` with the host stand-in as its ``cupy``; returns (notebook, seconds)."""
    shim = build_dir / "cupy_shim" / "cupy"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "import sys\nfrom needle_kernels.backend_ndarray import cupy_host\nsys.modules[__name__] = cupy_host\n")
    env = kernel_env({"CUPY_HOST_BUILD_DIR": str(build_dir)})
    env["PYTHONPATH"] = os.pathsep.join([str(shim.parent), env["PYTHONPATH"]])
    return execute_notebook(notebook, timeout=600, env=env)


# ---------------------------------------------------------------- choosing cupy or the stand-in

def test_cupy_or_host_falls_back_to_the_stand_in(monkeypatch):
    from coursekit import cuda

    monkeypatch.setenv(cuda.ENV_VAR, "host")
    cp = cuda.cupy_or_host()
    assert cuda.is_host(cp) and cp.__name__ == "needle_kernels.backend_ndarray.cupy_host"
    assert "host stand-in" in cuda.describe(cp)
    monkeypatch.delenv(cuda.ENV_VAR)
    cp = cuda.cupy_or_host()
    try:
        import cupy
        gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        gpu = False
    assert cuda.is_host(cp) is not gpu, cuda.describe(cp)


# ---------------------------------------------------------------- the lab on the stand-in


@pytest.mark.slow
@needs_gxx
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
