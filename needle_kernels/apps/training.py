"""The training loop shared by the reference applications' epoch functions.

``mlp_resnet.epoch``, ``simple_ml.epoch_general_cifar10`` and
``simple_ml.epoch_general_ptb`` differ only in how a batch becomes logits
and a loss (flattening images, moving them to a device, carrying an RNN's
state) and in which statistics they report; the pass itself (train or eval
mode, reset, backward, clip, step, counting) is written once, here.
Library objects are looked up on the package when used (``ndl.optim``), so
a patched ``needle_kernels`` attribute is the one that runs.
"""
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm


@dataclass
class EpochResult:
    """What one pass measured: ``correct`` of ``n`` predictions right, the
    sample-weighted ``mean_loss`` and the unweighted ``mean_batch_loss``."""

    correct: int
    n: int
    mean_loss: float
    mean_batch_loss: float

    @property
    def accuracy(self):
        return self.correct / self.n

    @property
    def error_rate(self):
        return (self.n - self.correct) / self.n


def clip_gradients(opt, params, max_norm):
    """Scale the gradients of ``params`` so their global L2 norm is at most ``max_norm``
    (the optimizer's ``clip_grad_norm`` when it has one, else ``ndl.optim.clip_grad_norm``)."""
    import needle_kernels as ndl

    clip = getattr(opt, "clip_grad_norm", None)
    if callable(clip):
        return clip(max_norm)
    fn = getattr(ndl.optim, "clip_grad_norm", None)
    if callable(fn):
        return fn(params, max_norm)
    raise AttributeError("needle_kernels.optim provides no clip_grad_norm")


def run_epoch(batches, model, forward, opt=None, *, clip=None, progress=False):
    """One pass over ``batches``: trains when ``opt`` is given, else evaluates.

    ``forward(batch) -> (logits (n, classes), loss, labels (n,))``. Training
    resets the gradients, back-propagates the loss, clips them to global norm
    ``clip`` when it is set and steps the optimizer, once per batch.
    """
    model.train() if opt is not None else model.eval()
    correct, n, weighted, losses = 0, 0, 0.0, []
    bar = tqdm(batches, disable=not progress, desc="train" if opt is not None else "eval", leave=False)
    for batch in bar:
        out, loss, y = forward(batch)
        if opt is not None:
            opt.reset_grad()
            loss.backward(create_graph=False)  # nothing differentiates the gradients
            if clip is not None:
                clip_gradients(opt, model.parameters(), clip)
            opt.step()
        b = y.shape[0]
        correct += int((out.numpy().argmax(axis=1) == y.numpy()).sum())
        value = float(loss.numpy())
        losses.append(value)
        weighted += value * b
        n += b
        if progress:
            bar.set_postfix(acc=f"{correct / n:.3f}", loss=f"{weighted / n:.3f}")
    return EpochResult(correct, n, weighted / n, float(np.mean(losses)))
