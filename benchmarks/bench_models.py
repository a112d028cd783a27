"""Training speed of whole models against PyTorch (CPU) with the same number of threads.

1. One training epoch of MLPResNet (784 -> 100, 3 blocks, Adam) on 8,000
   MNIST images (real when available, see ``ndl.data.load_mnist_split``).
2. Forward + backward of ResNet9 on a batch of 128 random 3x32x32 images.

Each measurement alternates needle_kernels and PyTorch runs and reports the
median, so load from other processes hits both alike. The ratio is
needle_kernels time / PyTorch time. Without torch only the needle_kernels
column is printed. ``--profile`` adds, for needle_kernels, the time spent in
each op's ``compute`` (forward and backward together) and in each backend
kernel.

    python benchmarks/bench_models.py [--threads N] [--repeat R] [--profile]

Both libraries run in this one process, each with its own OpenMP runtime
(torch ships its own libgomp). By default an OpenMP thread keeps spinning
for a while after a parallel region, so the idle runtime's threads take the
cores the busy one needs and both slow down several-fold on a small machine.
The script therefore sets ``OMP_WAIT_POLICY=PASSIVE`` unless the variable is
already set (it must be set before either runtime starts).
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import collections  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import needle_kernels as ndl  # noqa: E402
from needle_kernels.apps import mlp_resnet  # noqa: E402
from needle_kernels.apps.models import ResNet9  # noqa: E402

try:
    import torch
except ImportError:  # the torch columns are skipped
    torch = None


def data_root():
    if os.environ.get("NEEDLE_DATA_DIR"):
        return Path(os.environ["NEEDLE_DATA_DIR"])
    shared = REPO.parent / "shared" / "data"
    return shared if shared.is_dir() else None


def set_threads(n):
    if hasattr(ndl.backend_ndarray, "set_num_threads") and ndl.cpu().enabled():
        ndl.backend_ndarray.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def get_threads():
    if hasattr(ndl.backend_ndarray, "get_num_threads") and ndl.cpu().enabled():
        return ndl.backend_ndarray.get_num_threads()
    return os.cpu_count()


# ---------------------------------------------------------------- MLPResNet epoch


def ndl_mlp_epoch(X, y, seed=4):
    np.random.seed(seed)
    model = mlp_resnet.MLPResNet(784, hidden_dim=100)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=100, shuffle=True)
    start = time.perf_counter()
    err, loss = mlp_resnet.epoch(loader, model, opt)
    return time.perf_counter() - start, err


def torch_mlp_resnet():
    nn = torch.nn

    class Residual(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return x + self.fn(x)

    def block(dim, hidden):
        return nn.Sequential(Residual(nn.Sequential(
            nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(hidden, dim), nn.BatchNorm1d(dim))), nn.ReLU())

    return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), *[block(100, 50) for _ in range(3)], nn.Linear(100, 10))


def torch_mlp_epoch(X, y, seed=4):
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = torch_mlp_resnet()
    opt = torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
    errors = 0
    start = time.perf_counter()
    order = np.random.permutation(len(X))
    for i in range(0, len(X), 100):
        idx = torch.from_numpy(order[i:i + 100])
        xb, yb = Xt[idx], yt[idx]
        out = model(xb)
        loss = loss_fn(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        errors += int((out.argmax(1) != yb).sum())
    return time.perf_counter() - start, errors / len(X)


# ---------------------------------------------------------------- ResNet9 forward + backward


def torch_resnet9():
    nn = torch.nn

    def convbn(a, b, k, s):
        return nn.Sequential(nn.Conv2d(a, b, k, stride=s, padding=k // 2), nn.BatchNorm2d(b), nn.ReLU())

    class Residual(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return x + self.fn(x)

    return nn.Sequential(
        convbn(3, 16, 7, 4), convbn(16, 32, 3, 2),
        Residual(nn.Sequential(convbn(32, 32, 3, 1), convbn(32, 32, 3, 1))),
        convbn(32, 64, 3, 2), convbn(64, 128, 3, 2),
        Residual(nn.Sequential(convbn(128, 128, 3, 1), convbn(128, 128, 3, 1))),
        nn.Flatten(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


class ResNet9Step:
    def __init__(self, x):
        np.random.seed(0)
        self.model = ResNet9()
        self.model.train()
        self.x = ndl.Tensor(x, requires_grad=False)

    def __call__(self):
        for p in self.model.parameters():
            p.grad = None
        start = time.perf_counter()
        out = self.model(self.x)
        out.sum().backward()
        return time.perf_counter() - start


class TorchResNet9Step:
    def __init__(self, x):
        torch.manual_seed(0)
        self.model = torch_resnet9()
        self.model.train()
        self.x = torch.from_numpy(x)

    def __call__(self):
        self.model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        out = self.model(self.x)
        out.sum().backward()
        return time.perf_counter() - start


# ---------------------------------------------------------------- profiling


def profile(fn, top=12):
    """Run fn once; print the time per op (its compute, forward and backward
    together), per backend kernel of the default device, and the Python
    functions with the most own time."""
    op_time, op_calls = collections.Counter(), collections.Counter()
    k_time, k_calls = collections.Counter(), collections.Counter()
    restore = []

    def timer(fn, name, times, calls):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[name] += time.perf_counter() - t
                calls[name] += 1
        return timed

    for cls in set(_all_subclasses(ndl.autograd.Op)):
        if "compute" in cls.__dict__:
            restore.append((cls, "compute", cls.compute))
            cls.compute = timer(cls.compute, cls.__name__, op_time, op_calls)
    mod = getattr(ndl.default_device(), "mod", None)
    if mod is not None:
        for name in dir(mod):
            f = getattr(mod, name)
            if not name.startswith("_") and callable(f) and not isinstance(f, type):
                restore.append((mod, name, f))
                setattr(mod, name, timer(f, name, k_time, k_calls))
    prof = cProfile.Profile()
    try:
        start = time.perf_counter()
        prof.enable()
        fn()
        prof.disable()
        total = time.perf_counter() - start
    finally:
        for obj, name, f in reversed(restore):
            setattr(obj, name, f)
    print(f"  total {total * 1e3:.0f} ms (profiled, timers included); in op compute "
          f"{sum(op_time.values()) * 1e3:.0f} ms; in backend kernels {sum(k_time.values()) * 1e3:.0f} ms")
    print(f"  {'op (compute)':<24} {'calls':>7} {'ms':>9} {'share':>6}")
    for name, t in op_time.most_common(top):
        print(f"  {name:<24} {op_calls[name]:>7} {t * 1e3:>9.1f} {t / total:>6.1%}")
    if k_time:
        print(f"  {'backend kernel':<24} {'calls':>7} {'ms':>9} {'share':>6}")
        for name, t in k_time.most_common(top):
            print(f"  {name:<24} {k_calls[name]:>7} {t * 1e3:>9.1f} {t / total:>6.1%}")
    print("  Python functions by own time:")
    stats = pstats.Stats(prof)
    rows = sorted(((tt, nc, f"{Path(file).name}:{line}({func})") for (file, line, func), (cc, nc, tt, ct, _)
                   in stats.stats.items()), reverse=True)
    for tt, nc, name in rows[:8]:
        print(f"  {name[:60]:<60} {nc:>7} {tt * 1e3:>9.1f} ms")


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


# ---------------------------------------------------------------- main


def median_alternating(a, b, repeat):
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(a())
        if b is not None:
            tb.append(b())
    return float(np.median(ta)), (float(np.median(tb)) if tb else None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None, help="threads for both libraries (default: current)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--only", choices=["mlp", "resnet9"], default=None)
    args = ap.parse_args(argv)
    threads = args.threads or get_threads()
    set_threads(threads)
    print(f"device {ndl.default_device()}, threads {threads}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
          f"torch {torch.__version__ if torch else 'not installed'}")
    rows = []

    if args.only in (None, "mlp"):
        X, y, _, _ = ndl.data.load_mnist_split(8000, 2000, root=data_root())
        ndl_mlp_epoch(X[:1000], y[:1000])  # warm-up
        if torch is not None:
            torch_mlp_epoch(X[:1000], y[:1000])
        tn, tt = median_alternating(lambda: ndl_mlp_epoch(X, y)[0],
                                    (lambda: torch_mlp_epoch(X, y)[0]) if torch else None, args.repeat)
        rows.append(("MLPResNet epoch, 8000 MNIST, batch 100", tn, tt))
        if args.profile:
            print("\nprofile: MLPResNet epoch")
            profile(lambda: ndl_mlp_epoch(X, y))

    if args.only in (None, "resnet9"):
        x = np.random.default_rng(0).standard_normal((128, 3, 32, 32)).astype(np.float32)
        step = ResNet9Step(x)
        tstep = TorchResNet9Step(x) if torch else None
        step()
        if tstep:
            tstep()
        tn, tt = median_alternating(step, tstep, args.repeat)
        rows.append(("ResNet9 fwd+bwd, batch 128 x 3x32x32", tn, tt))
        if args.profile:
            print("\nprofile: ResNet9 forward + backward")
            profile(step)

    print(f"\n{'benchmark':<42} {'needle_kernels':>15} {'torch':>10} {'ratio':>7}")
    for name, tn, tt in rows:
        if tt is None:
            print(f"{name:<42} {tn * 1e3:>12.0f} ms {'-':>10} {'-':>7}")
        else:
            print(f"{name:<42} {tn * 1e3:>12.0f} ms {tt * 1e3:>7.0f} ms {tn / tt:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
