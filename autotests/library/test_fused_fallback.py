"""A device whose backend lacks the fused kernels (one made with make_device from a module of
one's own, as hw3's student backend is) runs the same losses and normalisations through
generic array operations, with the same results."""
import types

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.backend_ndarray import device as device_module
from needle_kernels.backend_ndarray import ndarray_backend_numpy

FUSED = ("softmax_xent", "softmax_xent_grad", "batchnorm_stats", "batchnorm_apply", "batchnorm_backward",
         "lstm_cell", "lstm_cell_backward", "ewise_relu_backward", "ewise_tanh_backward", "ewise_sigmoid_backward",
         "bias_add", "matmul_t", "winograd_input", "winograd_output", "winograd_conv3x3",
         "winograd_weight_grad", "adam_update_many", "batchnorm_fold", "layernorm", "layernorm_backward", "rmsnorm",
         "rmsnorm_backward", "softmax", "softmax_backward",
         "conv_implicit", "conv_implicit_weight_grad", "matmul_bias", "embedding_gather", "embedding_scatter")


@pytest.fixture(scope="module")
def plain():
    # the reference backend's table without the fused kernels
    names = [n for n in dir(ndarray_backend_numpy) if not n.startswith("_") and n not in FUSED]
    module = types.SimpleNamespace(**{n: getattr(ndarray_backend_numpy, n) for n in names})
    return device_module.make_device("without_fused_kernels", module)


def _train_step(device):
    np.random.seed(3)
    model = ndl.nn.Sequential(ndl.nn.Conv(3, 4, 3, device=device), ndl.nn.BatchNorm2d(4, device=device),
                              ndl.nn.ReLU(), ndl.nn.Flatten(), ndl.nn.Linear(4 * 6 * 6, 7, device=device))
    x = ndl.Tensor(np.random.randn(5, 3, 6, 6).astype(np.float32), device=device)
    loss = ndl.nn.SoftmaxLoss()(model(x), np.array([0, 6, 2, 2, 5]))
    loss.backward()
    bn = model.modules[1]
    return [loss.numpy(), x.grad.numpy() if x.grad is not None else None, bn.running_var.numpy()] + \
        [p.grad.numpy() for p in model.parameters()]


def test_models_train_the_same_without_fused_kernels(plain):
    assert not hasattr(plain, "softmax_xent") and hasattr(ndl.cpu_numpy(), "softmax_xent")
    for got, want in zip(_train_step(plain), _train_step(ndl.cpu_numpy())):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _conv3x3_step(device, create_graph):
    # 16 channels, stride 1: Winograd's convolution where the device has it, im2col where not;
    # without create_graph, on a map of 64 pixels or more, the weight gradient by Winograd too
    np.random.seed(5)
    conv = ndl.nn.Conv(16, 16, 3, device=device)
    x = ndl.Tensor(np.random.randn(2, 16, 8, 9).astype(np.float32), device=device)
    out = conv(x)
    (out * out).sum().backward(create_graph=create_graph)
    return [out.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in conv.parameters()]


