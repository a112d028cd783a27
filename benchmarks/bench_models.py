"""Training speed of the course's models against PyTorch (CPU) with the same number of threads.

Every row times needle_kernels and PyTorch side by side in this one run:

* ResNet9 (the course's CIFAR-10 network) on a batch of 128 3x32x32 images:
  forward + backward, and the whole training step with Adam;
* one MLPResNet epoch (784 -> 100, 3 blocks, Adam) on 8,000 MNIST images
  (real when available, see ``ndl.data.load_mnist_split``);
* the LSTM language model (2 layers, hidden 100, embedding 100, vocabulary
  10,000, batch 16, bptt 40): a training step with SGD, and one evaluation pass
  over Penn Treebank's valid split (when the data directory has it);
* a Transformer language model (2 pre-norm layers, d_model 64, 4 heads,
  feed-forward 256, vocabulary 10,000, sequence 32, batch 16): a training step;
* one 3x3 convolution, 64 -> 64 channels, 16x16, batch 64: forward + backward;
* matmul 256x256 on the NDArray against numpy's ``@``;
* per-op overhead: a chain of 1,000 tiny ops on (4, 4) Tensors, forward + backward;
* memory: the backend allocator's high-water mark during a ResNet9 training
  step, and each library's growth of the process's peak RSS over the same (first)
  step, each measured in a fresh process.

The rows are one table, ``ROWS``: each names its workload's builder in each
library, so adding a row is adding one entry.

needle_kernels runs its backward passes with ``create_graph=False``, the
computation PyTorch's ``backward()`` does by default (no graph of the gradients
is recorded; needle's own default records one, so they can be differentiated
again).

Each timing alternates the two libraries and reports the median, so load from
other processes hits both alike. Each library first runs the workload WARMUP
times (caches of buffers and kernels filled, the first row not paying for the
process's start). The ratio is needle_kernels time / reference
time. Without torch only the needle_kernels column is printed. ``--profile``
adds, for needle_kernels, the time spent in each op's ``compute`` (forward and
backward together), in each backend kernel, and the Python functions with the
most own time. The output starts with the machine: CPU, cores, the backend's
instruction set and matmul blocking, numpy's BLAS, PyTorch (``machine.py``).

    python benchmarks/bench_models.py [--threads N] [--repeat R] [--profile] [--only ROW ...]
    python benchmarks/bench_models.py --separate-processes [--repeat R] [--only ROW ...]
    python benchmarks/bench_models.py --device cuda --only resnet9 mlp   # on the GPU, against PyTorch CUDA

``--device cuda`` runs the ResNet9 and MLPResNet rows on ``cuda()`` against PyTorch on the same
GPU (each timed call ends with both libraries' device synchronised); the other rows exist on the
CPU only and are skipped.

By default both libraries run in this one process. torch ships its own libgomp,
but under the same file name as the system's, so the loader keeps whichever
loads first and the two libraries share one OpenMP runtime, with the spin
needle_kernels sets as it loads first (see ``benchmarks/bench_wait_policy.py``);
numpy's OpenBLAS runs on the same threads where it allows (``blas_sharing``).

``--separate-processes`` instead times each library in a fresh process of its
own, started alternately (needle, reference, needle, ...) ``--repeat`` times a
row: each process builds the workload, warms it up and times one call, with the
library's own defaults (the environment as given, its own thread count unless
``--threads``), so nothing the other library left spinning shares its cores.
It prints the median and the range (min-max) of each library and the ratio of
the medians.
"""
import os
import sys

# The environment as it was given, before this script or needle_kernels set an OpenMP variable:
# the processes of --separate-processes run under it, each library with its own defaults.
GIVEN_ENV = dict(os.environ)


def library_alone(argv):
    """The library a process of --separate-processes times ("needle" or "reference"), else None.

    Read from the command line before argparse runs: the OpenMP settings must be chosen before
    either library loads its runtime, which happens at the imports below.
    """
    for i, arg in enumerate(argv):
        if arg == "--library" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--library="):
            return arg.partition("=")[2]
    return None


