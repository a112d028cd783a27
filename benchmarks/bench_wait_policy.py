"""How long needle_kernels lets its idle OpenMP threads spin: GOMP_SPINCOUNT=100000 where numpy's
OpenBLAS runs on them, 10000 where it keeps a pool of its own.

Runs the same four loops in a fresh process per OpenMP wait policy and
prints their times: many mid-sized element-wise kernels back to back (a
training step), numpy matmuls (OpenBLAS threads) alternating with
needle_kernels kernels as a notebook does, needle_kernels matmuls, and
kernels each after a millisecond of Python (a training step's ops between
two parallel kernels: only the kernels are timed).
Threads that sleep at once (PASSIVE) pay a wake-up per kernel, and threads
whose spin ends within the millisecond pay it in the last loop; threads that
spin long take the cores numpy needs unless numpy's OpenBLAS runs its jobs on
needle_kernels' threads (``blas_sharing``, the default where OpenBLAS allows:
``NEEDLE_SHARE_BLAS_THREADS=0`` shows the loop without it).

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

print(f"{best(adds):9.1f} {best(mixed):9.1f} {best(matmuls):9.1f} {min(after_python() for _ in range(5)):9.1f}")
"""

POLICIES = [
    ("PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("GOMP_SPINCOUNT=10000 (own pool)", {"GOMP_SPINCOUNT": "10000"}),
    ("GOMP_SPINCOUNT=30000", {"GOMP_SPINCOUNT": "30000"}),
    ("GOMP_SPINCOUNT=100000 (shared)", {"GOMP_SPINCOUNT": "100000"}),
    ("GOMP_SPINCOUNT=300000 (libgomp)", {"GOMP_SPINCOUNT": "300000"}),
    ("ACTIVE", {"OMP_WAIT_POLICY": "ACTIVE"}),
]


def main():
    print(f"{'policy':32s} {'200 adds':>9s} {'np+nk x50':>9s} {'20 mm512':>9s} {'100 after':>9s}   (ms, best of 5)")
    # each child prints four right-aligned 9-wide columns
    for name, extra in POLICIES:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        env.update(extra)
        out = subprocess.run([sys.executable, "-c", CHILD, str(REPO)], env=env, capture_output=True, text=True, check=True)
        print(f"{name:32s}{out.stdout.rstrip()}")


if __name__ == "__main__":
    main()
