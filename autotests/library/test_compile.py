"""needle_kernels.compile: tracing, graph passes, fused kernels and ONNX export.

* A traced graph computes what the eager module computes (an MLP, a CNN with
  conv, batch norm, pooling, and an LSTM language model), also for new inputs.
* The IR prints one node per line and draws with the package's graph picture.
* Constant folding, dead-code elimination and fusion keep the outputs.
* Generated kernels equal the numpy meaning of random element-wise programs;
  the CUDA source compiles with nvcc where it is installed.
* The fused graph beats the unfused one on an element-wise chain (printed).
* ONNX: the checker accepts the three models and onnxruntime agrees.
"""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import needle_kernels as ndl
import needle_kernels.nn as nn
from needle_kernels.apps.models import LanguageModel
from needle_kernels.backend_selection import BACKEND
from needle_kernels.compile import (
    constant_folding,
    dead_code_elimination,
    fuse_elementwise,
    optimize,
    trace,
)
from needle_kernels.compile.codegen import cuda_source, program_numpy
from needle_kernels.compile.codegen.cpu_kernel import cpu_kernel
from needle_kernels.compile.ops.fused_elementwise import FusedElementwise

from autotests.figures import report_figure


@pytest.fixture(autouse=True, scope="module")
def _kernel_cache(tmp_path_factory):
    # generated kernels go to a throwaway cache, not the user's
    old = os.environ.get("NEEDLE_KERNEL_CACHE")
    os.environ["NEEDLE_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kernels"))
    yield
    if old is None:
        del os.environ["NEEDLE_KERNEL_CACHE"]
    else:
        os.environ["NEEDLE_KERNEL_CACHE"] = old


# ---------------------------------------------------------------- models

def _mlp(device):
    return nn.Sequential(nn.Linear(6, 16, device=device), nn.ReLU(), nn.Linear(16, 16, device=device),
                         nn.Tanh(), nn.Linear(16, 4, device=device), nn.Sigmoid())


def _cnn(device):
    model = nn.Sequential(
        nn.Conv(3, 8, 3, device=device), nn.BatchNorm2d(8, device=device), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv(8, 6, 3, stride=2, device=device), nn.BatchNorm2d(6, device=device), nn.ReLU(),
        nn.AvgPool2d(2), nn.Flatten(), nn.Linear(6 * 2 * 2, 5, device=device),
    )
    # running statistics that are not the initial 0 / 1, so eval mode's normalisation matters
    model.train()
    model(ndl.Tensor(np.random.randn(4, 3, 16, 16).astype("float32") * 2 + 1, device=device))
    return model.eval()


def _lm(device):
    return LanguageModel(8, 13, 10, num_layers=2, seq_model="lstm", device=device).eval()


def _image(device, n=2):
    return ndl.Tensor(np.random.randn(n, 3, 16, 16).astype("float32"), device=device)


def _tokens(device, seed):
    return ndl.Tensor(np.random.RandomState(seed).randint(0, 13, (5, 3)).astype("float32"), device=device)


def _flat(result):
    if isinstance(result, ndl.Tensor):
        return [result.numpy()]
    return [a for r in result for a in _flat(r)]


def _close(got, want, tol=1e-5):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# ---------------------------------------------------------------- tracing

def test_trace_mlp_equals_eager(device):
    model = _mlp(device)
    x = ndl.Tensor(np.random.randn(5, 6).astype("float32"), device=device)
    graph = trace(model, x)
    _close(graph(x), model(x), tol=0)
    x2 = ndl.Tensor(np.random.randn(5, 6).astype("float32"), device=device)
    _close(graph(x2), model(x2), tol=0)
    assert [n.op for n in graph.op_nodes()].count("matmul") == 3


def test_trace_cnn_equals_eager(device):
    model = _cnn(device)
    graph = trace(model, _image(device))
    x = _image(device)
    _close(graph(x), model(x))
    ops = {n.op for n in graph.op_nodes()}
    assert {"conv", "im2col", "max", "sum", "relu"} <= ops


