"""Activation checkpointing: the same gradients as the plain forward, fewer live activations."""
import gc

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels import autograd, nn


def deep_mlp(depth, width, device):
    np.random.seed(0)
    return [nn.Sequential(nn.Linear(width, width, device=device), nn.Tanh() if hasattr(nn, "Tanh") else nn.ReLU())
            for _ in range(depth)]


def grads_of(blocks, x, segment, create_graph=True):
    """Input and parameter gradients of sum(out * r), with blocks run in checkpointed segments."""
    h = x
    for i in range(0, len(blocks), segment):
        group = nn.Sequential(*blocks[i:i + segment])
        h = ndl.checkpoint(group, h) if segment > 1 or segment == -1 else group(h)
    r = np.random.default_rng(1).standard_normal(h.shape).astype(np.float32)
    (h * ndl.Tensor(r, device=x.device, requires_grad=False)).sum().backward(create_graph=create_graph)
    params = [p for b in blocks for p in b.parameters()]
    out = [x.grad.numpy()] + [p.grad.numpy() for p in params]
    for t in [x] + params:
        t.grad = None
    return out


def test_gradients_equal_the_plain_forward(device):
    blocks = deep_mlp(6, 8, device)
    x = ndl.Tensor(np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32), device=device)
    plain = grads_of(blocks, x, 1)
    for segment in (2, 3):
        # a backward pass that records nothing still records the segment it recomputes
        for create_graph in (True, False):
            got = grads_of(blocks, x, segment, create_graph)
            for a, b in zip(got, plain):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_checkpoint_module_in_a_sequential(device):
    blocks = deep_mlp(4, 6, device)
    x = ndl.Tensor(np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32), device=device)
    plain = nn.Sequential(*blocks)(x).sum()
    plain.backward()
    want = [p.grad.numpy() for b in blocks for p in b.parameters()] + [x.grad.numpy()]
    for t in [x] + [p for b in blocks for p in b.parameters()]:
        t.grad = None
    model = nn.Sequential(nn.Checkpoint(nn.Sequential(*blocks[:2])), nn.Checkpoint(nn.Sequential(*blocks[2:])))
    out = model(x).sum()
    np.testing.assert_allclose(out.numpy(), plain.numpy(), rtol=1e-6)
    out.backward()
    got = [p.grad.numpy() for b in blocks for p in b.parameters()] + [x.grad.numpy()]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(model.parameters()) == sum(len(b.parameters()) for b in blocks)


def live_tensors_after_forward(blocks, x, segment):
    gc.collect()
    before = autograd.TENSOR_COUNTER
    h = x
    for i in range(0, len(blocks), segment):
        group = nn.Sequential(*blocks[i:i + segment])
        h = ndl.checkpoint(group, h) if segment > 1 else group(h)
    gc.collect()
    return autograd.TENSOR_COUNTER - before, h


def test_forward_keeps_only_segment_boundaries():
    """Plain: every layer's output stays alive until backward; checkpointed in segments of
    K, only the N/K boundaries do."""
    device = ndl.cpu()
    blocks = deep_mlp(16, 8, device)
    x = ndl.Tensor(np.ones((4, 8), dtype=np.float32), device=device)
    plain, h1 = live_tensors_after_forward(blocks, x, 1)
    del h1
    kept, h4 = live_tensors_after_forward(blocks, x, 4)
    assert kept <= 4 + 1, kept          # one node per segment (+ the loss-free output)
    assert plain >= 16 * 2, plain       # at least a linear and an activation per layer
    del h4


def test_a_segment_must_return_a_tensor():
    with pytest.raises(TypeError, match="one Tensor"):
        ndl.checkpoint(lambda x: (x, x), ndl.Tensor(np.ones(2, dtype=np.float32)))
    with pytest.raises(TypeError, match="input 0 must be a Tensor"):
        ndl.checkpoint(lambda x: x, np.ones(2))


from needle_kernels.backend_selection import BACKEND  # noqa: E402

# the allocator's byte counters belong to the NDArray backends (plain numpy mode has none)
ALLOCATOR_DEVICES = [pytest.param(ndl.cpu(), id="cpu"), pytest.param(ndl.cpu_numpy(), id="cpu_numpy")]


def peak_of_step(blocks, x, segment):
    """Bytes the backend's allocator held at the peak of forward + backward."""
    x.device.reset_peak_memory()
    base = x.device.memory_stats()["live_bytes"]
    h = x
    for i in range(0, len(blocks), segment):
        group = nn.Sequential(*blocks[i:i + segment])
        h = ndl.checkpoint(group, h) if segment > 1 else group(h)
    h.sum().backward()
    peak = x.device.memory_stats()["peak_bytes"] - base
    for p in [p for b in blocks for p in b.parameters()] + [x]:
        p.grad = None
    return peak


if BACKEND != "np":
    @pytest.mark.parametrize("device", ALLOCATOR_DEVICES)
    def test_checkpointing_lowers_the_allocator_peak(device):
        blocks = deep_mlp(16, 64, device)
        x = ndl.Tensor(np.ones((128, 64), dtype=np.float32), device=device, requires_grad=False)
        # with the cyclic collector off, a recomputed segment must be freed by reference
        # counting alone, as soon as its gradient is taken (4 of 16 blocks alive at a time)
        gc.collect()
        gc.disable()
        try:
            plain = peak_of_step(blocks, x, 1)
            kept = peak_of_step(blocks, x, 4)
        finally:
            gc.enable()
        assert kept < 0.5 * plain, (kept, plain)
