"""Time a traced element-wise chain unfused (one backend op per node) and fused (one generated kernel).

The chain is 8 element-wise ops on two arrays of ``--size`` floats:

    relu(x * 1.5 + 0.25) * y -> sigmoid -> - 0.5 -> tanh -> * 2

traced with ``needle_kernels.compile.trace``, fused with ``optimize``, and
both graphs run on each CPU device (``cpu_numpy()``, ``cpu()``; ``cuda()``
where a GPU exists; the one numpy device with ``NEEDLE_BACKEND=np``). Prints
the best of ``--repeats`` calls of each and the ratio unfused / fused (above
1: fusion is faster), plus numpy evaluating the same chain for reference:

    python benchmarks/bench_fusion.py                  # 1M floats
    python benchmarks/bench_fusion.py --size 16777216 --repeats 20
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import needle_kernels as ndl  # noqa: E402
from needle_kernels.backend_selection import BACKEND  # noqa: E402
from needle_kernels.compile import optimize, trace  # noqa: E402


def chain(x, y):
    z = ndl.relu(x * 1.5 + 0.25)
    return ndl.tanh(ndl.sigmoid(z * y) - 0.5) * 2.0


def numpy_chain(x, y):
    z = np.maximum(x * np.float32(1.5) + np.float32(0.25), 0)
    return np.tanh((np.tanh(z * y * np.float32(0.5)) + 1) * np.float32(0.5) - np.float32(0.5)) * np.float32(2)


def best(fn, repeats):
    fn()  # warm-up: builds the kernel, fills caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    rng = np.random.RandomState(0)
    xs, ys = rng.randn(args.size).astype(np.float32), rng.randn(args.size).astype(np.float32)
    numpy_s = best(lambda: numpy_chain(xs, ys), args.repeats)
    print(f"element-wise chain of 8 ops on {args.size} floats (NEEDLE_BACKEND={BACKEND}), best of {args.repeats}")
    print(f"{'device':<14}{'unfused ms':>12}{'fused ms':>10}{'ratio':>8}   (numpy: {numpy_s * 1e3:.2f} ms)")
    for device in ndl.all_devices():
        if not device.enabled():
            continue
        x = ndl.Tensor(xs, device=device, requires_grad=False)
        y = ndl.Tensor(ys, device=device, requires_grad=False)
        graph = trace(chain, x, y)
        fused = optimize(graph)
        # .numpy() waits for the result (a GPU runs asynchronously)
        unfused_s = best(lambda: graph(x, y).numpy(), args.repeats)
        fused_s = best(lambda: fused(x, y).numpy(), args.repeats)
        err = np.abs(fused(x, y).numpy() - graph(x, y).numpy()).max()
        print(f"{str(device):<14}{unfused_s * 1e3:>12.2f}{fused_s * 1e3:>10.2f}{unfused_s / fused_s:>7.1f}x"
              f"   (max difference {err:.1e})")
    print("\nthe fused graph:")
    print(fused)


if __name__ == "__main__":
    main()
