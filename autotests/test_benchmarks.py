"""benchmarks/bench_models.py runs: its table of rows, and --separate-processes end to end.

Nothing here is timed; the runs are the cheapest rows with one timing each. The script runs in
a process of its own, as it is run by hand: it chooses OpenMP settings and the order in which
torch and needle_kernels load before importing them, which a test process has already done.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_models.py"
sys.path.insert(0, str(REPO))

from benchmarks.machine import cpu_model  # noqa: E402

# the --only names that scripts/gpu_check.sh, the READMEs and people's habits use
ROW_KEYS = ["resnet9", "mlp", "lstm", "ptb", "transformer", "conv", "matmul", "overhead", "memory"]
RATIO = re.compile(r"\s\d+\.\d\dx(\s|$)")


def run(args, env=None, timeout=120):
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def table_line(out, title):
    return next(line for line in out.splitlines() if line.startswith(title))


def test_the_table_rows_are_the_only_choices():
    # argparse keeps an option's choices only on its action
    listing = run(["-c", "import json, sys; sys.path.insert(0, 'benchmarks'); import bench_models as b; "
                         "only = b.parser()._option_string_actions['--only']; "
                         "print(json.dumps([[r.key for r in b.ROWS], only.choices]))"])
    keys, choices = json.loads(listing.strip().splitlines()[-1])
    assert list(dict.fromkeys(keys)) == ROW_KEYS
    assert list(choices) == ROW_KEYS


def test_separate_processes_prints_the_machine_and_ratios():
    # numpy is the matmul row's reference, so it has a ratio with or without torch
    out = run([str(SCRIPT), "--separate-processes", "--only", "matmul", "--repeat", "1"])
    assert f"cpu: {cpu_model()}, " in out
    assert "needle_kernels cpu backend: " in out and "numpy " in out
    assert "min-max" in out
    assert RATIO.search(table_line(out, "matmul 256x256 (NDArray vs numpy)")), out


def test_a_smaller_vocabulary_for_the_language_models():
    out = run([str(SCRIPT), "--separate-processes", "--only", "transformer", "--repeat", "1", "--vocabulary", "50"])
    assert "language models with a vocabulary of 50 words" in out
    assert re.search(r"\d ms", table_line(out, "Transformer LM training step, seq 32 x batch 16"))
    bad = subprocess.run([sys.executable, str(SCRIPT), "--vocabulary", "1"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert bad.returncode != 0 and "--vocabulary must be at least 2, got 1" in bad.stderr


def test_without_torch_the_needle_column_still_runs(tmp_path):
    # a torch that fails to import, first on the path of the script and of the processes it starts
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    out = run([str(SCRIPT), "--separate-processes", "--only", "overhead", "--repeat", "1"], env=env)
    assert "torch not installed" in out
    line = table_line(out, "chain of 1000 ops on (4,4), fwd+bwd")
    assert re.search(r"\d ms\s+-\s+-\s", line), line


def test_bench_blocking_prints_its_grid_and_restores_the_blocks():
    out = run([str(REPO / "benchmarks" / "bench_blocking.py"), "--sizes", "96", "--kc", "64,128", "--mc", "48",
               "--band", "128", "--rows", "16,64", "--depth", "20", "--width", "30", "--repeats", "1"])
    assert "needle_kernels cpu backend: tuned for " in out
    assert re.search(r"^\s+64\s+48\s+\d+\.\d\s+\d+\.\d$", out, re.MULTILINE), out
    assert re.search(r"^best: kc (64|128), mc 48 ", out, re.MULTILINE), out
    assert re.search(r"^band\s+128:\s+\d+\.\d$", out, re.MULTILINE), out
    assert "direct kernel (B read in place) or packed, m x 20 x 30, GFLOP/s" in out
    for m in (16, 64):
        assert re.search(rf"^rows\s+{m}: direct\s+\d+\.\d\s+packed\s+\d+\.\d$", out, re.MULTILINE), out


def test_beside_numpy_prints_both_modes_and_the_direct_rule_both_ways():
    out = run([str(REPO / "benchmarks" / "bench_backend.py"), "--no-cuda", "--only", "beside", "--sizes", "64"],
              timeout=300)
    for pools in ("one pool", "two pools"):
        for n in (256, 1024):
            assert RATIO.search(table_line(out, f"needle matmul {n} after numpy's, {pools}")), out
            assert RATIO.search(table_line(out, f"numpy matmul {n} after needle's, {pools}")), out
    from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu

    rule = cpu.gemm_direct_rule()
    # the section exists where the CPU's tuning row sends products of many rows to the packed kernel
    assert ("Direct kernel (B read in place) against packed" in out) == bool(rule["rows"]), out
    if rule["rows"]:
        for p, taken in ((rule["narrow"], "direct"), (2 * rule["narrow"], "packed")):
            line = table_line(out, f"16384x576x{p} (GFLOP/s)")
            assert f" {taken} " in line and RATIO.search(line), out


def test_bench_stability_prints_phases_and_both_counts():
    out = run([str(REPO / "benchmarks" / "bench_stability.py"), "--size", "64", "--processes", "1", "--phases", "2"])
    assert re.search(r"^phases below 70% of the best \(\d+\.\d\): \d of 2$", out, re.MULTILINE), out
    if len(os.sched_getaffinity(0)) > 1:
        assert re.search(r"^phases where both processes ran below 70% of their best, at the same time: \d of 2$",
                         out, re.MULTILINE), out