def test_trace_lstm_language_model_equals_eager(device):
    model = _lm(device)
    graph = trace(model, _tokens(device, 0))
    for seed in (0, 1):  # other tokens: the indices are an input, not baked into the graph
        x = _tokens(device, seed)
        _close(graph(x), model(x))
    ops = [n.op for n in graph.op_nodes()]
    assert "embedding" in ops and "split" in ops and "stack" in ops and ops.count("sigmoid") == 2 * 5 * 3


def _transformer_lm(device):
    return LanguageModel(8, 13, 10, num_layers=2, seq_model="transformer", seq_len=5, device=device).eval()


def test_trace_lowers_every_fused_op(device):
    """The modules run their fused ops (matmul_bias, layer_norm, rms_norm, softmax, conv_nchw,
    lstm_cell, lstm_layer); the traced graph holds only ops of the table, each fused op lowered
    through its own decompose, and computes what the module computes."""
    cell = nn.LSTMCell(3, 4, device=device)
    x = ndl.Tensor(np.random.randn(2, 3).astype("float32"), device=device)
    rms = nn.Sequential(nn.Linear(3, 6, device=device), nn.RMSNorm1d(6, device=device))
    for model, example in [(_transformer_lm(device), _tokens(device, 0)), (_lm(device), _tokens(device, 0)),
                           (_cnn(device), _image(device)), (cell, x), (rms, x)]:
        graph = trace(model, example)
        assert not [n.op for n in graph.op_nodes() if "op" in n.attrs], type(model).__name__
        _close(graph(example), model(example))
    ops = {n.op for n in trace(_transformer_lm(device), _tokens(device, 0)).op_nodes()}
    assert {"exp", "matmul", "power_scalar"} <= ops  # softmax's exp, layer norm's 1 / sqrt


def test_trace_leaves_model_and_inputs_untouched(device):
    model = _lm(device)
    x = _tokens(device, 0)
    trace(model, x)
    assert "forward" not in model.embedding.__dict__
    assert x.op is None and x.grad is None


def test_trace_function_of_several_inputs_and_outputs():
    a, b = ndl.Tensor(np.random.randn(3, 4).astype("float32")), ndl.Tensor(np.random.randn(3, 4).astype("float32"))
    graph = trace(lambda x, y: (ndl.relu(x * y), (x + y, ndl.exp(x))), a, b)
    out = graph(b, a)
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    _close(out, (ndl.relu(b * a), (b + a, ndl.exp(b))))
    with pytest.raises(ValueError, match="traced for shape"):
        graph(ndl.Tensor(np.zeros((2, 4), dtype="float32")), a)


def test_graph_prints_one_line_per_node():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    graph = trace(model, ndl.Tensor(np.random.randn(2, 4).astype("float32")))
    lines = str(graph).splitlines()
    assert lines == [n.text() for n in graph.nodes] + [f"return %{graph.outputs[0].id}"]
    assert lines[0] == "%0 = input[0] (2, 4) float32"
    assert "%6 = relu(%5) (2, 3) float32" in lines
    assert any(line.startswith("%4 = broadcast_to(%3, shape=(2, 3))") for line in lines)


def test_graph_draws_with_viz():
    graph = trace(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), ndl.Tensor(np.random.randn(2, 4).astype("float32")))
    dot = graph.dot()
    assert dot.startswith("digraph") and "relu" in dot and "matmul" in dot
    assert dot.count("->") == sum(len(n.inputs) for n in graph.nodes)
    text = ndl.viz.graph_text(graph.picture_root())
    assert len(text.splitlines()) == len(graph.nodes)


# ---------------------------------------------------------------- passes

