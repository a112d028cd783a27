"""The packed matmul's speed over a grid of cache blocks, to fill in a CPU family's row of
``needle_kernels/backend_ndarray/cpu_tuning.py``:

    python benchmarks/bench_blocking.py                 # kc x mc grid at 512, 1024, 2048
    python benchmarks/bench_blocking.py --sizes 1024 --kc 192,256,384 --mc 96,192

Prints the machine, the row cpu_tuning picked and, per (kc, mc), GFLOP/s at each size
(best of --repeats calls) and their geometric mean; the best pair last (every size through
the packed kernel). Then the band width of products with few rows (64 x n x n: a batch
times a wide layer), and the direct kernel, reading B in place, against the packed one
by rows of A (m x 100 x 400 by default, an LSTM's gates; a row's direct_rows is the fewest
rows from which the packed one wins). On a shared machine run it more than once: only a
choice that wins every run is worth a row.
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.machine import describe  # noqa: E402


def ints(text):
    return [int(v) for v in text.split(",")]


def rate(cpu, m, n, p, repeats):
    rng = np.random.default_rng(0)
    a, b, o = cpu.Array(m * n), cpu.Array(n * p), cpu.Array(m * p)
    cpu.from_numpy(rng.standard_normal(m * n, dtype=np.float32), a)
    cpu.from_numpy(rng.standard_normal(n * p, dtype=np.float32), b)
    cpu.matmul(a, b, o, m, n, p)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        cpu.matmul(a, b, o, m, n, p)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * n * p / best / 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=ints, default=[512, 1024, 2048], help="square matmul sizes")
    p.add_argument("--kc", type=ints, default=[128, 192, 256, 384, 512])
    p.add_argument("--mc", type=ints, default=[96, 192, 288, 384])
    p.add_argument("--band", type=ints, default=[256, 512, 1024, 2048])
    p.add_argument("--rows", type=ints, default=[64, 128, 256, 384, 512, 1024],
                   help="rows of A for the direct kernel against the packed one")
    p.add_argument("--depth", type=int, default=100, help="depth of those products (default: an LSTM's hidden size)")
    p.add_argument("--width", type=int, default=400, help="columns of those products (default: its four gates)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)

    from needle_kernels.backend_ndarray import cpu_tuning
    from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu

    for line in describe():
        print(line)
    tuned = cpu.gemm_blocking()
    print(f"\npacked matmul, GFLOP/s (best of {args.repeats}); row picked: {cpu_tuning.applied()['family']} "
          f"(kc {tuned['kc']}, mc {tuned['mc']}, band {tuned['band']})")
    print(f"{'kc':>5} {'mc':>5} " + " ".join(f"{n:>8}" for n in args.sizes) + f" {'geomean':>8}")
    results = []
    direct_limit, direct_rows = cpu.set_gemm_direct_limit(0), cpu.set_gemm_direct_rows(0)
    try:
        for kc in args.kc:
            for mc in args.mc:
                cpu.set_gemm_blocking(kc, mc, tuned["band"])
                rates = [rate(cpu, n, n, n, args.repeats) for n in args.sizes]
                mean = float(np.exp(np.mean(np.log(rates))))
                results.append((mean, kc, mc))
                print(f"{kc:>5} {mc:>5} " + " ".join(f"{r:>8.1f}" for r in rates) + f" {mean:>8.1f}", flush=True)
        mean, kc, mc = max(results)
        print(f"best: kc {kc}, mc {mc} ({mean:.1f} GFLOP/s geometric mean)")

        n = args.sizes[-1]
        print(f"\nfew rows, 64 x {n} x {n}, GFLOP/s by band width (kc {tuned['kc']})")
        for band in args.band:
            cpu.set_gemm_blocking(tuned["kc"], tuned["mc"], band)
            print(f"band {band:>5}: {rate(cpu, 64, n, n, args.repeats):8.1f}", flush=True)
        cpu.set_gemm_blocking(**tuned)

        print(f"\ndirect kernel (B read in place) or packed, m x {args.depth} x {args.width}, GFLOP/s; this row's "
              f"direct_rows: {direct_rows or 'none'}")
        for m in args.rows:
            cpu.set_gemm_direct_limit(direct_limit)
            direct = rate(cpu, m, args.depth, args.width, args.repeats)
            cpu.set_gemm_direct_limit(0)
            packed = rate(cpu, m, args.depth, args.width, args.repeats)
            print(f"rows {m:>5}: direct {direct:8.1f}  packed {packed:8.1f}", flush=True)
    finally:
        cpu.set_gemm_blocking(**tuned)
        cpu.set_gemm_direct_limit(direct_limit)
        cpu.set_gemm_direct_rows(direct_rows)


if __name__ == "__main__":
    main()
