"""The custom-operator lab's CUDA kernels compile, also on machines without a GPU.

The lab's CUDA cells run only where cupy sees a GPU. Its kernel source, the
``CUDA_SOURCE`` string of the notebook, is compiled here to PTX with nvcc for
the architectures the backend supports, warnings as errors, and every kernel the
lab launches must be in it (skipped where nvcc is missing).
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nbhelpers import LECTURES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend"))
from test_cuda_sources import ARCHS, NVCC, _entries  # noqa: E402

LAB = LECTURES / "lab_custom_operator.ipynb"
LAUNCHED = ("rms_norm_forward", "rms_norm_backward")


def lab_cuda_source():
    """The string assigned to CUDA_SOURCE in the lab's code cells."""
    for cell in nbformat.read(LAB, as_version=4).cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%"):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CUDA_SOURCE" for t in node.targets)
                    and isinstance(node.value, ast.Constant)):
                return node.value.value
    raise AssertionError(f"no CUDA_SOURCE string in {LAB.name}")


def test_the_lab_launches_the_kernels_it_defines():
    source = lab_cuda_source()
    defined = set(re.findall(r'__global__\s+void\s+(\w+)', source))
    assert set(LAUNCHED) <= defined, f"kernels launched but not defined: {set(LAUNCHED) - defined}"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ARCHS)
def test_lab_kernels_compile_with_nvcc(tmp_path, arch):
    cu = tmp_path / "lab_linear.cu"
    cu.write_text(lab_cuda_source())
    proc = subprocess.run([NVCC, "--ptx", f"-arch={arch}", "-Werror", "all-warnings", str(cu), "-o", "-"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"nvcc failed on the lab's CUDA_SOURCE ({arch}):\n{proc.stderr}"
    missing = set(LAUNCHED) - set(_entries(proc.stdout))
    assert not missing, f"kernels missing from the PTX: {missing}"