ALONE = library_alone(sys.argv[1:])

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import collections  # noqa: E402
import functools  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, NamedTuple  # noqa: E402

import numpy as np  # noqa: E402


def import_torch():
    try:
        import torch
    except ImportError:  # the torch columns are skipped
        return None
    return torch


# A reference process loads torch before needle_kernels, so torch's own OpenMP runtime is the one
# loaded, under the environment as given; a needle process never loads torch. In one process
# needle_kernels comes first, so both libraries share the system's runtime.
torch = import_torch() if ALONE == "reference" else None

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import needle_kernels as ndl  # noqa: E402
from needle_kernels.apps import mlp_resnet  # noqa: E402
from needle_kernels.apps.models import LanguageModel, ResNet9  # noqa: E402

if ALONE is None:
    torch = import_torch()

from benchmarks.machine import describe  # noqa: E402


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


def ndl_sync(device):
    """Wait for the kernels launched on ``device`` (a GPU runs them asynchronously)."""
    sync = getattr(getattr(device, "mod", None), "synchronize", None)
    if sync is not None:
        sync()


def torch_sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def ndl_mlp_epoch(X, y, seed=4, device=None):
    np.random.seed(seed)
    model = mlp_resnet.MLPResNet(784, hidden_dim=100, device=device)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=100, shuffle=True, device=device)
    start = time.perf_counter()
    err, loss = mlp_resnet.epoch(loader, model, opt)
    ndl_sync(device)
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


def torch_mlp_epoch(X, y, seed=4, device="cpu"):
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = torch_mlp_resnet().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    # the data starts in host memory, as needle's loader's does: each batch is copied to the device
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
    errors = 0
    start = time.perf_counter()
    order = np.random.permutation(len(X))
    for i in range(0, len(X), 100):
        idx = torch.from_numpy(order[i:i + 100])
        xb, yb = Xt[idx].to(device), yt[idx].to(device)
        out = model(xb)
        loss = loss_fn(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        errors += int((out.argmax(1) != yb).sum())
    torch_sync(device)
    return time.perf_counter() - start, errors / len(X)


# ---------------------------------------------------------------- ResNet9


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


def cifar_batch(n=128):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, n)


class ResNet9Step:
    """One call: forward, backward and (with ``optimize``) an Adam step; returns seconds."""

    def __init__(self, x, y, optimize, device=None):
        np.random.seed(0)
        self.device = device
        self.model = ResNet9(device=device)
        self.model.train()
        self.opt = ndl.optim.Adam(self.model.parameters(), lr=1e-3) if optimize else None
        self.loss = ndl.nn.SoftmaxLoss()
        self.x, self.y = ndl.Tensor(x, device=device, requires_grad=False), y

    def __call__(self):
        start = time.perf_counter()
        if self.opt is not None:
            self.opt.reset_grad()
            self.loss(self.model(self.x), self.y).backward(create_graph=False)
            self.opt.step()
        else:
            for p in self.model.parameters():
                p.grad = None
            self.model(self.x).sum().backward(create_graph=False)
        ndl_sync(self.device)
        return time.perf_counter() - start


class TorchResNet9Step:
    def __init__(self, x, y, optimize, device="cpu"):
        torch.manual_seed(0)
        self.device = device
        self.model = torch_resnet9().to(device)
        self.model.train()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3) if optimize else None
        self.x, self.y = torch.from_numpy(x).to(device), torch.from_numpy(y.astype(np.int64)).to(device)

    def __call__(self):
        start = time.perf_counter()
        self.model.zero_grad(set_to_none=True)
        if self.opt is not None:
            torch.nn.functional.cross_entropy(self.model(self.x), self.y).backward()
            self.opt.step()
        else:
            self.model(self.x).sum().backward()
        torch_sync(self.device)
        return time.perf_counter() - start


# ---------------------------------------------------------------- language models

VOCAB, BATCH, BPTT = 10000, 16, 40


def token_batch(T, B, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, VOCAB, (T, B)), rng.integers(0, VOCAB, T * B)


