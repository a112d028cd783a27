"""NK_DEBUG=1 prints one line per kernel call: name, sizes, threads or grid/block, time."""
import os
import re
import subprocess
import sys

import pytest

import needle_kernels.backend_ndarray as nd

SCRIPT = """
import numpy as np
import needle_kernels.backend_ndarray as nd
a = nd.array(np.ones((64, 32), dtype=np.float32), device=nd.{dev}())
(a @ a.permute((1, 0)).compact()).sum(axis=1)
"""


@pytest.mark.parametrize("dev", ["cpu_numpy", "cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_debug_lines_per_kernel(dev):
    if not getattr(nd, dev)().enabled():
        pytest.skip(f"{dev}() disabled: {getattr(nd, dev)().reason}")
    env = dict(os.environ, NK_DEBUG="1")
    res = subprocess.run([sys.executable, "-c", SCRIPT.format(dev=dev)], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[nk]")]
    names = [ln.split()[1] for ln in lines]
    for kernel in ("from_numpy", "compact", "matmul", "reduce_sum"):
        assert f"{dev}.{kernel}" in names, f"no debug line for {kernel}: {lines}"
    matmul = next(ln for ln in lines if f"{dev}.matmul " in ln)
    assert "Array[2048]" in matmul and " 64 32 64 " in matmul
    where = r"grid=\(\d+,\d+,\d+\) block=\(\d+,\d+,\d+\)" if dev == "cuda" else r"threads=\d+"
    assert re.search(where + r" \d+\.\d{3} ms$", matmul), matmul


def test_debug_off_prints_nothing():
    env = {k: v for k, v in os.environ.items() if k != "NK_DEBUG"}
    res = subprocess.run([sys.executable, "-c", SCRIPT.format(dev="cpu_numpy")], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "[nk]" not in res.stderr
