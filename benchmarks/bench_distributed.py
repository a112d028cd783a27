"""Scaling of a data-parallel training epoch over MPI: 1 process against 2 (or more).

    python benchmarks/bench_distributed.py [--procs 1 2] [--threads 1] [--repeat 3]

Each run starts ``mpiexec -n P`` on this script's ``--worker`` mode: an MLP (784 -> 256 ->
256 -> 10, Adam) trains one epoch over 8,000 MNIST images (real ones when the data
directory has them) with a global batch of 256, split evenly over the P ranks, which
average their gradients with bucketed Allreduce. Every process runs ``--threads`` OpenMP
threads, so P processes use P x threads cores. The epoch time is rank 0's, the median
of ``--repeat`` epochs after one warm-up; speed-up = time(1) / time(P).
"""
import argparse
import os
import shutil
import subprocess
import sys
import time


def worker(repeat):
    import numpy as np

    import needle_kernels as ndl
    from needle_kernels import distributed, nn

    ctx = distributed.init()
    X, y, _, _ = ndl.data.load_mnist_split()
    data = distributed.ShardedDataset(ndl.data.NDArrayDataset(X, y), ctx)
    loader = ndl.data.DataLoader(data, batch_size=256 // ctx.world)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    distributed.broadcast_parameters(model.parameters(), ctx=ctx)
    opt = distributed.DistributedOptimizer(ndl.optim.Adam(model.parameters(), lr=1e-3), ctx)
    loss_fn = nn.SoftmaxLoss()
    times = []
    for epoch in range(repeat + 1):
        ctx.barrier()
        t0 = time.perf_counter()
        for xb, yb in loader:
            opt.reset_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        ctx.barrier()
        times.append(time.perf_counter() - t0)
    if ctx.is_root:
        print(f"EPOCH {sorted(times[1:])[len(times[1:]) // 2]:.4f} LOSS {ctx.allreduce_mean(loss.numpy()):.4f}")
    else:
        ctx.allreduce_mean(loss.numpy())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.repeat)
    mpiexec = shutil.which("mpiexec", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    if mpiexec is None:
        sys.exit("mpiexec not found: pip install mpi4py mpich")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print(f"data-parallel epoch, 8,000 MNIST images, global batch 256, {args.threads} thread(s) per process")
    print(f"{'processes':>9} {'epoch s':>8} {'speed-up':>8} {'final loss':>10}")
    base = None
    for p in args.procs:
        out = subprocess.run([mpiexec, "-n", str(p), sys.executable, __file__, "--worker", "--repeat",
                              str(args.repeat)], capture_output=True, text=True, env=env, timeout=1800)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("EPOCH")), None)
        if out.returncode != 0 or line is None:
            sys.exit(f"mpiexec -n {p} failed:\n{out.stdout}\n{out.stderr}")
        _, seconds, _, loss = line.split()
        seconds = float(seconds)
        base = base or seconds
        print(f"{p:>9} {seconds:>8.3f} {base / seconds:>8.2f} {float(loss):>10.4f}")


if __name__ == "__main__":
    main()