class NdlLMStep:
    """A training step of a language model with SGD: x (T, B) ids -> loss on y (T*B,)."""

    def __init__(self, model, x, y):
        self.model = model
        self.model.train()
        self.opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        self.loss = ndl.nn.SoftmaxLoss()
        self.x, self.y = ndl.Tensor(x.astype(np.float32), requires_grad=False), y

    def __call__(self):
        start = time.perf_counter()
        self.opt.reset_grad()
        logits, _ = self.model(self.x)
        self.loss(logits, self.y).backward(create_graph=False)
        self.opt.step()
        return time.perf_counter() - start


class TorchLMStep:
    def __init__(self, model, x, y):
        self.model = model
        self.model.train()
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.x, self.y = torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))

    def __call__(self):
        start = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(self.x)
        torch.nn.functional.cross_entropy(logits, self.y).backward()
        self.opt.step()
        return time.perf_counter() - start


def ndl_lstm_lm():
    np.random.seed(0)
    return LanguageModel(100, VOCAB, 100, num_layers=2, seq_model="lstm")


def torch_lstm_lm():
    torch.manual_seed(0)
    nn = torch.nn

    class LSTMLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, 100)
            self.lstm = nn.LSTM(100, 100, 2)
            self.linear = nn.Linear(100, VOCAB)

        def forward(self, x, h=None):
            out, h = self.lstm(self.embedding(x), h)
            return self.linear(out.reshape(-1, 100))

    return LSTMLM()


class NdlTransformerLM(ndl.nn.Module):
    """Embedding -> nn.Transformer (pre-norm, causal, learned positions) -> Linear, on (T, B) ids."""

    def __init__(self, d_model=64, heads=4, hidden=256, layers=2, seq_len=32):
        super().__init__()
        np.random.seed(0)
        self.d_model = d_model
        self.embedding = ndl.nn.Embedding(VOCAB, d_model)
        self.transformer = ndl.nn.Transformer(d_model, hidden, layers, num_head=heads, dim_head=d_model // heads,
                                              sequence_len=seq_len)
        self.linear = ndl.nn.Linear(d_model, VOCAB)

    def forward(self, x, h=None):
        T, B = x.shape
        out, _ = self.transformer(self.embedding(x))
        return self.linear(out.reshape((T * B, self.d_model))), None


