"""The CUDA backend without a GPU: kernel sources compile, the module degrades cleanly.

* Every ``cuda/*.cu`` compiles to PTX with nvcc for several architectures,
  warnings as errors (skipped where nvcc is missing), and with NVRTC, the
  compiler the backend really uses at run time (skipped where cupy's NVRTC is
  missing).
* Every kernel the Python side launches exists in the PTX of its file, and
  the by-value view struct has the size the Python side packs.
* On a machine without cupy or without a GPU the module imports, says why
  it is unavailable, and kernels raise RuntimeError.
* The host-side logic (dimension merging, launch shapes) checked in Python.
"""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from needle_kernels.backend_ndarray import ndarray_backend_cuda as cu

SOURCES = cu.source_files()
ARCHS = ("sm_75", "sm_80", "sm_90")


def _nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if os.path.exists(candidate):
            return candidate
    return None


NVCC = _nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


def _ptx_with_nvcc(source, arch):
    cmd = [NVCC, "--ptx", "-std=c++17", f"-arch={arch}", "-Werror", "all-warnings",
           *cu.compile_defines(), source, "-o", "-"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"nvcc failed on {os.path.basename(source)} ({arch}):\n{proc.stderr}"
    return proc.stdout


def _entries(ptx):
    """Kernel name -> list of parameter declarations, from PTX text."""
    entries = {}
    for match in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)", ptx, flags=re.S):
        entries[match.group(1)] = [p.strip() for p in match.group(2).split(",") if p.strip()]
    return entries


def test_every_source_file_is_listed():
    names = sorted(os.path.basename(s) for s in SOURCES)
    assert names == sorted(cu.KERNELS), "each .cu file must appear in KERNELS and vice versa"


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=os.path.basename)
def test_source_compiles_with_nvcc(source, arch):
    entries = _entries(_ptx_with_nvcc(source, arch))
    missing = set(cu.KERNELS[os.path.basename(source)]) - set(entries)
    assert not missing, f"kernels launched from Python but not defined in {os.path.basename(source)}: {missing}"


@needs_nvcc
def test_view_struct_matches_host_layout():
    """The PTX parameter of compact's view has exactly the bytes the Python side packs."""
    entries = _entries(_ptx_with_nvcc(os.path.join(os.path.dirname(SOURCES[0]), "strided.cu"), "sm_80"))
    for kernel in ("compact", "ewise_setitem", "scalar_setitem"):
        view_param = entries[kernel][2]
        assert re.search(rf"\[{cu._VIEW_DTYPE.itemsize}\]$", view_param), (kernel, view_param)
    struct = cu._view_struct("test", (2, 3, 4), (12, 4, 1), 0)
    assert struct.dtype.itemsize == cu._VIEW_DTYPE.itemsize and struct.shape == (1,)


def _nvrtc_program():
    try:
        from cupy.cuda import compiler
        compiler._get_nvrtc_version()
        return compiler._NVRTCProgram
    except Exception as exc:  # cupy or its NVRTC library is missing
        pytest.skip(f"cupy's NVRTC is unavailable: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("source", SOURCES, ids=os.path.basename)
def test_source_compiles_with_nvrtc(source):
    """The inlined text, with the backend's options, through the run-time compiler."""
    program = _nvrtc_program()
    name = os.path.basename(source)
    text = cu._source(name)
    assert '#include "' not in text, "local headers must be inlined for NVRTC"
    options = cu._COMPILE_OPTIONS + ("-arch=compute_80", "--device-as-default-execution-space")
    ptx, _ = program(text, name, method="ptx").compile(options)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert set(cu.KERNELS[name]) <= set(_entries(ptx))


# ---------------------------------------------------------------- no GPU

no_gpu = pytest.mark.skipif(cu.is_available(), reason="a CUDA device is present")


@no_gpu
def test_unavailable_with_a_reason():
    assert cu.is_available() is False
    reason = cu.unavailable_reason()
    assert isinstance(reason, str) and len(reason) > 10
    assert "cupy" in reason or "CUDA" in reason


@no_gpu
def test_kernels_raise_runtime_error_without_gpu():
    with pytest.raises(RuntimeError, match="unavailable"):
        cu.Array(4)
    with pytest.raises(RuntimeError, match=re.escape(cu.unavailable_reason())):
        cu.ewise_add(None, None, None)
    with pytest.raises(RuntimeError, match="matmul"):
        cu.matmul(None, None, None, 2, 2, 2)
    with pytest.raises(RuntimeError, match="reduce_sum_axis"):
        cu.reduce_sum_axis(None, None, 1, 2, 3)


def test_imports_without_cupy():
    """A fresh interpreter where `import cupy` fails still imports the backend."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["cupy"] = None  # makes `import cupy` raise ImportError
        from needle_kernels.backend_ndarray import ndarray_backend_cuda as cu
        assert cu.is_available() is False
        print(cu.unavailable_reason())
        try:
            cu.fill(None, 1.0)
        except RuntimeError as exc:
            print(exc)
        """
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert proc.returncode == 0, proc.stderr
    reason, error = proc.stdout.strip().splitlines()
    assert "cupy is not installed" in reason and "pip install" in reason
    assert error.startswith("fill: the CUDA backend is unavailable")


def test_last_launch_before_any_launch():
    assert isinstance(cu.last_launch(), str)


# ---------------------------------------------------------------- host-side logic

@st.composite
def views(draw):
    """A random strided view: shape, strides (any sign, zero allowed) and the positions it visits."""
    ndim = draw(st.integers(0, 9))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(-12, 12), min_size=ndim, max_size=ndim)))
    # Sometimes make it row-major so merging has something to merge.
    if draw(st.booleans()):
        strides = tuple(int(np.prod(shape[k + 1:])) for k in range(ndim))
    return shape, strides


