"""Memory of a training step with activation checkpointing, as the backend's allocator counts it.

    python benchmarks/bench_checkpoint.py [--depth 36] [--width 256] [--batch 256] [--device cpu]

A deep MLP (``depth`` blocks of Linear + ReLU) runs forward and backward plain, then
checkpointed in segments of K layers (``ndl.checkpoint``). The peak is the most bytes the
backend's allocator held during the step (``device.memory_stats()``), minus what was held
before it (weights, input); lecture 15's model says it falls from O(N) to O(N/K + K),
lowest near K = sqrt(N). The time column shows the price: one more forward per segment.
"""
import argparse
import math
import time

import numpy as np

import needle_kernels as ndl
from needle_kernels import nn


def step(blocks, x, segment):
    x.device.reset_peak_memory()
    base = x.device.memory_stats()["live_bytes"]
    t0 = time.perf_counter()
    h = x
    for i in range(0, len(blocks), segment or len(blocks)):
        group = nn.Sequential(*blocks[i:i + (segment or len(blocks))])
        h = ndl.checkpoint(group, h) if segment else group(h)
    h.sum().backward()
    seconds = time.perf_counter() - t0
    for p in [p for b in blocks for p in b.parameters()]:
        p.grad = None
    return x.device.memory_stats()["peak_bytes"] - base, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=36)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--device", choices=["cpu", "cpu_numpy", "cuda"], default="cpu")
    args = parser.parse_args()
    device = getattr(ndl, args.device)()
    np.random.seed(0)
    blocks = [nn.Sequential(nn.Linear(args.width, args.width, device=device), nn.ReLU())
              for _ in range(args.depth)]
    x = ndl.Tensor(np.random.randn(args.batch, args.width).astype(np.float32), device=device)
    step(blocks, x, None)                                   # warm-up
    plain, plain_s = step(blocks, x, None)
    print(f"{args.depth} blocks of Linear({args.width}) + ReLU, batch {args.batch}, {device}: "
          f"peak bytes held by the allocator during forward + backward")
    print(f"{'segment K':>10} {'peak MB':>9} {'vs plain':>9} {'time ms':>8}")
    print(f"{'plain':>10} {plain / 2**20:>9.2f} {1.0:>9.2f} {plain_s * 1e3:>8.1f}")
    best = round(math.sqrt(args.depth))
    for k in sorted({2, 3, 4, best, 2 * best, args.depth // 2, args.depth}):
        peak, seconds = step(blocks, x, k)
        mark = "  <- sqrt(N)" if k == best else ""
        print(f"{k:>10} {peak / 2**20:>9.2f} {peak / plain:>9.2f} {seconds * 1e3:>8.1f}{mark}")


if __name__ == "__main__":
    main()