def torch_transformer_lm(d_model=64, heads=4, hidden=256, layers=2, seq_len=32):
    torch.manual_seed(0)
    nn = torch.nn

    class TransformerLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, d_model)
            self.pos = nn.Embedding(seq_len, d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, hidden, dropout=0.0, batch_first=False,
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.linear = nn.Linear(d_model, VOCAB)

        def forward(self, x):
            T = x.shape[0]
            h = self.embedding(x) + self.pos(torch.arange(T))[:, None, :]
            mask = nn.Transformer.generate_square_subsequent_mask(T)
            return self.linear(self.encoder(h, mask=mask, is_causal=True).reshape(-1, d_model))

    return TransformerLM()


def ptb_valid_batches():
    """PTB's valid split as (rows, 16) ids, or None without the data."""
    root = data_root()
    path = root / "ptb" / "valid.txt" if root else None
    if path is None or not path.is_file():
        return None
    corpus = ndl.data.Corpus(path.parent, train_file="valid.txt", test_file="valid.txt")
    return ndl.data.batchify(np.asarray(corpus.train) % VOCAB, BATCH, None, None)


def ndl_lm_pass(model, batches):
    """One evaluation pass (no gradient) of a recurrent language model, the state carried between windows."""
    model.eval()
    start, h, total = time.perf_counter(), None, 0.0
    loss_fn = ndl.nn.SoftmaxLoss()
    for i in range(0, len(batches) - 1, BPTT):
        x, y = ndl.data.get_batch(batches, i, BPTT)
        logits, h = model(x, h)
        h = tuple(t.detach() for t in h) if isinstance(h, tuple) else h.detach()
        total += float(loss_fn(logits, y.numpy()).numpy())
    return time.perf_counter() - start


def torch_lm_pass(model, batches):
    model.eval()
    start, h, total = time.perf_counter(), None, 0.0
    with torch.no_grad():
        for i in range(0, len(batches) - 1, BPTT):
            L = min(BPTT, len(batches) - 1 - i)
            x = torch.from_numpy(batches[i:i + L])
            y = torch.from_numpy(batches[i + 1:i + 1 + L].reshape(-1))
            out, h = model.lstm(model.embedding(x), h)
            total += float(torch.nn.functional.cross_entropy(model.linear(out.reshape(-1, 100)), y))
    return time.perf_counter() - start


# ---------------------------------------------------------------- one conv layer, matmul, per-op overhead


class NdlConvStep:
    def __init__(self, x):
        np.random.seed(0)
        self.conv = ndl.nn.Conv(64, 64, 3)
        self.x = ndl.Tensor(x, requires_grad=True)

    def __call__(self):
        start = time.perf_counter()
        self.x.grad = None
        for p in self.conv.parameters():
            p.grad = None
        self.conv(self.x).sum().backward(create_graph=False)
        return time.perf_counter() - start


class TorchConvStep:
    def __init__(self, x):
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(64, 64, 3, padding=1)
        self.x = torch.from_numpy(x).requires_grad_()

    def __call__(self):
        start = time.perf_counter()
        self.x.grad = None
        self.conv.zero_grad(set_to_none=True)
        self.conv(self.x).sum().backward()
        return time.perf_counter() - start


def timed_min_batch(fn, reps, settle_s=0.0):
    """Median over 5 batches of ``reps`` calls, per call (for calls too short to time one by one).

    ``settle_s``: first call ``fn`` untimed for that long, so the threads the
    other library left spinning have gone to sleep (numpy's OpenBLAS keeps its
    idle threads yielding for about 0.1 s after each call, on the cores our
    OpenMP threads need, and the reverse) and each library is timed on a
    quiet machine, as it runs when it is the only one working.
    """
    end = time.perf_counter() + settle_s
    while time.perf_counter() < end:
        fn()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - start) / reps)
    return float(np.median(times))


def chain(x, y, n, tanh):
    """The sum of n tiny ops cycling through add, multiply, tanh and scale."""
    z = x
    for i in range(n):
        k = i % 4
        z = z + y if k == 0 else z * y if k == 1 else tanh(z) if k == 2 else z * 0.5
    return z.sum()


class NdlChain:
    def __init__(self, n=1000):
        rng = np.random.default_rng(0)
        self.n = n
        self.x = ndl.Tensor(rng.standard_normal((4, 4)).astype(np.float32))
        self.y = ndl.Tensor(rng.standard_normal((4, 4)).astype(np.float32))

    def __call__(self):
        start = time.perf_counter()
        self.x.grad = self.y.grad = None
        chain(self.x, self.y, self.n, ndl.ops.tanh).backward(create_graph=False)
        return time.perf_counter() - start


class TorchChain:
    def __init__(self, n=1000):
        rng = np.random.default_rng(0)
        self.n = n
        self.x = torch.from_numpy(rng.standard_normal((4, 4)).astype(np.float32)).requires_grad_()
        self.y = torch.from_numpy(rng.standard_normal((4, 4)).astype(np.float32)).requires_grad_()

    def __call__(self):
        start = time.perf_counter()
        self.x.grad = self.y.grad = None
        chain(self.x, self.y, self.n, torch.tanh).backward()
        return time.perf_counter() - start


# ---------------------------------------------------------------- memory of a ResNet9 training step


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss():
    """Start the process's peak RSS (VmHWM) afresh from its current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def memory_probe(lib, threads):
    """In this (fresh) process, over the first training step of a ResNet9 already built: the growth
    of the process's peak RSS (VmHWM, reset just before the step), and for needle_kernels the backend allocator's high-water mark above
    what was held before the step (the model, its inputs); printed as JSON. The first step, because
    both libraries keep freed memory for reuse, so a second step adds nothing to either's RSS."""
    set_threads(threads)
    x, y = cifar_batch()
    step = ResNet9Step(x, y, True) if lib == "ndl" else TorchResNet9Step(x, y, True)
    import gc
    gc.collect()
    _reset_peak_rss()
    before = _status_kb("VmRSS") * 1024
    result = {}
    if lib == "ndl":
        dev = ndl.default_device()
        dev.reset_peak_memory()
        live = dev.memory_stats()["live_bytes"]
        step()
        result["allocator_peak_bytes"] = dev.memory_stats()["peak_bytes"] - live
    else:
        step()
    result["rss_growth_bytes"] = _status_kb("VmHWM") * 1024 - before
    print(json.dumps(result))


