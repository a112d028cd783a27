"""scripts/gpu_check.sh, the GPU check run in one command on a machine with a GPU.

Here it must skip every section, exit 0 and say "no GPU": CUDA_VISIBLE_DEVICES is emptied so that
this holds on a GPU machine too (the full check takes minutes). The summary it prints on a GPU
is read from its logs by scripts/gpu_check.py; that parsing is checked on logs written in the
formats pytest and the two benchmarks print.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
SECTIONS = ["env", "build", "backend", "library", "notebooks", "bench_backend", "bench_models"]


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_every_section_skips(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="")
    env.pop("GPU_CHECK_DEVICE", None)
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("GPU CHECK: no GPU ("), proc.stdout
    assert (tmp_path / "summary.txt").read_text().strip() == last
    for section in SECTIONS:
        assert (tmp_path / f"{section}.log").read_text().startswith("skipped: no CUDA device"), section
    # what comes back from the GPU machine: at most 8 files
    assert len(list(tmp_path.iterdir())) <= 8


def bench_backend_log():
    lines = ["CUDA backend vs cupy (NVIDIA H100 80GB HBM3); ratio = cupy time / backend time",
             f"{'kernel':<34} {'unit':<7} {'cupy':>9} {'needle':>9} {'ratio':>8}", "-" * 72]
    for name, unit, a, b in [("matmul 1024 (cuBLAS)", "GFLOP/s", 40000.0, 9000.0),
                             ("matmul 4096 (cuBLAS)", "GFLOP/s", 50000.0, 22500.0),
                             ("ewise_add 16M", "GB/s", 2900.0, 2800.0),
                             ("sum first axis 4096x4096", "GB/s", 2000.0, 2500.0),
                             ("compact transpose 4096x4096", "GB/s", 1500.0, 1200.0)]:
        lines.append(f"{name:<34} {unit:<7} {a:>9.1f} {b:>9.1f} {b / a:>7.2f}x")
    return "\n".join(lines) + "\n"


def bench_models_log():
    lines = [f"\n{'benchmark':<48} {'needle_kernels':>15} {'reference':>18} {'ratio':>7}"]
    for name, tn, tt in [("ResNet9 fwd+bwd, batch 128", 30.0, 10.0),
                         ("ResNet9 training step (Adam), batch 128", 62.0, 20.0),
                         ("MLPResNet epoch, 8000 MNIST, batch 100", 900.0, 450.0)]:
        lines.append(f"{name:<48} {tn:>12.1f} ms {'torch':>8} {tt:>6.1f} ms {tn / tt:>6.2f}x")
    return "\n".join(lines) + "\n"


def test_summary_reads_the_gpu_logs(tmp_path, capsys):
    gpu_check = load_gpu_check()
    out, state = tmp_path / "out", tmp_path / "state"
    out.mkdir()
    state.mkdir()
    (state / "mode").write_text("cuda on NVIDIA H100 80GB HBM3\n")
    (state / "total").write_text("431\n")
    logs = {
        "env": "GPU: NVIDIA H100 80GB HBM3\n",
        "build": "CUDA kernels: 8/8 sources compiled by NVRTC\n",
        "backend": "FAILED autotests/backend/test_backend_contract.py::test_x[cuda] - AssertionError\n"
                   "======= 2 failed, 150 passed, 3 skipped, 1212 deselected in 80.12s (0:01:20) =======\n",
        # stopped at its limit: only the outcomes printed so far
        "library": "[gw0] [  1%] PASSED autotests/library/test_conv.py::test_a[cuda]\n"
                   "[gw1] [  2%] PASSED autotests/library/test_conv.py::test_b[cuda]\n"
                   "[gw2] [  3%] FAILED autotests/library/test_conv.py::test_c[cuda]\n",
        "notebooks": "NB lab1 TOTAL 14/14 points\nNBRESULT " + json.dumps(
            {"notebook": "lab1", "cells": 23, "errors": 0, "graded": 12, "points": 14.0, "max_points": 14.0,
             "cuda_points": 7.0, "cuda_max": 7.0}) + "\nNBRESULT " + json.dumps({"notebook": "hw3", "timeout": 90})
            + "\n",
        "bench_backend": bench_backend_log(),
        "bench_models": bench_models_log(),
    }
    status = {"env": "0 4", "build": "0 52", "backend": "1 81", "library": "124 200", "notebooks": "124 200",
              "bench_backend": "0 20", "bench_models": "0 40"}
    for name, text in logs.items():
        (out / f"{name}.log").write_text(text)
        (state / f"{name}.status").write_text(status[name] + "\n")
    rc = gpu_check.main(["summary", str(out), "--state", str(state)])
    line = capsys.readouterr().out.strip()
    assert rc == 1
    assert line.startswith("GPU CHECK [cuda on NVIDIA H100 80GB HBM3] | env ok 4s | build ok 52s, CUDA sources 8/8")
    assert "backend 150 passed, 2 failed, 3 skipped [FAIL rc=1 81s]" in line
    assert "library 2 passed, 1 failed (partial) [TIMEOUT after 200s]" in line
    assert "lab1 14/14 pts (CUDA 7/7); hw3 TIMEOUT" in line
    assert ("bench_backend (cupy/needle time) matmul1024=0.23x matmul4096=0.45x ewise_add=0.97x "
            "sum_first_axis=1.25x compact_transpose=0.80x [ok 20s]") in line
    assert "bench_models (needle/torch time) resnet9_fwd_bwd=3.00x resnet9_step=3.10x mlp_epoch=2.00x" in line
    assert line.endswith("total 431s")