def _positions(shape, strides):
    idx = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), dtype=np.int64)
    return (np.asarray(strides, dtype=np.int64).reshape(-1, 1) * idx).sum(axis=0)


@given(views())
def test_simplify_view_keeps_positions_and_order(view):
    shape, strides = view
    sshape, sstrides = cu.simplify_view(shape, strides)
    assert len(sshape) <= len(shape)
    assert all(n > 1 for n in sshape)
    np.testing.assert_array_equal(_positions(tuple(sshape), tuple(sstrides)), _positions(shape, strides))


def test_simplify_view_merges_row_major_and_broadcast():
    assert cu.simplify_view((2, 3, 4), (12, 4, 1)) == ([24], [1])
    assert cu.simplify_view((5, 1, 7), (0, 99, 0)) == ([35], [0])
    assert cu.simplify_view((3, 4), (-4, -1)) == ([12], [-1])
    assert cu.simplify_view((3, 4), (1, 3)) == ([3, 4], [1, 3])  # a transpose does not merge
    assert cu.simplify_view((1, 1), (5, 7)) == ([], [])


def test_view_struct_rank_limit():
    # Nine dimensions that cannot merge (a permuted layout) exceed MAX_DIMS.
    shape = (2,) * 9
    strides = tuple(2 ** k for k in range(9))
    with pytest.raises(ValueError, match="at most 8"):
        cu._view_struct("compact", shape, strides, 0)
    # Nine row-major dimensions merge into one and are fine.
    row_major = tuple(2 ** (8 - k) for k in range(9))
    struct = cu._view_struct("compact", shape, row_major, 3)
    assert int(struct["ndim"][0]) == 1 and int(struct["shape"][0, 0]) == 512 and int(struct["offset"][0]) == 3


def test_grid_1d_caps_the_grid():
    assert cu.grid_1d(1) == ((1, 1, 1), (cu.THREADS, 1, 1))
    assert cu.grid_1d(cu.THREADS + 1)[0] == (2, 1, 1)
    assert cu.grid_1d(10 ** 12)[0] == (cu.MAX_BLOCKS, 1, 1)


def test_launch_geometry_comes_from_one_table():
    # the sources take every size from -D flags; none writes a number of its own
    defines = cu.compile_defines()
    assert f"-DNK_TILE_SIZE={cu.__tile_size__}" in defines
    for name, value in cu.LAUNCH_GEOMETRY.items():
        assert f"-D{name}={value}" in defines and f"-D{name}={value}" in cu._COMPILE_OPTIONS
    assert (cu.THREADS, cu._MATMUL_BLOCK, cu._MATMUL_THREADS) == (
        cu.LAUNCH_GEOMETRY["NK_THREADS"], cu.LAUNCH_GEOMETRY["NK_MATMUL_BLOCK"], cu.LAUNCH_GEOMETRY["NK_MATMUL_THREADS"])
    assert cu._MIDDLE_BLOCK[:2] == (cu.LAUNCH_GEOMETRY["NK_MIDDLE_LANES"], cu.LAUNCH_GEOMETRY["NK_MIDDLE_ROWS"])
    sized = re.compile(r"^#define\s+(\w+)\s+\d+", re.M)
    for source in SOURCES + [os.path.join(os.path.dirname(SOURCES[0]), "common.cuh")]:
        text = open(source).read()
        numbered = [m.group(1) for m in sized.finditer(text)]
        assert not [n for n in numbered if n.startswith("NK_") or n in
                    ("BLOCK_M", "BLOCK_N", "THREADS", "MIDDLE_LANES", "MIDDLE_ROWS")], (source, numbered)