def measure_memory(lib, threads):
    """The probe's JSON from a fresh process; ``threads`` None leaves the library its default."""
    command = [sys.executable, __file__, "--memory-probe", lib] + (["--threads", str(threads)] if threads else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True, env={**os.environ})
    return json.loads(out.stdout.strip().splitlines()[-1])


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
    # devices cache kernel look-ups on themselves: drop the cache so the timed kernels are looked up
    ndl.default_device()._forget_kernels()
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
        ndl.default_device()._forget_kernels()
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


# ---------------------------------------------------------------- the table of rows


WARMUP = 3


class Setup(NamedTuple):
    """Where and how the workloads run."""
    needle_device: object  # None: the default cpu()
    torch_device: str  # "cpu" or "cuda", also the --device the processes of --separate-processes get
    threads: int | None  # None: each library's default (--separate-processes without --threads)


class Skip(Exception):
    """A row that cannot run here (its data is missing); the message says so."""


@dataclass(frozen=True)
class Row:
    """One line of the report: the same workload built in needle_kernels and in the reference library.

    ``inputs()`` makes the data both share (raising Skip when it is missing); ``needle(inputs,
    setup)`` and ``reference(inputs, setup)`` each build a workload: a call that runs it once and
    returns its seconds (the memory row's: what its fresh process measured).
    """
    key: str  # the --only choice; the two ResNet9 rows share one
    title: str
    needle: Callable
    reference: Callable
    inputs: Callable = lambda: None
    reference_library: str = "torch"
    unit: str = "ms"
    ratio: str = "needle_kernels time / torch time"
    size_of: Callable | None = None  # the size of data that varies (PTB's tokens), shown after the title
    warmups: int = WARMUP  # untimed calls of each library before the timed ones
    most_repeats: int | None = None  # rows of whole epochs and passes time at most this many calls
    in_own_processes: bool = False  # its workloads start a fresh process each (--separate-processes or not)
    on_cuda: bool = False  # exists on --device cuda

    def name(self, inputs):
        return f"{self.title} ({self.size_of(inputs)})" if self.size_of else self.title

    def timings(self, repeat):
        return min(repeat, self.most_repeats or repeat)

    def has_reference(self):
        return self.reference_library != "torch" or torch is not None


def mnist_8000():
    X, y, _, _ = ndl.data.load_mnist_split(8000, 2000, root=data_root())
    return X, y


def ndl_mlp_workload(data, setup):
    X, y = data
    ndl_mlp_epoch(X[:1000], y[:1000], device=setup.needle_device)  # warm-up on a short epoch: a whole one is long
    return lambda: ndl_mlp_epoch(X, y, device=setup.needle_device)[0]


def torch_mlp_workload(data, setup):
    X, y = data
    torch_mlp_epoch(X[:1000], y[:1000], device=setup.torch_device)
    return lambda: torch_mlp_epoch(X, y, device=setup.torch_device)[0]


def ptb_valid():
    batches = ptb_valid_batches()
    if batches is None:
        raise Skip("LSTM LM pass over PTB valid: skipped, no ptb/valid.txt in the data directory")
    return batches


