"""Benchmark the Cython + OpenMP backend (and the CUDA backend, where a GPU exists) against numpy / cupy.

Times the raw backend functions on pre-allocated ``Array`` buffers and
prints GFLOP/s (matmul) or GB/s (memory-bound kernels: bytes read + written
per call), with the ratio against numpy measured in the same run:

    python benchmarks/bench_backend.py              # full run
    python benchmarks/bench_backend.py --quick      # smaller sizes, fewer repeats
    python benchmarks/bench_backend.py --sizes 512,1024 --threads 2
    python benchmarks/bench_backend.py --only conv    # the rows whose name contains "conv"
    python benchmarks/bench_backend.py --cuda-only --sizes 1024,2048   # the GPU rows alone

Every timing is the best of several repeats after a warm-up call. All numpy
timings of a case run before all OpenMP timings of that case, with a pause
between: both OpenBLAS's and OpenMP's thread pools keep spinning for a
moment after a call, and interleaving the two would make each steal the
other's cores.
"""
import argparse
import importlib
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.machine import describe  # noqa: E402


def load(name):
    return importlib.import_module(f"needle_kernels.backend_ndarray.{name}")


def best_time(fn, repeats, sync=None, min_total=0.0):
    """Best wall time of fn() over `repeats` calls (at least until min_total seconds have passed)."""
    fn()
    if sync:
        sync()
    best, spent, calls = float("inf"), 0.0, 0
    while calls < repeats or spent < min_total:
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        dt = time.perf_counter() - t0
        best, spent, calls = min(best, dt), spent + dt, calls + 1
    return best


def settle():
    """Let the other runtime's spinning threads go to sleep before timing the next one."""
    time.sleep(0.1)


class Bench:
    def __init__(self, cpu, repeats, threads, only=None):
        self.cpu, self.repeats, self.threads, self.only = cpu, repeats, threads, only
        self.rows = []

    def put(self, x):
        a = self.cpu.Array(x.size)
        self.cpu.from_numpy(x, a)
        return a

    def case(self, name, unit, work, numpy_fn, omp_fn, check=None):
        """work: flops (unit GFLOP/s) or bytes (unit GB/s) per call."""
        if self.only and not any(word in name for word in self.only):
            return
        t_np = best_time(numpy_fn, self.repeats, min_total=0.2)
        settle()
        self.cpu.set_num_threads(self.threads)
        t_omp = best_time(omp_fn, self.repeats, min_total=0.2)
        settle()
        if check:
            check()
        row = (name, unit, work / t_np / 1e9, work / t_omp / 1e9, t_np / t_omp)
        self.rows.append(row)
        print(f"{row[0]:<34} {row[1]:<7} {row[2]:>9.1f} {row[3]:>9.1f} {row[4]:>7.2f}x", flush=True)


def header(title, left="numpy", right="openmp"):
    print(f"\n{title}")
    print(f"{'kernel':<34} {'unit':<7} {left:>9} {right:>9} {'ratio':>8}")
    print("-" * 72)


