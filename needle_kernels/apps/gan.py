"""A generative adversarial network: generator, discriminator and the alternating step.

The models of lecture 17's 2-D example: a generator of samples from noise (with no
hidden layers, a linear map G(z) = z W + b, whose samples are Gaussian with mean b and
covariance W^T W when z ~ N(0, I)) and an MLP discriminator with LeakyReLU that outputs
one logit per sample.
"""
import needle_kernels as ndl
import needle_kernels.nn as nn

__all__ = ["Generator", "Discriminator", "gan_train_step"]


def _sizes(name, first, hidden, last):
    hidden = tuple(hidden)
    for n in (first, *hidden, last):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name}: layer sizes must be positive integers, got {(first, *hidden, last)}")
    return (first, *hidden, last)


class Generator(nn.Module):
    """Noise z (B, noise_dim) -> samples (B, data_dim).

    Linear layers of sizes noise_dim -> *hidden -> data_dim with ReLU between them, held in
    ``self.layers`` (an nn.Sequential) and built in that order; ``hidden=()`` gives the single
    linear map z W + b.
    """

    def __init__(self, noise_dim, data_dim, hidden=(), device=None, dtype="float32"):
        super().__init__()
        sizes = _sizes("Generator", noise_dim, hidden, data_dim)
        self.noise_dim, self.data_dim = noise_dim, data_dim
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            if i:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(a, b, device=device, dtype=dtype))
        self.layers = nn.Sequential(*layers)

    def forward(self, z):
        if len(z.shape) != 2 or z.shape[1] != self.noise_dim:
            raise ValueError(f"Generator: noise of shape {tuple(z.shape)}, expected (B, {self.noise_dim})")
        return self.layers(z)


class Discriminator(nn.Module):
    """Samples x (B, data_dim) -> logits (B, 1) (D(x) = sigmoid(logit) is the probability of "real").

    Linear layers data_dim -> *hidden -> 1 with LeakyReLU(negative_slope) after every hidden
    layer, held in ``self.layers`` (an nn.Sequential) and built in that order.
    """

    def __init__(self, data_dim, hidden=(20, 10), negative_slope=0.2, device=None, dtype="float32"):
        super().__init__()
        sizes = _sizes("Discriminator", data_dim, hidden, 1)
        self.data_dim = data_dim
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            if i:
                layers.append(nn.LeakyReLU(negative_slope))
            layers.append(nn.Linear(a, b, device=device, dtype=dtype))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        if len(x.shape) != 2 or x.shape[1] != self.data_dim:
            raise ValueError(f"Discriminator: samples of shape {tuple(x.shape)}, expected (B, {self.data_dim})")
        return self.layers(x)


def gan_train_step(G, D, opt_g, opt_d, x_real, z, loss_fn=None):
    """One alternating step of GAN training; returns (loss_d, loss_g) as floats.

    1. fake = G(z);
    2. discriminator: reset opt_d's gradients, L_D = loss(D(x_real), real) + loss(D(fake.detach()), fake),
       backward, step opt_d. Detached, the fakes are constants: the backward pass stops at D;
    3. generator: reset opt_g's gradients, L_G = loss(D(fake), real) with the updated D (G is
       trained to make D call its fakes real), backward through D into G, step opt_g only.

    ``loss_fn(logits, target_is_real)`` defaults to ``nn.GANLoss()``.
    """
    loss_fn = nn.GANLoss() if loss_fn is None else loss_fn
    fake = G(z)
    opt_d.reset_grad()
    loss_d = loss_fn(D(x_real), True) + loss_fn(D(fake.detach()), False)
    loss_d.backward(create_graph=False)  # nothing differentiates the gradients
    opt_d.step()
    opt_g.reset_grad()
    loss_g = loss_fn(D(fake), True)
    loss_g.backward(create_graph=False)
    opt_g.step()
    return float(loss_d.numpy()), float(loss_g.numpy())