def matrices_256():
    rng = np.random.default_rng(0)
    return rng.standard_normal((256, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32)


def ndl_matmul_workload(ab, setup):
    A, B = ndl.backend_ndarray.array(ab[0]), ndl.backend_ndarray.array(ab[1])
    return lambda: timed_min_batch(lambda: A @ B, 50, settle_s=0.25)


def numpy_matmul_workload(ab, setup):
    a, b = ab
    return lambda: timed_min_batch(lambda: a @ b, 50, settle_s=0.25)


def conv_input():
    return np.random.default_rng(0).standard_normal((64, 64, 16, 16)).astype(np.float32)


ROWS = [
    Row("resnet9", "ResNet9 fwd+bwd, batch 128", inputs=cifar_batch, on_cuda=True,
        needle=lambda xy, s: ResNet9Step(*xy, False, s.needle_device),
        reference=lambda xy, s: TorchResNet9Step(*xy, False, s.torch_device)),
    Row("resnet9", "ResNet9 training step (Adam), batch 128", inputs=cifar_batch, on_cuda=True,
        needle=lambda xy, s: ResNet9Step(*xy, True, s.needle_device),
        reference=lambda xy, s: TorchResNet9Step(*xy, True, s.torch_device)),
    Row("mlp", "MLPResNet epoch, 8000 MNIST, batch 100", inputs=mnist_8000, on_cuda=True,
        needle=ndl_mlp_workload, reference=torch_mlp_workload, warmups=0, most_repeats=3),
    Row("lstm", "LSTM LM training step, bptt 40 x batch 16", inputs=lambda: token_batch(BPTT, BATCH),
        needle=lambda xy, s: NdlLMStep(ndl_lstm_lm(), *xy),
        reference=lambda xy, s: TorchLMStep(torch_lstm_lm(), *xy)),
    Row("ptb", "LSTM LM eval pass, PTB valid", inputs=ptb_valid, size_of=lambda b: f"{b.size} tokens",
        needle=lambda b, s: functools.partial(ndl_lm_pass, ndl_lstm_lm(), b),
        reference=lambda b, s: functools.partial(torch_lm_pass, torch_lstm_lm(), b), warmups=0, most_repeats=3),
    Row("transformer", "Transformer LM training step, seq 32 x batch 16", inputs=lambda: token_batch(32, BATCH),
        needle=lambda xy, s: NdlLMStep(NdlTransformerLM(), *xy),
        reference=lambda xy, s: TorchLMStep(torch_transformer_lm(), *xy)),
    Row("conv", "conv 3x3 64->64, 16x16, batch 64, fwd+bwd", inputs=conv_input,
        needle=lambda x, s: NdlConvStep(x), reference=lambda x, s: TorchConvStep(x)),
    Row("matmul", "matmul 256x256 (NDArray vs numpy)", inputs=matrices_256, reference_library="numpy",
        ratio="NDArray time / numpy time", needle=ndl_matmul_workload, reference=numpy_matmul_workload),
    Row("overhead", "chain of 1000 ops on (4,4), fwd+bwd",
        needle=lambda _, s: NdlChain(), reference=lambda _, s: TorchChain()),
    Row("memory", "ResNet9 step memory (MB)", unit="MB", warmups=0, most_repeats=1, in_own_processes=True,
        ratio="needle_kernels allocator peak / torch RSS growth",
        needle=lambda _, s: lambda: measure_memory("ndl", s.threads),
        reference=lambda _, s: lambda: measure_memory("torch", s.threads)),
]
ROW_KEYS = list(dict.fromkeys(row.key for row in ROWS))


# ---------------------------------------------------------------- measuring a row


@dataclass
class Measured:
    """A row's samples: one per timed call (the memory row: the probe's figures)."""
    row: Row
    name: str
    needle: list
    reference: list | None  # None: the reference library is missing


def median_ms(samples):
    return float(np.median(samples)) * 1e3


def measure_here(row, setup, repeat, profile_needle):
    """Both libraries in this process: warm-ups, then ``repeat`` calls alternating needle and reference."""
    inputs = row.inputs()
    needle = row.needle(inputs, setup)
    reference = row.reference(inputs, setup) if row.has_reference() else None
    for _ in range(row.warmups):
        needle()
        if reference is not None:
            reference()
    needle_samples, reference_samples = [], []
    for _ in range(row.timings(repeat)):
        needle_samples.append(needle())
        if reference is not None:
            reference_samples.append(reference())
    measured = Measured(row, row.name(inputs), needle_samples, reference_samples if reference is not None else None)
    if row.unit == "ms":
        against = f" against {median_ms(measured.reference):.1f} ms" if measured.reference else ""
        print(f"  {measured.name}: {median_ms(measured.needle):.1f} ms" + against, flush=True)
        if profile_needle:
            print(f"\nprofile: {measured.name}")
            profile(needle)
    return measured


def measure_alone(index, library, setup):
    """Run in a fresh process of --separate-processes: time one library's workload of ROWS[index]
    once after its warm-ups and print the result as JSON (a skip's reason, without the data)."""
    row = ROWS[index]
    try:
        inputs = row.inputs()
    except Skip as why:
        print(json.dumps({"skipped": str(why)}))
        return
    workload = (row.needle if library == "needle" else row.reference)(inputs, setup)
    for _ in range(row.warmups):
        workload()
    print(json.dumps({"name": row.name(inputs), "seconds": workload()}))


def run_alone(index, library, setup):
    """Start a fresh process for ``measure_alone`` under the environment as given; its JSON."""
    command = [sys.executable, __file__, "--row", str(index), "--library", library, "--device", setup.torch_device,
               "--vocabulary", str(VOCAB)]
    if setup.threads:
        command += ["--threads", str(setup.threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=GIVEN_ENV)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread_ms(samples):
    return f"{min(samples) * 1e3:.1f}-{max(samples) * 1e3:.1f} ms"


def measure_in_processes(row, setup, repeat):
    """Each timing in a fresh process, needle and reference alternately, ``repeat`` pairs."""
    index = ROWS.index(row)
    libraries = ["needle", "reference"] if row.has_reference() else ["needle"]
    samples = {library: [] for library in libraries}
    for _ in range(row.timings(repeat)):
        for library in libraries:
            result = run_alone(index, library, setup)
            if "skipped" in result:
                raise Skip(result["skipped"])
            samples[library].append(result["seconds"])
    measured = Measured(row, result["name"], samples["needle"], samples.get("reference"))
    line = f"  {measured.name}: {median_ms(measured.needle):.1f} ms ({spread_ms(measured.needle)})"
    if measured.reference:
        line += f" against {median_ms(measured.reference):.1f} ms ({spread_ms(measured.reference)})"
    print(line, flush=True)
    return measured


# ---------------------------------------------------------------- the report


def table_line(measured, with_spread):
    """A row of the closing table (scripts/gpu_check.py reads these), the ranges appended with --separate-processes."""
    tn = median_ms(measured.needle)
    if measured.reference is None:
        line = f"{measured.name:<48} {tn:>12.1f} ms {'-':>18} {'-':>7}"
    else:
        tt = median_ms(measured.reference)
        line = f"{measured.name:<48} {tn:>12.1f} ms {measured.row.reference_library:>8} {tt:>6.1f} ms {tn / tt:>6.2f}x"
    if with_spread:
        line += f"  {spread_ms(measured.needle):>18} {spread_ms(measured.reference) if measured.reference else '-':>18}"
    return line


def memory_line(measured):
    mem = measured.needle[0]
    line = (f"{measured.name:<48} allocator peak {mem['allocator_peak_bytes'] / 1e6:.1f}, "
            f"RSS growth {mem['rss_growth_bytes'] / 1e6:.1f}")
    if measured.reference is not None:
        tmem = measured.reference[0]
        ratio = mem["allocator_peak_bytes"] / max(tmem["rss_growth_bytes"], 1)
        line += f"; torch RSS growth {tmem['rss_growth_bytes'] / 1e6:.1f}; allocator peak / torch {ratio:.2f}x"
    return line


def report(measured, with_spread):
    header = f"\n{'benchmark':<48} {'needle_kernels':>15} {'reference':>18} {'ratio':>7}"
    if with_spread:
        header += f"  {'needle min-max':>18} {'reference min-max':>18}"
    print(header)
    for m in measured:
        if m.row.unit == "ms":
            print(table_line(m, with_spread))
    for m in measured:
        if m.row.unit == "MB":
            print(memory_line(m))


# ---------------------------------------------------------------- main


def rows_help():
    lines = ["rows (--only), each with its unit and what its ratio is:"]
    for row in ROWS:
        lines.append(f"  {row.key:<12} {row.title} [{row.unit}; {row.ratio}]")
    return "\n".join(lines)


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=rows_help(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both libraries (default: needle_kernels' default for both; with "
                         "--separate-processes, each library's own)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls (processes, with --separate-processes) "
                    "per library and row; the MLPResNet and PTB rows at most 3 (default 5)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--only", nargs="+", choices=ROW_KEYS, default=ROW_KEYS, help="rows to run (default: all)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the resnet9 and mlp rows run (cuda: against PyTorch CUDA, the other rows skipped)")
    ap.add_argument("--separate-processes", action="store_true",
                    help="time each library in a fresh process of its own with its own defaults, alternately; "
                         "print each library's median and min-max")
    ap.add_argument("--vocabulary", type=int, default=VOCAB,
                    help=f"words in the language models' vocabulary (the lstm, ptb and transformer rows; default "
                         f"{VOCAB}): a small one leaves out most of the output layer's cost")
    ap.add_argument("--memory-probe", choices=["ndl", "torch"], help=argparse.SUPPRESS)
    # one process of --separate-processes: ROWS[--row] in --library alone
    ap.add_argument("--row", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--library", choices=["needle", "reference"], help=argparse.SUPPRESS)
    return ap


def main(argv=None):
    ap = parser()
    args = ap.parse_args(argv)
    if (args.row is None) != (args.library is None):
        ap.error("--row and --library go together (one process of --separate-processes)")
    if args.separate_processes and args.profile:
        ap.error("--profile times needle_kernels in this process: leave out --separate-processes")
    if args.vocabulary < 2:
        ap.error(f"--vocabulary must be at least 2, got {args.vocabulary}")
    global VOCAB
    VOCAB = args.vocabulary
    if args.memory_probe:
        memory_probe(args.memory_probe, args.threads or get_threads())
        return 0
    global torch
    device, torch_device = None, "cpu"
    if args.device == "cuda":
        device = ndl.cuda()
        if not device.enabled():
            print(f"cuda() is not available here ({device.reason}): no rows to run")
            return 0
        torch_device = "cuda"
        if torch is not None and not torch.cuda.is_available():
            print("PyTorch sees no CUDA device: the reference columns are skipped")
            torch = None
    if args.library:
        if args.threads:
            set_threads(args.threads)
        measure_alone(args.row, args.library, Setup(device, torch_device, args.threads))
        return 0
    if args.device == "cuda":
        skipped = [key for key in args.only if not any(row.on_cuda for row in ROWS if row.key == key)]
        if skipped:
            print(f"--device cuda: rows {' '.join(skipped)} run on the CPU only; skipped")
            args.only = [key for key in args.only if key not in skipped]
    if args.separate_processes:
        threads = args.threads
        if threads:
            set_threads(threads)  # so that the machine lines show what the processes will use
    else:
        threads = args.threads or get_threads()
        set_threads(threads)
    for line in describe(torch):
        print(line)
    torch_version = torch.__version__ if torch else "not installed"
    if args.separate_processes:
        print(f"device {device or ndl.default_device()}, each library in a process of its own, threads "
              f"{threads or 'each its default'}, OMP_WAIT_POLICY={GIVEN_ENV.get('OMP_WAIT_POLICY')}, "
              f"GOMP_SPINCOUNT={GIVEN_ENV.get('GOMP_SPINCOUNT')} (as given), torch {torch_version}")
    else:
        print(f"device {device or ndl.default_device()}, threads {threads}, "
              f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}, "
              f"torch {torch_version}")
    if args.vocabulary != ap.get_default("vocabulary"):
        print(f"language models with a vocabulary of {VOCAB} words")
    setup = Setup(device, torch_device, threads)
    measured = []
    for row in ROWS:
        if row.key not in args.only:
            continue
        try:
            if args.separate_processes and not row.in_own_processes:
                measured.append(measure_in_processes(row, setup, args.repeat))
            else:
                measured.append(measure_here(row, setup, args.repeat, args.profile))
        except Skip as why:
            print(f"  {why}")
    report(measured, args.separate_processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