@pytest.mark.parametrize("make, example", [(_mlp, lambda d: ndl.Tensor(np.random.randn(5, 6).astype("float32"), device=d)),
                                           (_cnn, _image), (_lm, lambda d: _tokens(d, 0))],
                         ids=["mlp", "cnn", "lstm_lm"])
def test_passes_preserve_outputs(device, make, example):
    model = make(device)
    x = example(device)
    graph = trace(model, x)
    want = graph(x)
    folded = constant_folding(graph)
    assert len(folded.constants) > 0 and len(folded.op_nodes()) < len(graph.op_nodes())
    cleaned = dead_code_elimination(folded)
    assert len(cleaned.nodes) <= len(folded.nodes)
    for g in (folded, cleaned, fuse_elementwise(graph), optimize(graph)):
        _close(g(x), want)
    assert any(n.op == "fused" for n in optimize(graph).nodes)


def test_dead_code_elimination_drops_unused_nodes():
    from needle_kernels.compile.ir import Graph

    x = ndl.Tensor(np.random.randn(3).astype("float32"))
    graph = trace(lambda t: (ndl.exp(t), ndl.tanh(t)), x)
    only_first = Graph(graph.nodes, graph.outputs[:1]).renumbered()
    pruned = dead_code_elimination(only_first)
    assert [n.op for n in pruned.nodes] == ["input", "exp"]
    _close(pruned(x), ndl.exp(x))


def test_constant_folding_folds_parameter_only_work():
    model = nn.LSTMCell(3, 4)
    x = ndl.Tensor(np.random.randn(2, 3).astype("float32"))
    graph = trace(lambda t: model(t)[0], x)
    # b_ih + b_hh and its reshape/broadcast depend on parameters only
    assert any(n.op == "add" and all(i.op == "constant" for i in n.inputs) for n in graph.nodes)
    folded = constant_folding(graph)
    assert not any(n.inputs and all(i.op == "constant" for i in n.inputs) for n in folded.nodes)
    _close(folded(x), model(x)[0])


def test_fusion_keeps_intermediates_used_elsewhere():
    x = ndl.Tensor(np.random.randn(4, 5).astype("float32"))
    graph = trace(lambda t: (ndl.tanh(ndl.relu(t * 2.0) + 1.0), ndl.relu(t * 2.0) * 3.0), x)
    fused = fuse_elementwise(graph)
    assert [n.op for n in fused.op_nodes()].count("fused") >= 2
    _close(fused(x), graph(x))
    chain = trace(lambda t: ndl.exp(-ndl.relu(t + 1.0)) / 2.0, x)
    one = fuse_elementwise(chain)
    assert [n.op for n in one.op_nodes()] == ["fused"]
    assert len(one.op_nodes()[0].attrs["program"]) == 5


# ---------------------------------------------------------------- generated kernels

