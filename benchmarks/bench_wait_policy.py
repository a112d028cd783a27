"""How long idle OpenMP threads should spin: libgomp's default alone, briefly where processes share cores.

Runs the same four loops in a fresh process per OpenMP wait policy and
prints their times: many mid-sized element-wise kernels back to back (a
training step), numpy matmuls (OpenBLAS threads) alternating with
needle_kernels kernels as a notebook does, needle_kernels matmuls, and
kernels each after a millisecond of Python (a training step's ops between
two parallel kernels: only the kernels are timed). Then it runs the first and
third loops in two such processes at once, as two notebooks on one server or
two test workers do, and prints the slower process's times. Every row runs on
all cores but the last, which runs each process on one thread, as a class's hub
runs each user's kernels on a share of the cores (``hub/launch.py
--threads-per-user``).
Threads that sleep at once (PASSIVE) pay a wake-up per kernel, and threads
whose spin ends within the millisecond pay it in the fourth loop; threads that
spin long take the cores that numpy's OpenBLAS pool (where it keeps one:
``NEEDLE_SHARE_BLAS_THREADS=0``) and, above all, the other process's threads need.
The package sets no spin (but with OpenBLAS on a pool of its own), so a process
alone keeps libgomp's (the "alone" row); the hub and the test suite, which run
processes on the same cores, set 1000 (the "shared" row).

    python benchmarks/bench_wait_policy.py
"""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import needle_kernels.backend_ndarray as nd
dev = nd.cpu()
a = nd.array(np.random.rand(256 * 1024).astype(np.float32), device=dev)
b = a + 1
x = np.random.rand(512, 512).astype(np.float32)
A = nd.array(x, device=dev)

def best(f, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); f(); times.append(time.perf_counter() - start)
    return min(times) * 1e3

def adds():
    for _ in range(200):
        a + b

def mixed():
    for _ in range(50):
        x @ x
        a + b

def matmuls():
    for _ in range(20):
        A @ A

def after_python():
    kernels = 0.0
    for _ in range(100):
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:  # the interpreter busy, as between a step's kernels
            pass
        start = time.perf_counter(); a + b; kernels += time.perf_counter() - start
    return kernels * 1e3

if sys.argv[2:] == ["pair"]:
    print(f"{best(adds):9.1f} {best(matmuls):9.1f}")
else:
    print(f"{best(adds):9.1f} {best(mixed):9.1f} {best(matmuls):9.1f} {min(after_python() for _ in range(5)):9.1f}")
"""

POLICIES = [
    ("PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("GOMP_SPINCOUNT=1000 (shared)", {"GOMP_SPINCOUNT": "1000"}),
    ("GOMP_SPINCOUNT=10000", {"GOMP_SPINCOUNT": "10000"}),
    ("GOMP_SPINCOUNT=30000", {"GOMP_SPINCOUNT": "30000"}),
    ("GOMP_SPINCOUNT=100000", {"GOMP_SPINCOUNT": "100000"}),
    ("GOMP_SPINCOUNT=300000 (alone)", {"GOMP_SPINCOUNT": "300000"}),
    ("ACTIVE", {"OMP_WAIT_POLICY": "ACTIVE"}),
    # what a class's hub gives each user (hub/launch.py --threads-per-user): fewer threads than cores
    ("GOMP_SPINCOUNT=1000, 1 thread", {"GOMP_SPINCOUNT": "1000", "OMP_NUM_THREADS": "1"}),
]


def main():
    print(f"{'policy':32s} {'200 adds':>9s} {'np+nk x50':>9s} {'20 mm512':>9s} {'100 after':>9s}"
          f" {'adds, 2 processes':>18s} {'mm512, 2 processes':>19s}   (ms, best of 5)")
    for name, extra in POLICIES:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                                "OMP_NUM_THREADS")}
        env.update(extra)
        alone = subprocess.run([sys.executable, "-c", CHILD, str(REPO)], env=env, capture_output=True, text=True,
                               check=True)
        pair = [subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), "pair"], env=env, stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
        outputs = [p.communicate()[0] for p in pair]
        if any(p.returncode for p in pair):
            raise RuntimeError(f"a process of the pair under {name} failed")
        slower = [max(column) for column in zip(*([float(v) for v in out.split()] for out in outputs))]
        print(f"{name:32s}{alone.stdout.rstrip()} {slower[0]:18.1f} {slower[1]:19.1f}", flush=True)


if __name__ == "__main__":
    main()
