"""Whole models give the same results on every device (cpu_numpy() is the reference), same seed."""
import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.apps import mlp_resnet
from needle_kernels.apps.models import LanguageModel, ResNet9

RTOL = ATOL = 1e-4

# the devices compared with the reference cpu_numpy() (numpy mode has no devices to compare:
# conftest leaves this module out there)
_cuda = ndl.cuda()
COMPARED = [
    pytest.param(ndl.cpu(), id="cpu"),
    pytest.param(_cuda, id="cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not _cuda.enabled(), reason="no CUDA device (cupy + GPU)")]),
]


def _close(a, b, what):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=what)


def _mlp_resnet_run(device):
    np.random.seed(0)
    X = np.random.rand(32, 784).astype(np.float32)
    y = np.random.randint(0, 10, 32)
    model = mlp_resnet.MLPResNet(784, hidden_dim=32, device=device)
    # SGD, not Adam: the Linear biases in front of each BatchNorm have a gradient that is exactly
    # zero in exact arithmetic, so what the devices compute for them is rounding noise of order 1e-9,
    # which Adam's g / sqrt(v) would scale up to steps of order lr on each device differently
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.001)
    model.train()
    loss_fn = ndl.nn.SoftmaxLoss()
    for step in range(3):
        xb = ndl.Tensor(X[step * 8:(step + 1) * 8], device=device, requires_grad=False)
        yb = ndl.Tensor(y[step * 8:(step + 1) * 8], device=device, requires_grad=False)
        loss = loss_fn(model(xb), yb)
        opt.reset_grad()
        loss.backward()
        opt.step()
    model.eval()
    logits = model(ndl.Tensor(X[24:], device=device, requires_grad=False)).numpy()
    return logits, [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("device", COMPARED)
def test_mlp_resnet_training_same_on_devices(device):
    ref_logits, ref_params = _mlp_resnet_run(ndl.cpu_numpy())
    logits, params = _mlp_resnet_run(device)
    _close(logits, ref_logits, "logits after 3 SGD steps")
    for k, (p, q) in enumerate(zip(params, ref_params)):
        _close(p, q, f"parameter {k}")


def _resnet9_run(device):
    np.random.seed(1)
    x = np.random.randn(4, 3, 32, 32).astype(np.float32)
    model = ResNet9(device=device)
    model.train()
    X = ndl.Tensor(x, device=device)
    out = model(X)
    (out * out).sum().backward()
    params = model.parameters()
    return out.numpy(), X.grad.numpy(), params[0].grad.numpy(), params[-2].grad.numpy()


@pytest.mark.parametrize("device", COMPARED)
def test_resnet9_same_on_devices(device):
    ref = _resnet9_run(ndl.cpu_numpy())
    got = _resnet9_run(device)
    for name, a, b in zip(("logits", "input grad", "first conv weight grad", "last linear weight grad"), got, ref):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a / scale, b / scale, rtol=RTOL, atol=ATOL, err_msg=name)


def _lm_run(device, seq_model):
    np.random.seed(2)
    T, B, V = 5, 3, 17
    x = np.random.randint(0, V, (T, B)).astype(np.float32)
    lm = LanguageModel(8, V, 12, num_layers=2, seq_model=seq_model, seq_len=T, device=device)
    logits, h = lm(ndl.Tensor(x, device=device, requires_grad=False))
    loss = ndl.nn.SoftmaxLoss()(logits, ndl.Tensor(np.roll(x, -1, 0).reshape(-1), device=device))
    loss.backward()
    return logits.numpy(), lm.embedding.weight.grad.numpy(), lm.linear.weight.grad.numpy()


@pytest.mark.parametrize("seq_model", ["rnn", "lstm", "transformer"])
@pytest.mark.parametrize("device", COMPARED)
def test_language_model_same_on_devices(device, seq_model):
    ref = _lm_run(ndl.cpu_numpy(), seq_model)
    got = _lm_run(device, seq_model)
    for name, a, b in zip(("logits", "embedding grad", "output layer grad"), got, ref):
        _close(a, b, name)