def _random_program(data):
    """A random element-wise program over 1-3 inputs, every step defined on its operands."""
    n_inputs = data.draw(st.integers(1, 3), label="inputs")
    steps, names = [], [f"a{i}" for i in range(n_inputs)]
    pick = lambda: data.draw(st.sampled_from(names))
    scalar = lambda lo, hi: data.draw(st.floats(lo, hi, allow_nan=False, width=32))
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        kind = data.draw(st.sampled_from(["add", "mul", "div", "add_scalar", "mul_scalar", "div_scalar", "power_scalar",
                                          "neg", "relu", "tanh", "sigmoid", "exp", "log", "power"]))
        if kind in ("add", "mul"):
            steps.append((kind, (pick(), pick()), None))
        elif kind in ("div", "log", "power", "power_scalar"):
            # keep the operand positive: sigmoid(v) + 0.5 lies in (0.5, 1.5)
            steps.append(("sigmoid", (pick(),), None))
            steps.append(("add_scalar", (f"v{len(steps) - 1}",), 0.5))
            safe = f"v{len(steps) - 1}"
            if kind == "div":
                steps.append(("div", (pick(), safe), None))
            elif kind == "log":
                steps.append(("log", (safe,), None))
            elif kind == "power":
                steps.append(("power", (safe, pick()), None))
            else:
                steps.append(("power_scalar", (safe,), data.draw(st.sampled_from([2, 3, -1, 0.5, 1.5]))))
        elif kind == "exp":
            steps.append(("tanh", (pick(),), None))
            steps.append(("exp", (f"v{len(steps) - 1}",), None))
        elif kind == "div_scalar":
            steps.append((kind, (pick(),), data.draw(st.sampled_from([0.5, -3.0, 7.0]))))
        elif kind in ("add_scalar", "mul_scalar"):
            steps.append((kind, (pick(),), scalar(-3, 3)))
        else:
            steps.append((kind, (pick(),), None))
        names.append(f"v{len(steps) - 1}")
    return tuple(steps), n_inputs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_c_kernel_matches_numpy(data):
    program, n_inputs = _random_program(data)
    size = data.draw(st.sampled_from([1, 7, 1000, 40000]), label="size")
    rng = np.random.RandomState(size)
    ins = [rng.uniform(-2, 2, size).astype(np.float32) for _ in range(n_inputs)]
    want = program_numpy(program, ins)
    out = np.empty(size, dtype=np.float32)
    cpu_kernel(program, n_inputs)(out.ctypes.data, [a.ctypes.data for a in ins], size)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fused_op_matches_numpy_on_every_device(device, data):
    program, n_inputs = _random_program(data)
    rng = np.random.RandomState(0)
    ins = [rng.uniform(-2, 2, (3, 50)).astype(np.float32) for _ in range(n_inputs)]
    tensors = [ndl.Tensor(a, device=device, requires_grad=False) for a in ins]
    out = FusedElementwise(program)(*tensors)
    np.testing.assert_allclose(out.numpy(), program_numpy(program, ins), rtol=2e-5, atol=2e-6)


def test_fused_op_reads_strided_views(device):
    a = np.random.randn(6, 8).astype(np.float32)
    t = ndl.transpose(ndl.Tensor(a, device=device, requires_grad=False), (1, 0))
    program = (("mul_scalar", ("a0",), 2.0), ("tanh", ("v0",), None))
    out = FusedElementwise(program)(t)
    np.testing.assert_allclose(out.numpy(), np.tanh(a.T * 2), rtol=1e-6, atol=1e-6)


if BACKEND == "np":  # float64 Tensors exist only in numpy mode
    def test_fused_op_on_float64_numpy_mode():
        a = np.random.randn(10)
        out = FusedElementwise((("exp", ("a0",), None), ("add_scalar", ("v0",), 1.0)))(ndl.Tensor(a))
        assert out.dtype == np.float64
        np.testing.assert_allclose(out.numpy(), np.exp(a) + 1, rtol=1e-12)