@pytest.mark.parametrize("create_graph", [True, False])
def test_conv3x3_runs_the_same_without_winograd(plain, create_graph):
    assert not ndl.backend_ndarray.winograd_runs_on(plain) and ndl.backend_ndarray.winograd_runs_on(ndl.cpu_numpy())
    for got, want in zip(_conv3x3_step(plain, create_graph), _conv3x3_step(ndl.cpu_numpy(), create_graph)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_winograd_kernels_check_their_arguments():
    image = ndl.backend_ndarray.NDArray(np.zeros((1, 4, 4, 2), np.float32), device=ndl.cpu())
    for kernel, match in (((16, 3, 5), "must be \\(16, 2, C_out\\)"), ((9, 2, 5), "must be")):
        with pytest.raises(ValueError, match=match):
            ndl.backend_ndarray.winograd_conv3x3(image, ndl.backend_ndarray.NDArray(np.zeros(kernel, np.float32),
                                                                                device=ndl.cpu()))
    with pytest.raises(ValueError, match="at least 3x3"):
        ndl.backend_ndarray.winograd_conv3x3(image[:, :2], ndl.backend_ndarray.NDArray(
            np.zeros((16, 2, 5), np.float32), device=ndl.cpu()))
    with pytest.raises(ValueError, match="must be \\(1, 2, 2, C_out\\)"):
        ndl.backend_ndarray.winograd_weight_grad(image, ndl.backend_ndarray.NDArray(
            np.zeros((1, 4, 4, 5), np.float32), device=ndl.cpu()))


def _strided_conv_step(device, create_graph):
    # ResNet9's first layer on a few images: a 7x7 kernel of stride 4 over an NCHW batch
    np.random.seed(6)
    conv = ndl.nn.Conv(3, 16, 7, stride=4, device=device)
    x = ndl.Tensor(np.random.randn(3, 3, 32, 32).astype(np.float32), device=device)
    out = conv(x)
    (out * out).sum().backward(create_graph=create_graph)
    return [out.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in conv.parameters()]


@pytest.mark.parametrize("create_graph", [True, False])
def test_conv_runs_the_same_without_implicit_im2col(plain, create_graph, monkeypatch):
    from needle_kernels.ops import ops_conv

    monkeypatch.setattr(ops_conv, "IMPLICIT_MIN_FLOATS", 0)  # however small the im2col matrix
    nd = ndl.backend_ndarray
    assert not nd.conv_implicit_runs_on(plain) and nd.conv_implicit_runs_on(ndl.cpu_numpy())
    for got, want in zip(_strided_conv_step(plain, create_graph), _strided_conv_step(ndl.cpu_numpy(), create_graph)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_implicit_conv_kernels_check_their_arguments():
    nd = ndl.backend_ndarray
    image = nd.NDArray(np.zeros((1, 4, 4, 2), np.float32), device=ndl.cpu())

    def array(*shape, device=ndl.cpu()):
        return nd.NDArray(np.zeros(shape, np.float32), device=device)

    with pytest.raises(ValueError, match="weight must be \\(K, K, C_in, C_out\\)"):
        nd.conv_implicit(image, array(3, 2, 2, 5), 1, 1, 1, (4, 4))
    with pytest.raises(ValueError, match="for an image of 2 channels"):
        nd.conv_implicit(image, array(3, 3, 4, 5), 1, 1, 1, (4, 4))
    with pytest.raises(ValueError, match="needs an NHWC image"):
        nd.conv_implicit(image[0], array(3, 3, 2, 5), 1, 1, 1, (4, 4))
    with pytest.raises(ValueError, match="the weight must be an NDArray on"):
        nd.conv_implicit(image, array(3, 3, 2, 5, device=ndl.cpu_numpy()), 1, 1, 1, (4, 4))
    with pytest.raises(ValueError, match="bad geometry"):
        nd.conv_implicit(image, array(3, 3, 2, 5), 0, 1, 1, (4, 4))
    with pytest.raises(ValueError, match="must be \\(N, Ho, Wo, C_out\\)"):
        nd.conv_implicit_weight_grad(image, array(2, 4, 4, 5), 3, 1, 1, 1)
    # the windows of a transposed view are read as they lie
    nchw = np.random.default_rng(0).standard_normal((2, 2, 5, 4)).astype(np.float32)
    view = nd.NDArray(nchw, device=ndl.cpu()).permute((0, 2, 3, 1))
    weight = np.random.default_rng(1).standard_normal((3, 3, 2, 3)).astype(np.float32)
    got = nd.conv_implicit(view, nd.NDArray(weight, device=ndl.cpu()), 2, 1, 1, (3, 2)).numpy()
    padded = np.pad(nchw.transpose(0, 2, 3, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(padded[:, ki:ki + 5:2, kj:kj + 3:2] @ weight[ki, kj] for ki in range(3) for kj in range(3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _lstm_step(device):
    np.random.seed(4)
    lstm = ndl.nn.LSTM(3, 4, num_layers=2, device=device)
    x = ndl.Tensor(np.random.randn(5, 2, 3).astype(np.float32), device=device)
    out, (h, c) = lstm(x)
    (out.sum() + (c * c).sum()).backward()
    return [out.numpy(), c.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in lstm.parameters()]


def test_lstm_runs_the_same_without_fused_kernels(plain):
    for got, want in zip(_lstm_step(plain), _lstm_step(ndl.cpu_numpy())):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _transformer_lm_step(device):
    # words repeated within the batch, and positions (each used by every sequence)
    np.random.seed(6)
    embedding = ndl.nn.Embedding(11, 8, device=device)
    transformer = ndl.nn.Transformer(8, 16, 1, num_head=2, dim_head=4, device=device, sequence_len=5)
    linear = ndl.nn.Linear(8, 11, device=device)
    ids = ndl.Tensor(np.random.randint(0, 11, (5, 3)).astype(np.float32), device=device)
    out, _ = transformer(embedding(ids))
    loss = ndl.nn.SoftmaxLoss()(linear(out.reshape((15, 8))), np.random.randint(0, 11, 15))
    loss.backward()
    params = embedding.parameters() + transformer.parameters() + linear.parameters()
    return [loss.numpy()] + [p.grad.numpy() for p in params]


def test_language_model_runs_the_same_without_fused_kernels(plain):
    """The embeddings' gather and scatter and the output layer's product with its bias, each
    through the host or generic operations on a device without its kernel."""
    assert not hasattr(plain, "embedding_gather") and hasattr(ndl.cpu_numpy(), "embedding_gather")
    for got, want in zip(_transformer_lm_step(plain), _transformer_lm_step(ndl.cpu_numpy())):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _activation_grads(device):
    x = ndl.Tensor(np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6), device=device)
    (ndl.relu(x) * 2.0 + ndl.tanh(x) * 3.0 + ndl.sigmoid(x) * 5.0).sum().backward()
    return x.grad.numpy()


def test_activation_adjoints_the_same_without_their_kernels(plain):
    assert not hasattr(plain, "ewise_tanh_backward")
    np.testing.assert_allclose(_activation_grads(plain), _activation_grads(ndl.cpu_numpy()), rtol=1e-6, atol=1e-6)


def _adam_steps(device):
    np.random.seed(7)
    model = ndl.nn.Sequential(ndl.nn.Linear(5, 4, device=device), ndl.nn.ReLU(), ndl.nn.Linear(4, 3, device=device))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.001)
    x = ndl.Tensor(np.random.randn(6, 5).astype(np.float32), device=device)
    for _ in range(3):
        opt.reset_grad()
        (model(x) ** 2).sum().backward(create_graph=False)
        opt.step()
    return [p.numpy() for p in model.parameters()] + [opt.m[p].numpy() for p in model.parameters()]


def test_adam_steps_the_same_without_the_multi_tensor_kernel(plain):
    # all parameters in one adam_update_many call where the device has it, one adam_update each where not
    assert not hasattr(plain, "adam_update_many") and hasattr(ndl.cpu_numpy(), "adam_update_many")
    for got, want in zip(_adam_steps(plain), _adam_steps(ndl.cpu_numpy())):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_adam_update_many_checks_its_arguments():
    nd = ndl.backend_ndarray
    p = nd.array(np.zeros((2, 3), np.float32), device=ndl.cpu())
    with pytest.raises(ValueError, match="the lists must be of one length"):
        nd.adam_update_many([p, p], [p], [p, p], [p, p], 0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001)
    q = nd.array(np.zeros((3, 2), np.float32), device=ndl.cpu())
    with pytest.raises(ValueError, match=r"params\[1\].*grad must be an NDArray of shape \(3, 2\)"):
        nd.adam_update_many([p, q], [p, p], [p, q], [p, q], 0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001)
    assert nd.adam_update_many([], [], [], [], 0.1, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001) == []


def test_adam_update_many_of_parameters_on_two_devices():
    # one call per parameter then, each on its own device: the values of adam_update
    nd = ndl.backend_ndarray
    rng = np.random.default_rng(3)
    # (param, grad, m, v), v >= 0 as a second moment is
    arrays = [[np.abs(rng.standard_normal((2, 3))).astype(np.float32) for _ in range(4)] for _ in range(2)]
    devices = (ndl.cpu(), ndl.cpu_numpy())
    states = [[nd.array(a, device=dev) for a in state] for state, dev in zip(arrays, devices)]
    got = nd.adam_update_many(*([s[k] for s in states] for k in range(4)), 0.1, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001)
    for out, state, dev in zip(got, arrays, devices):
        assert out.device == dev
        want = nd.adam_update(*(nd.array(a, device=dev) for a in state), 0.1, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001)
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("which", ["cpu", "cpu_numpy", "plain"])
def test_bias_add_in_place_writes_into_its_input(plain, which):
    device = plain if which == "plain" else getattr(ndl, which)()
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    X = ndl.backend_ndarray.NDArray(x, device=device)
    out = ndl.backend_ndarray.bias_add(X, ndl.backend_ndarray.NDArray(b, device=device), in_place=True)
    assert out is X
    np.testing.assert_allclose(X.numpy(), x + b, rtol=1e-6)
    with pytest.raises(ValueError, match="in_place needs a compact x"):
        ndl.backend_ndarray.bias_add(X.permute((1, 0)), ndl.backend_ndarray.NDArray(np.zeros(5, np.float32),
                                                                               device=device), in_place=True)


def test_numpy_mode_bias_add_in_place():
    from needle_kernels import backend_numpy
    x, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2, 3], np.float32)
    out = backend_numpy.bias_add(x, b, in_place=True)
    assert out is x
    np.testing.assert_array_equal(x, [[1, 3, 5], [4, 6, 8]])


@pytest.mark.parametrize("create_graph", [True, False])
def test_layernorm_runs_the_same_without_its_kernels(plain, create_graph):
    def step(device):
        np.random.seed(6)
        ln = ndl.nn.LayerNorm1d(5, device=device)
        ln.weight.data = ndl.Tensor(np.random.randn(5).astype(np.float32), device=device)
        x = ndl.Tensor(np.random.randn(3, 4, 5).astype(np.float32) * 2 + 1, device=device)
        out = ln(x)
        (out * ndl.Tensor(np.random.randn(3, 4, 5).astype(np.float32), device=device)).sum().backward(
            create_graph=create_graph)
        return [out.numpy(), x.grad.numpy(), ln.weight.grad.numpy(), ln.bias.grad.numpy()]

    assert not hasattr(plain, "layernorm")
    for got, want in zip(step(plain), step(ndl.cpu_numpy())):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("create_graph", [True, False])
def test_rmsnorm_runs_the_same_without_its_kernels(plain, create_graph):
    def step(device):
        np.random.seed(7)
        norm = ndl.nn.RMSNorm1d(5, device=device)
        norm.weight.data = ndl.Tensor(np.random.randn(5).astype(np.float32), device=device)
        x = ndl.Tensor(np.random.randn(3, 4, 5).astype(np.float32) * 2 + 1, device=device)
        out = norm(x)
        (out * ndl.Tensor(np.random.randn(3, 4, 5).astype(np.float32), device=device)).sum().backward(
            create_graph=create_graph)
        return [out.numpy(), x.grad.numpy(), norm.weight.grad.numpy()]

    assert not hasattr(plain, "rmsnorm")
    for got, want in zip(step(plain), step(ndl.cpu_numpy())):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("create_graph", [True, False])
def test_attention_runs_the_same_without_the_softmax_kernels(plain, create_graph):
    def step(device):
        np.random.seed(8)
        q, k, v = (ndl.Tensor(np.random.randn(2, 3, 4, 5).astype(np.float32), device=device) for _ in range(3))
        out, probs = ndl.nn.MultiHeadAttention(causal=True, device=device)(q, k, v)
        (out * ndl.Tensor(np.random.randn(2, 3, 4, 5).astype(np.float32), device=device)).sum().backward(
            create_graph=create_graph)
        return [out.numpy(), probs.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()]

    assert not hasattr(plain, "softmax")
    for got, want in zip(step(plain), step(ndl.cpu_numpy())):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
