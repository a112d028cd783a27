"""Whether a matmul's speed is stable, and if not, whether the cause is in this process.

    python benchmarks/bench_stability.py            # 256 x 256, 4 processes of 8 phases
    python benchmarks/bench_stability.py --size 512 --processes 6

A phase is 200 back-to-back calls followed by a pause (the OpenMP threads go to sleep and
wake again, as between a notebook's cells); its figure is the median GFLOP/s. First, the
backend's default threads, each process fresh: how many phases run well below the best one.
Then one single-threaded process pinned to each of two CPUs, both at once: if they slow down
in the same phases, something outside both processes took the CPUs (on a virtual machine, the
host placing both virtual CPUs on one core), not the kernel's thread split, its buffers'
alignment or its memory.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SLOW = 0.7  # a phase below this fraction of the best phase counts as slow


def phases(n, count):
    """GFLOP/s medians of `count` phases of 200 matmuls of n x n x n in this process."""
    from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu

    rng = np.random.default_rng(0)
    a, b, c = cpu.Array(n * n), cpu.Array(n * n), cpu.Array(n * n)
    cpu.from_numpy(rng.standard_normal(n * n, dtype=np.float32), a)
    cpu.from_numpy(rng.standard_normal(n * n, dtype=np.float32), b)
    out = []
    for _ in range(count):
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            cpu.matmul(a, b, c, n, n, n)
            times.append(time.perf_counter() - t0)
        out.append(2.0 * n**3 / float(np.median(times)) / 1e9)
        time.sleep(0.2)
    return out


def start(args, threads, cpu=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if threads else dict(os.environ)
    command = [sys.executable, os.path.abspath(__file__), "--child", "--size", str(args.size),
               "--phases", str(args.phases)]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def result(proc):
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"a measuring process failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--phases", type=int, default=8)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        print(json.dumps(phases(args.size, args.phases)))
        return

    from benchmarks.machine import describe

    for line in describe():
        print(line)
    n = args.size
    print(f"\nmatmul {n}x{n}x{n}, default threads: GFLOP/s per phase (median of 200 calls), one process per line")
    runs = [result(start(args, None)) for _ in range(args.processes)]
    for run in runs:
        print("  " + " ".join(f"{r:6.1f}" for r in run))
    best = max(max(run) for run in runs)
    slow = sum(r < SLOW * best for run in runs for r in run)
    total = sum(len(run) for run in runs)
    print(f"phases below {SLOW:.0%} of the best ({best:.1f}): {slow} of {total}")

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("\n(one CPU: no concurrent single-threaded processes to compare)")
        return
    print(f"\none thread each, pinned to CPUs {cpus[0]} and {cpus[1]}, both at once: GFLOP/s per phase")
    together, pairs = 0, 0
    for _ in range(args.processes):
        procs = [start(args, 1, cpu) for cpu in cpus[:2]]
        first, second = (result(proc) for proc in procs)
        print("  " + " ".join(f"{x:5.1f}|{y:<5.1f}" for x, y in zip(first, second)))
        m1, m2 = max(first), max(second)
        together += sum(x < SLOW * m1 and y < SLOW * m2 for x, y in zip(first, second))
        pairs += len(first)
    print(f"phases where both processes ran below {SLOW:.0%} of their best, at the same time: {together} of {pairs}")


if __name__ == "__main__":
    main()