def _nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if os.path.exists(candidate):
            return candidate
    return None


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed")
def test_generated_cuda_source_compiles_with_nvcc(tmp_path):
    program = (("mul_scalar", ("a0",), 2.0), ("add", ("v0", "a1"), None), ("relu", ("v1",), None),
               ("sigmoid", ("v2",), None), ("power_scalar", ("v3",), 2), ("log", ("v4",), None),
               ("div", ("v5", "a1"), None), ("power", ("v6", "a0"), None), ("neg", ("v7",), None),
               ("exp", ("v8",), None), ("tanh", ("v9",), None), ("div_scalar", ("v10",), 3.0),
               ("add_scalar", ("v11",), float("inf")))
    name, source = cuda_source(program, 2)
    path = tmp_path / "fused.cu"
    path.write_text(source)
    proc = subprocess.run([_nvcc(), "--ptx", "-arch=sm_80", "-Werror", "all-warnings", str(path), "-o", "-"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + source
    assert f".entry {name}(" in proc.stdout


def test_fused_graph_is_faster_on_an_elementwise_chain():
    def chain(x, y):
        z = ndl.relu(x * 1.5 + 0.25)
        return ndl.tanh(ndl.sigmoid(z * y) - 0.5) * 2.0

    n = 1 << 20
    x = ndl.Tensor(np.random.randn(n).astype("float32"), requires_grad=False)
    y = ndl.Tensor(np.random.randn(n).astype("float32"), requires_grad=False)
    graph = trace(chain, x, y)
    fused = optimize(graph)
    assert [n.op for n in fused.op_nodes()] == ["fused"]
    np.testing.assert_allclose(fused(x, y).numpy(), graph(x, y).numpy(), rtol=1e-5, atol=1e-6)

    def best(g, repeat=7):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            g(x, y).numpy()
            times.append(time.perf_counter() - start)
        return min(times)

    unfused_s, fused_s = best(graph), best(fused)
    report_figure(f"compile: 8-op element-wise chain on {n} floats ({BACKEND}): unfused {unfused_s * 1e3:.2f} ms, "
                  f"fused {fused_s * 1e3:.2f} ms, {unfused_s / fused_s:.1f}x")
    assert fused_s < unfused_s


# ---------------------------------------------------------------- ONNX

def _onnx_agrees(model, inputs, tmp_path, tol=1e-4):
    onnx = pytest.importorskip("onnx", reason="pip install -e '.[onnx]'")
    ort = pytest.importorskip("onnxruntime", reason="pip install -e '.[onnx]'")
    from needle_kernels.compile import export_onnx

    path = tmp_path / "model.onnx"
    export_onnx(model, inputs, path)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {f"input_{i}": x.numpy() for i, x in enumerate(inputs)}
    got = session.run(None, feeds)
    want = _flat(model(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return proto


def test_onnx_mlp(tmp_path):
    proto = _onnx_agrees(_mlp(None), (ndl.Tensor(np.random.randn(5, 6).astype("float32")),), tmp_path)
    assert {"MatMul", "Relu", "Tanh", "Sigmoid"} <= {n.op_type for n in proto.graph.node}


def test_onnx_cnn(tmp_path):
    proto = _onnx_agrees(_cnn(None), (_image(None),), tmp_path)
    kinds = [n.op_type for n in proto.graph.node]
    assert {"Conv", "MaxPool", "AveragePool", "Transpose"} <= set(kinds)
    conv_weights = {i.name: i for i in proto.graph.initializer if i.name.startswith("conv_weight")}
    assert sorted(tuple(w.dims) for w in conv_weights.values()) == [(6, 8, 3, 3), (8, 3, 3, 3)]  # (C_out, C_in, K, K)


def test_onnx_lstm_language_model(tmp_path):
    model = _lm(None)
    proto = _onnx_agrees(model, (_tokens(None, 0),), tmp_path)
    kinds = [n.op_type for n in proto.graph.node]
    assert "LSTM" not in kinds and {"Gather", "Sigmoid", "Tanh", "MatMul", "Split", "Concat"} <= set(kinds)
    # the exported model reads its tokens: new ones give the module's new outputs
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x = _tokens(None, 7)
    for g, w in zip(session.run(None, {"input_0": x.numpy()}), _flat(model(x))):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_onnx_transformer_language_model(tmp_path):
    proto = _onnx_agrees(_transformer_lm(None), (_tokens(None, 0),), tmp_path)
    assert {"Gather", "MatMul", "Exp", "Pow"} <= {n.op_type for n in proto.graph.node}


def test_onnx_export_refuses_a_fused_graph():
    pytest.importorskip("onnx", reason="pip install -e '.[onnx]'")
    from needle_kernels.compile import to_onnx

    x = ndl.Tensor(np.random.randn(3, 4).astype("float32"))
    with pytest.raises(NotImplementedError, match="before fusion"):
        to_onnx(optimize(trace(lambda t: ndl.tanh(t * 2.0), x)))