def run_cpu(args):
    cpu = load("ndarray_backend_cpu")
    threads = args.threads or cpu.get_num_threads()
    b = Bench(cpu, args.repeats, threads, args.only)
    rng = np.random.default_rng(0)
    for line in describe():
        print(line)
    print(f"openmp threads: {threads}")
    header(f"Cython + OpenMP backend ({threads} threads) vs numpy; ratio = numpy time / openmp time")

    for n in args.sizes:
        A = rng.standard_normal((n, n), dtype=np.float32)
        B = rng.standard_normal((n, n), dtype=np.float32)
        C = np.empty((n, n), np.float32)
        a, bb, o = b.put(A), b.put(B), cpu.Array(n * n)

        def check(n=n, A=A, B=B, o=o):
            got = cpu.to_numpy(o, (n, n), (n, 1), 0)
            np.testing.assert_allclose(got, A @ B, rtol=1e-3, atol=1e-3 * n**0.5)

        b.case(f"matmul {n}x{n}x{n}", "GFLOP/s", 2.0 * n**3,
               lambda: np.matmul(A, B, out=C), lambda: cpu.matmul(a, bb, o, n, n, n), check)

    # small products, the MLPResNet's among them (batch 100, widths 784, 100 and 50): whether a
    # second thread pays for waking it (compare with --threads 1)
    for m, n, p in [(64, 64, 64), (100, 100, 50), (100, 50, 100), (100, 784, 100)]:
        A = rng.standard_normal((m, n), dtype=np.float32)
        B = rng.standard_normal((n, p), dtype=np.float32)
        C = np.empty((m, p), np.float32)
        a, bb, o = b.put(A), b.put(B), cpu.Array(m * p)

        def check(m=m, p=p, A=A, B=B, o=o):
            np.testing.assert_allclose(cpu.to_numpy(o, (m, p), (p, 1), 0), A @ B, rtol=1e-3, atol=1e-3 * A.shape[1]**0.5)

        b.case(f"matmul {m}x{n}x{p} (small)", "GFLOP/s", 2.0 * m * n * p,
               lambda: np.matmul(A, B, out=C), lambda: cpu.matmul(a, bb, o, m, n, p), check)

    lm_output_rows(cpu, b, rng, 512, 64)   # the Transformer row's
    lm_output_rows(cpu, b, rng, 640, 100)  # the LSTM row's (bptt 40 x batch 16, 100 units)

    N = args.elements
    x = rng.standard_normal(N, dtype=np.float32)
    y = rng.standard_normal(N, dtype=np.float32)
    z = np.empty(N, np.float32)
    ax, ay, az = b.put(x), b.put(y), cpu.Array(N)
    label = f"{N / 2**20:g}M"
    b.case(f"ewise_add {label}", "GB/s", 12.0 * N, lambda: np.add(x, y, out=z), lambda: cpu.ewise_add(ax, ay, az))
    b.case(f"ewise_mul {label}", "GB/s", 12.0 * N, lambda: np.multiply(x, y, out=z),
           lambda: cpu.ewise_mul(ax, ay, az))
    b.case(f"scalar_mul {label}", "GB/s", 8.0 * N, lambda: np.multiply(x, np.float32(1.5), out=z),
           lambda: cpu.scalar_mul(ax, 1.5, az))
    b.case(f"ewise_exp {label}", "GB/s", 8.0 * N, lambda: np.exp(x, out=z), lambda: cpu.ewise_exp(ax, az))
    b.case(f"ewise_tanh {label}", "GB/s", 8.0 * N, lambda: np.tanh(x, out=z), lambda: cpu.ewise_tanh(ax, az))
    del x, y, z, ax, ay, az

    r = args.reduce
    X = rng.standard_normal((r, r), dtype=np.float32)
    XT = np.empty((r, r), np.float32)
    s = np.empty(r, np.float32)
    aX, aS, aT = b.put(X), cpu.Array(r), cpu.Array(r * r)
    b.case(f"sum last axis {r}x{r}", "GB/s", 4.0 * r * r, lambda: X.sum(axis=1, out=s),
           lambda: cpu.reduce_sum(aX, aS, r))
    b.case(f"sum first axis {r}x{r}", "GB/s", 4.0 * r * r, lambda: X.sum(axis=0, out=s),
           lambda: cpu.reduce_sum_axis(aX, aS, 1, r, r))
    b.case(f"max last axis {r}x{r}", "GB/s", 4.0 * r * r, lambda: X.max(axis=1, out=s),
           lambda: cpu.reduce_max(aX, aS, r))
    b.case(f"compact transpose {r}x{r}", "GB/s", 8.0 * r * r, lambda: np.copyto(XT, X.T),
           lambda: cpu.compact(aX, aT, (r, r), (1, r), 0))
    XH, aH = np.empty((r, r // 2), np.float32), cpu.Array(r * (r // 2))
    b.case(f"compact flip+step {r}x{r // 2}", "GB/s", 4.0 * r * r, lambda: np.copyto(XH, X[::-1, ::2]),
           lambda: cpu.compact(aX, aH, (r, r // 2), (-r, 2), r * r - r))
    del X, XT, aX, aT

    ndarray_rows(cpu, b, args, rng)
    beside_numpy(args)
    direct_or_packed(cpu, args, threads, rng)
    speedup(cpu, args, threads, rng)


def lm_output_rows(cpu, b, rng, rows, width, words=10000):
    """A language model's output layer (``rows`` positions of ``width`` features, 10,000 words):
    its forward (the bias added as the product is stored), its weight gradient x^T @ g (64
    rows for the Transformer: a last, partial panel of rows) and its input gradient g @ w^T
    (the Transformer's 64 columns read w in place, the LSTM's 100 pack it from its
    transpose), each against numpy's OpenBLAS."""
    X = rng.standard_normal((rows, width), dtype=np.float32)
    W = rng.standard_normal((width, words), dtype=np.float32)
    bias = rng.standard_normal(words, dtype=np.float32)
    G = rng.standard_normal((rows, words), dtype=np.float32)
    Y, DW, DX = (np.empty((rows, words), np.float32), np.empty((width, words), np.float32),
                 np.empty((rows, width), np.float32))
    x, w, bs, g = b.put(X), b.put(W), b.put(bias), b.put(G)
    y, dw, dx = cpu.Array(rows * words), cpu.Array(width * words), cpu.Array(rows * width)
    flops = 2.0 * rows * width * words

    def check(out, shape, want):
        np.testing.assert_allclose(cpu.to_numpy(out, shape, (shape[1], 1), 0), want, rtol=1e-3, atol=1e-2)

    def np_forward():
        np.add(np.matmul(X, W, out=Y), bias, out=Y)

    b.case(f"linear {rows}x{width}x{words} + bias", "GFLOP/s", flops, np_forward,
           lambda: cpu.matmul_bias(x, w, bs, y, rows, width, words),
           lambda: check(y, (rows, words), X @ W + bias))
    b.case(f"x^T @ g {width}x{rows}x{words}", "GFLOP/s", flops,
           lambda: np.matmul(X.T, G, out=DW), lambda: cpu.matmul_t(x, g, dw, width, rows, words, True, False),
           lambda: check(dw, (width, words), X.T @ G))
    b.case(f"g @ w^T {rows}x{words}x{width}", "GFLOP/s", flops,
           lambda: np.matmul(G, W.T, out=DX), lambda: cpu.matmul_t(g, w, dx, rows, words, width, False, True),
           lambda: check(dx, (rows, width), G @ W.T))


def conv_rows(b, nd, rng):
    """A padded 3x3 convolution's forward and weight gradient the ways the Conv op can take
    (im2col's product, Winograd F(2x2, 3x3) / F(3x3, 2x2), the forward without an im2col matrix),
    against numpy's im2col + matmul;
    GFLOP/s counts the direct form's multiply-adds, so Winograd's figure is the speed it gives.
    Shapes: the conv row of bench_models.py, and ResNet9's 32-channel residual block (4x4 maps,
    batch 128)."""
    from needle_kernels.ops import ops_conv

    for n, h, c in ((64, 16, 64), (128, 4, 32)):
        img = rng.standard_normal((n, h + 2, h + 2, c), dtype=np.float32)
        w = rng.standard_normal((3, 3, c, c), dtype=np.float32)
        windows = np.lib.stride_tricks.sliding_window_view(img, (3, 3), axis=(1, 2)).transpose(0, 1, 2, 4, 5, 3)
        d_img, d_w = nd.array(img, device=nd.cpu()), nd.array(w, device=nd.cpu())

        def np_conv():
            return np.ascontiguousarray(windows).reshape(-1, 9 * c) @ w.reshape(9 * c, c)

        def im2col_conv():
            return ops_conv._im2col_rows(d_img, 3, 1) @ d_w.reshape((9 * c, c))

        flops = 2.0 * n * h * h * 9 * c * c
        b.case(f"conv 3x3 fwd ({n},{h},{h},{c})->{c}, im2col @", "GFLOP/s", flops, np_conv, im2col_conv)
        b.case(f"conv 3x3 fwd ({n},{h},{h},{c})->{c}, Winograd", "GFLOP/s", flops, np_conv,
               lambda: ops_conv._winograd_conv3x3(d_img, d_w))
        b.case(f"conv 3x3 fwd ({n},{h},{h},{c})->{c}, implicit", "GFLOP/s", flops, np_conv,
               lambda: nd.conv_implicit(d_img, d_w, 1, 0, 0, (h, h)))
        # the weight gradient: im2col^T @ dY, or Winograd's F(3x3, 2x2) from the image and dY
        g = rng.standard_normal((n * h * h, c), dtype=np.float32)
        d_g = nd.array(g, device=nd.cpu())
        d_g4 = d_g.reshape((n, h, h, c))

        def np_dw():
            return np.ascontiguousarray(windows).reshape(-1, 9 * c).T @ g

        b.case(f"conv 3x3 dW ({n},{h},{h},{c})->{c}, im2col @", "GFLOP/s", flops, np_dw,
               lambda: d_g.permute((1, 0)) @ ops_conv._im2col_rows(d_img, 3, 1))
        b.case(f"conv 3x3 dW ({n},{h},{h},{c})->{c}, Winograd", "GFLOP/s", flops, np_dw,
               lambda: nd.winograd_weight_grad(d_img, d_g4))


def implicit_rows(b, nd, rng):
    """Convolutions the im2col matrix of which the backend never makes (conv_implicit and its weight
    gradient: the windows read where they lie) against the product with the matrix made first,
    with numpy's im2col + matmul as the reference. Shapes: ResNet9's first layer (a 7x7 kernel of
    stride 4 on 3 channels, batch 128: an 8192 x 147 matrix) and a layer like its fifth (3x3, stride 2,
    64 -> 128 channels, one output pixel per image: 128 x 576)."""
    from needle_kernels.ops import ops_conv

    for n, h, c, k, s, c_out in ((128, 38, 3, 7, 4, 16), (128, 4, 64, 3, 2, 128)):
        img = rng.standard_normal((n, h, h, c), dtype=np.float32)
        w = rng.standard_normal((k, k, c, c_out), dtype=np.float32)
        ho = (h - k) // s + 1
        cols = np.lib.stride_tricks.sliding_window_view(img, (k, k), axis=(1, 2))[:, ::s, ::s]
        g = rng.standard_normal((n * ho * ho, c_out), dtype=np.float32)
        d_img, d_w, d_g = (nd.array(x, device=nd.cpu()) for x in (img, w, g))
        d_g4 = d_g.reshape((n, ho, ho, c_out))

        def np_cols():
            return np.ascontiguousarray(cols.transpose(0, 1, 2, 4, 5, 3)).reshape(-1, k * k * c)

        flops = 2.0 * n * ho * ho * k * k * c * c_out
        name = f"conv {k}x{k}/{s} ({n},{h},{h},{c})->{c_out}"
        b.case(f"{name} fwd, im2col @", "GFLOP/s", flops, lambda: np_cols() @ w.reshape(-1, c_out),
               lambda: ops_conv._im2col_rows(d_img, k, s) @ d_w.reshape((k * k * c, c_out)))
        b.case(f"{name} fwd, implicit", "GFLOP/s", flops, lambda: np_cols() @ w.reshape(-1, c_out),
               lambda: nd.conv_implicit(d_img, d_w, s, 0, 0, (ho, ho)))
        b.case(f"{name} dW, im2col @", "GFLOP/s", flops, lambda: np_cols().T @ g,
               lambda: d_g.permute((1, 0)) @ ops_conv._im2col_rows(d_img, k, s))
        b.case(f"{name} dW, implicit", "GFLOP/s", flops, lambda: np_cols().T @ g,
               lambda: nd.conv_implicit_weight_grad(d_img, d_g4, k, s, 0, 0))


def ndarray_rows(cpu, b, args, rng):
    """The same matmul through the NDArray wrapper, where it exists (Python overhead included)."""
    try:
        nd = importlib.import_module("needle_kernels.backend_ndarray")
        nd.NDArray
    except (ImportError, AttributeError) as exc:
        print(f"\n(NDArray rows skipped: {exc})")
        return
    header("Through NDArray (nd.array(..., device=nd.cpu()))")
    n = args.sizes[-1] if args.sizes[-1] <= 1024 else 1024
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)
    dA, dB = nd.array(A, device=nd.cpu()), nd.array(B, device=nd.cpu())
    b.case(f"NDArray @ {n}x{n}x{n}", "GFLOP/s", 2.0 * n**3, lambda: A @ B, lambda: dA @ dB)
    b.case(f"NDArray .sum(axis=0) {n}x{n}", "GB/s", 4.0 * n * n, lambda: A.sum(axis=0),
           lambda: dA.sum(axis=0))
    b.case(f"NDArray .T.compact() {n}x{n}", "GB/s", 8.0 * n * n, lambda: np.ascontiguousarray(A.T),
           lambda: dA.permute((1, 0)).compact())
    # a 3x3 convolution's im2col (64 images, 16x16, 64 channels, padded NHWC) and its weight
    # gradient's product: each call makes a fresh 37 MB result, as a training step does
    img = rng.standard_normal((64, 18, 18, 64), dtype=np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(img, (3, 3), axis=(1, 2)).transpose(0, 1, 2, 4, 5, 3)
    d_img = nd.array(img, device=nd.cpu())
    s0, s1, s2, s3 = d_img.strides
    d_windows = d_img.as_strided((64, 16, 16, 3, 3, 64), (s0, s1, s2, s1, s2, s3))
    b.case("NDArray im2col 3x3 (64,16,16,64)", "GB/s", 8.0 * windows.size,
           lambda: np.ascontiguousarray(windows), lambda: d_windows.compact())
    # what nn.Conv does to an NCHW batch before a padded 3x3 convolution, and for its bias
    # gradient: the batch seen as NHWC, padded by one pixel into a new array; summed over N, H, W
    nchw = rng.standard_normal((64, 64, 16, 16), dtype=np.float32)
    d_nhwc = nd.array(nchw, device=nd.cpu()).permute((0, 2, 3, 1))
    border = ((0, 0), (1, 1), (1, 1), (0, 0))
    b.case("NDArray NCHW -> padded NHWC (64,64,16,16)", "GB/s", 8.0 * nchw.size,
           lambda: np.pad(nchw.transpose(0, 2, 3, 1), border), lambda: d_nhwc.pad(border))
    for shape in [(64, 64, 16, 16), (128, 64, 2, 2)]:  # and a 2x2 map of ResNet9's: rows of 4 in memory
        batch = rng.standard_normal(shape, dtype=np.float32)
        seen = nd.array(batch, device=nd.cpu()).permute((0, 2, 3, 1))
        b.case(f"NDArray NCHW {shape} seen as NHWC .sum((0,1,2))", "GB/s", 4.0 * batch.size,
               lambda batch=batch: batch.transpose(0, 2, 3, 1).sum(axis=(0, 1, 2)),
               lambda seen=seen: seen.sum((0, 1, 2)))
    conv_rows(b, nd, rng)
    implicit_rows(b, nd, rng)
    G = rng.standard_normal((64, 16384), dtype=np.float32)
    X = rng.standard_normal((16384, 576), dtype=np.float32)
    dG, dX = nd.array(G, device=nd.cpu()), nd.array(X, device=nd.cpu())
    b.case("NDArray @ 64x16384x576 (conv dW)", "GFLOP/s", 2.0 * 64 * 16384 * 576, lambda: G @ X, lambda: dG @ dX)
    # ResNet9's first weight gradient, X^T @ dY with X^T a transposed view: 16 rows, 8192 deep
    Gt = rng.standard_normal((8192, 16), dtype=np.float32)
    X1 = rng.standard_normal((8192, 147), dtype=np.float32)
    dGt, dX1 = nd.array(Gt, device=nd.cpu()), nd.array(X1, device=nd.cpu())
    b.case("NDArray @ 16x8192x147, A = view.T", "GFLOP/s", 2.0 * 16 * 8192 * 147, lambda: Gt.T @ X1,
           lambda: dGt.permute((1, 0)) @ dX1)
    # an MLP layer's product: 100 rows, small enough that the Python around the kernel shows
    A1 = rng.standard_normal((100, 784), dtype=np.float32)
    W1 = rng.standard_normal((784, 100), dtype=np.float32)
    dA1, dW1 = nd.array(A1, device=nd.cpu()), nd.array(W1, device=nd.cpu())
    b.case("NDArray @ 100x784x100", "GFLOP/s", 2.0 * 100 * 784 * 100, lambda: A1 @ W1, lambda: dA1 @ dW1)
    # one Adam update of a 784x100 weight (reads p, g, m, v; writes m, v and the new p)
    n_p = 784 * 100
    P, Gr, M, V = (rng.standard_normal(n_p, dtype=np.float32) for _ in range(4))
    V = np.abs(V)

    def np_adam(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        np.multiply(M, b1, out=M)
        M.__iadd__(Gr * (1 - b1))
        np.multiply(V, b2, out=V)
        V.__iadd__(Gr * Gr * (1 - b2))
        return P - (M * (lr / 0.1)) / (np.sqrt(V * (1 / 0.001)) + eps)

    dP, dG_, dM, dV = (nd.array(a, device=nd.cpu()) for a in (P, Gr, M, V))
    b.case(f"adam_update {n_p} floats", "GB/s", 28.0 * n_p, np_adam,
           lambda: nd.adam_update(dP, dG_, dM, dV, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001))
    # a language model's loss on its vocabulary: the Transformer row of bench_models.py
    # (512 positions, 10,000 words); forward (its row maxima, exps and sums) and gradient
    rows, words = 512, 10000
    Z = rng.standard_normal((rows, words), dtype=np.float32) * 3
    labels = rng.integers(0, words, rows)
    dZ, dY = nd.array(Z, device=nd.cpu()), nd.array(labels.astype(np.float32), device=nd.cpu())
    _, d_lse = nd.softmax_cross_entropy(dZ, dY)
    d_g = nd.array(np.full(rows, 1.0 / rows, np.float32), device=nd.cpu())

    def np_xent():
        m = Z.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(Z - m).sum(axis=1))
        return lse - Z[np.arange(rows), labels], lse

    lse = np_xent()[1]

    def np_xent_grad():
        out = np.exp(Z - lse[:, None]) / rows
        out[np.arange(rows), labels] -= 1.0 / rows
        return out

    b.case(f"softmax xent {rows}x{words}", "GB/s", 4.0 * rows * words, np_xent,
           lambda: nd.softmax_cross_entropy(dZ, dY))
    b.case(f"softmax xent grad {rows}x{words}", "GB/s", 8.0 * rows * words, np_xent_grad,
           lambda: nd.softmax_cross_entropy_grad(dZ, dY, d_lse, d_g))


def beside_numpy(args):
    """A notebook's loop: each call right after the other library's, against the same call
    with nothing before it; in a process with numpy's OpenBLAS on needle_kernels' threads
    (the default, blas_sharing.py) and in one with OpenBLAS on its own pool
    (NEEDLE_SHARE_BLAS_THREADS=0), each started for these rows (--beside-rows)."""
    if args.only and not any(word in "beside numpy" for word in args.only):
        return
    print("\nBeside numpy in one process: GFLOP/s of a call alone and right after the other "
          "library's call; ratio = time after / time alone (1.00: not slowed)")
    print(f"{'call':<46} {'alone':>9} {'after':>9} {'ratio':>8}")
    print("-" * 76, flush=True)
    for share in ("1", "0"):
        env = dict(os.environ, NEEDLE_SHARE_BLAS_THREADS=share)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--beside-rows"], env=env, check=True)


def beside_rows():
    """The rows of beside_numpy in this process. The slow-down is per call, so each figure is
    a median of 10 calls; alone and after alternate for 5 rounds and each keeps its best
    round, since a shared machine's noise only ever slows a round down."""
    from needle_kernels.backend_ndarray import blas_sharing

    cpu = load("ndarray_backend_cpu")
    rng = np.random.default_rng(0)
    pools = "one pool" if any(lib["shares_threads"] for lib in blas_sharing.blas_libraries()) else "two pools"

    def median(fn, before=None):
        times = []
        for _ in range(10):
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    for n in (256, 1024):
        A = rng.standard_normal((n, n), dtype=np.float32)
        C = np.empty((n, n), np.float32)
        a, o = cpu.Array(n * n), cpu.Array(n * n)
        cpu.from_numpy(A, a)
        ours = lambda: cpu.matmul(a, a, o, n, n, n)  # noqa: E731
        theirs = lambda: np.matmul(A, A, out=C)  # noqa: E731
        for name, fn, other in ((f"needle matmul {n} after numpy's, {pools}", ours, theirs),
                                (f"numpy matmul {n} after needle's, {pools}", theirs, ours)):
            fn()
            alone = after = float("inf")
            for _ in range(5):
                time.sleep(0.3)  # longer than OpenBLAS's workers spin after the last "after"
                alone = min(alone, median(fn))
                after = min(after, median(fn, before=other))
            work = 2.0 * n**3 / 1e9
            print(f"{name:<46} {work / alone:>9.1f} {work / after:>9.1f} {after / alone:>7.2f}x", flush=True)


def direct_or_packed(cpu, args, threads, rng):
    """Each of the two matmul paths on products with many rows of A (a 3x3 convolution's im2col
    product, 64 and 128 output channels): B read in place by the direct kernel, or packed.
    Which one the backend takes (gemm_path) follows gemm_direct_rule(): from ``rows`` rows on, B
    is packed unless the product is at most ``narrow`` columns wide; the ratio shows what the
    rule's choice gains over the other path on this CPU."""
    rule = cpu.gemm_direct_rule()
    if not rule["rows"]:
        return
    print(f"\nDirect kernel (B read in place) against packed, products of {rule['rows']} rows or more "
          f"(taken: direct up to {rule['narrow']} columns, packed above); ratio = the other path's "
          "time / the taken path's")
    print(f"{'matmul m x n x p':<34} {'direct':>9} {'packed':>9} {'taken':>7} {'ratio':>8}")
    print("-" * 72)
    cpu.set_num_threads(threads)
    for m, n, p in [(16384, 576, rule["narrow"]), (16384, 576, 2 * rule["narrow"])]:
        A = rng.standard_normal((m, n), dtype=np.float32)
        B = rng.standard_normal((n, p), dtype=np.float32)
        a, bb, o = cpu.Array(m * n), cpu.Array(n * p), cpu.Array(m * p)
        cpu.from_numpy(A, a)
        cpu.from_numpy(B, bb)
        times = {"direct": float("inf"), "packed": float("inf")}
        for _ in range(3):  # alternately, so a slow spell of a shared machine hits both paths
            for path, (limit, rows) in {"direct": (max(rule["limit"], n * p), 0), "packed": (0, 0)}.items():
                cpu.set_gemm_direct_limit(limit)
                cpu.set_gemm_direct_rows(rows)
                try:
                    times[path] = min(times[path], best_time(lambda: cpu.matmul(a, bb, o, m, n, p),
                                                             args.repeats, min_total=0.2))
                    np.testing.assert_allclose(cpu.to_numpy(o, (m, p), (p, 1), 0), A @ B, rtol=1e-3, atol=1e-2)
                finally:
                    cpu.set_gemm_direct_limit(rule["limit"])
                    cpu.set_gemm_direct_rows(rule["rows"])
        taken = cpu.gemm_path(m, n, p)
        other = "packed" if taken == "direct" else "direct"
        rates = {path: 2.0 * m * n * p / t / 1e9 for path, t in times.items()}
        print(f"{f'{m}x{n}x{p} (GFLOP/s)':<34} {rates['direct']:>9.1f} {rates['packed']:>9.1f} {taken:>7} "
              f"{times[other] / times[taken]:>7.2f}x", flush=True)


def speedup(cpu, args, threads, rng):
    """The OpenMP speed-up of `threads` threads over one, kernel by kernel."""
    if threads < 2:
        return
    print(f"\nOpenMP speed-up, {threads} threads over 1")
    print(f"{'kernel':<34} {'1 thread':>10} {str(threads) + ' threads':>11} {'speed-up':>9}")
    print("-" * 68)
    cases = []
    for n in args.sizes:
        if n < 512:
            continue
        a, bb, o = (cpu.Array(n * n) for _ in range(3))
        cpu.from_numpy(rng.standard_normal(n * n, dtype=np.float32), a)
        cpu.from_numpy(rng.standard_normal(n * n, dtype=np.float32), bb)
        cases.append((f"matmul {n} (GFLOP/s)", 2.0 * n**3, lambda a=a, bb=bb, o=o, n=n: cpu.matmul(a, bb, o, n, n, n)))
    N = args.elements
    x, z = cpu.Array(N), cpu.Array(N)
    cpu.from_numpy(rng.standard_normal(N, dtype=np.float32), x)
    cases.append((f"ewise_exp {N / 2**20:g}M (GB/s)", 8.0 * N, lambda: cpu.ewise_exp(x, z)))
    cases.append((f"ewise_add {N / 2**20:g}M (GB/s)", 12.0 * N, lambda: cpu.ewise_add(x, x, z)))
    r = args.reduce
    X, s = cpu.Array(r * r), cpu.Array(r)
    cpu.from_numpy(rng.standard_normal(r * r, dtype=np.float32), X)
    cases.append((f"sum first axis {r}x{r} (GB/s)", 4.0 * r * r, lambda: cpu.reduce_sum_axis(X, s, 1, r, r)))
    cases.append((f"compact transpose {r}x{r} (GB/s)", 8.0 * r * r,
                  lambda: cpu.compact(X, z, (r, r), (1, r), 0) if r * r <= N else None))
    for name, work, fn in cases:
        rates = []
        for t in (1, threads):
            cpu.set_num_threads(t)
            rates.append(work / best_time(fn, args.repeats, min_total=0.2) / 1e9)
        cpu.set_num_threads(threads)
        print(f"{name:<34} {rates[0]:>10.1f} {rates[1]:>11.1f} {rates[1] / rates[0]:>8.2f}x", flush=True)


def run_cuda(args):
    try:
        cu = load("ndarray_backend_cuda")
    except ImportError as exc:
        print(f"\n(CUDA rows skipped: {exc})")
        return
    if not getattr(cu, "is_available", lambda: False)():
        reason = getattr(cu, "unavailable_reason", lambda: "unavailable")()
        print(f"\n(CUDA rows skipped: {reason})")
        return
    import cupy as cp

    sync = cu.synchronize
    rng = np.random.default_rng(0)
    print(f"\nCUDA backend vs cupy ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}); "
          "ratio = cupy time / backend time")
    print(f"{'kernel':<34} {'unit':<7} {'cupy':>9} {'needle':>9} {'ratio':>8}")
    print("-" * 72)

    def row(name, unit, work, cupy_fn, nk_fn):
        t_cp = best_time(cupy_fn, args.repeats, sync=cp.cuda.Device().synchronize, min_total=0.2)
        t_nk = best_time(nk_fn, args.repeats, sync=sync, min_total=0.2)
        print(f"{name:<34} {unit:<7} {work / t_cp / 1e9:>9.1f} {work / t_nk / 1e9:>9.1f} {t_cp / t_nk:>7.2f}x",
              flush=True)

    def put(x):
        a = cu.Array(x.size)
        cu.from_numpy(x, a)
        return a

    for n in args.sizes + ([4096] if not args.quick else []):
        A = rng.standard_normal((n, n), dtype=np.float32)
        B = rng.standard_normal((n, n), dtype=np.float32)
        gA, gB = cp.asarray(A), cp.asarray(B)
        a, bb, o = put(A), put(B), cu.Array(n * n)
        row(f"matmul {n} (cuBLAS)", "GFLOP/s", 2.0 * n**3, lambda: gA @ gB, lambda: cu.matmul(a, bb, o, n, n, n))
    N = args.elements
    gx = cp.asarray(rng.standard_normal(N, dtype=np.float32))
    gz = cp.empty_like(gx)
    x, z = put(cp.asnumpy(gx)), cu.Array(N)
    row(f"ewise_add {N / 2**20:g}M", "GB/s", 12.0 * N, lambda: cp.add(gx, gx, out=gz), lambda: cu.ewise_add(x, x, z))
    row(f"ewise_mul {N / 2**20:g}M", "GB/s", 12.0 * N, lambda: cp.multiply(gx, gx, out=gz),
        lambda: cu.ewise_mul(x, x, z))
    row(f"ewise_exp {N / 2**20:g}M", "GB/s", 8.0 * N, lambda: cp.exp(gx, out=gz), lambda: cu.ewise_exp(x, z))
    r = args.reduce
    gX = cp.asarray(rng.standard_normal((r, r), dtype=np.float32))
    X, s, T = put(cp.asnumpy(gX)), cu.Array(r), cu.Array(r * r)
    row(f"sum last axis {r}x{r}", "GB/s", 4.0 * r * r, lambda: gX.sum(axis=1), lambda: cu.reduce_sum(X, s, r))
    row(f"sum first axis {r}x{r}", "GB/s", 4.0 * r * r, lambda: gX.sum(axis=0),
        lambda: cu.reduce_sum_axis(X, s, 1, r, r))
    row(f"compact transpose {r}x{r}", "GB/s", 8.0 * r * r, lambda: cp.ascontiguousarray(gX.T),
        lambda: cu.compact(X, T, (r, r), (1, r), 0))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    p.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                   help="matmul sizes, comma separated (default 256,512,1024,2048)")
    p.add_argument("--threads", type=int, default=0, help="OpenMP threads (default: the backend's default)")
    p.add_argument("--repeats", type=int, default=0, help="timed calls per kernel (default 10, quick 3)")
    p.add_argument("--no-cuda", action="store_true", help="skip the CUDA rows")
    p.add_argument("--cuda-only", action="store_true", help="only the CUDA rows (matmul sizes: --sizes, plus 4096 "
                   "unless --quick)")
    p.add_argument("--only", nargs="+", help="run only the CPU rows whose name contains one of these words")
    p.add_argument("--beside-rows", action="store_true", help=argparse.SUPPRESS)  # one process of beside_numpy
    args = p.parse_args(argv)
    if args.beside_rows:
        return beside_rows()
    args.sizes = args.sizes or ([256, 512, 1024] if args.quick else [256, 512, 1024, 2048])
    args.repeats = args.repeats or (3 if args.quick else 10)
    args.elements = (1 << 22) if args.quick else (1 << 24)
    args.reduce = 2048 if args.quick else 4096
    if not args.cuda_only:
        run_cpu(args)
    if not args.no_cuda:
        run_cuda(args)


if __name__ == "__main__":
    main()
