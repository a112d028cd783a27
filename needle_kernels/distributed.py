"""Data-parallel training over MPI: every process holds the whole model and a shard of the data.

One step, on each of the ``world`` processes (``mpiexec -n 2 python train.py``)::

    grads_r = d loss(shard_r) / d params          # backward on the local half-batch
    grads   = (1 / world) * sum_r grads_r         # Allreduce, the only communication
    params  = optimizer(params, grads)            # the same update everywhere

If every process starts from the same parameters (``broadcast_parameters``, from rank 0)
and the loss is a mean over the batch, the averaged gradient is the gradient of the whole
batch, so ``world`` processes on ``B / world`` examples each follow exactly the
trajectory of one process on ``B``. Gradients travel in buckets: the flat gradients of
consecutive parameters are copied into one contiguous float32 buffer of about
``bucket_bytes`` and reduced with a single ``Allreduce``, because one large message costs
far less than many small ones (latency is paid per message).

Only MPI carries data between processes (no shared files, no shared memory), so the same
code runs on one host or many; ``mpiexec -hosts a,b`` is all that changes. ``mpi4py`` and
an MPI library (``pip install mpi4py mpich``, the ``distributed`` extra) are needed; they
are imported on first use.

A process that fails takes the job down: ``init`` installs an exception hook that calls
``MPI_Abort``, so the other ranks exit with an error instead of waiting forever in their
next ``Allreduce`` (and MPICH's launcher ends the job when a process is killed).
"""
import math
import sys

import numpy as np

from .autograd import Tensor
from .data.data_basic import Dataset

DEFAULT_BUCKET_BYTES = 4 << 20


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as err:  # pragma: no cover - the message is the point
        raise ImportError("needle_kernels.distributed needs mpi4py and an MPI library: "
                          "pip install mpi4py mpich (or pip install -e '.[distributed]')") from err
    return MPI


class Context:
    """This process's place in the job: ``rank`` in ``0..world-1`` and the communicator."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.world = comm.Get_size()

    @property
    def is_root(self):
        return self.rank == 0

    def barrier(self):
        self.comm.Barrier()

    def allreduce_mean(self, value):
        """The mean of a Python number over all processes (for losses and accuracies)."""
        return self.comm.allreduce(float(value)) / self.world

    def abort(self, code=1):
        self.comm.Abort(code)


_CONTEXT = None


def init(comm=None, abort_on_error=True):
    """The job's context (``MPI.COMM_WORLD`` unless ``comm`` is given); safe to call twice."""
    global _CONTEXT
    if _CONTEXT is None or (comm is not None and comm is not _CONTEXT.comm):
        MPI = _mpi()
        _CONTEXT = Context(comm or MPI.COMM_WORLD)
        if abort_on_error and _CONTEXT.world > 1:
            _abort_on_uncaught_exception(_CONTEXT)
    return _CONTEXT


def _abort_on_uncaught_exception(ctx):
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write(f"rank {ctx.rank}: aborting the MPI job after an uncaught {kind.__name__}\n")
        sys.stderr.flush()
        ctx.abort(1)
    sys.excepthook = hook


def _context(ctx):
    return ctx or init()


def broadcast_parameters(params, root=0, ctx=None):
    """Give every process rank ``root``'s values of ``params`` (in place, through ``.data``)."""
    ctx = _context(ctx)
    for p in params:
        buf = np.ascontiguousarray(p.numpy(), dtype=np.float32)
        ctx.comm.Bcast(buf, root=root)
        p.data = Tensor(buf, device=p.device, dtype=p.dtype, requires_grad=False)


def buckets(params, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Consecutive parameters grouped so each group's gradients fill about ``bucket_bytes``."""
    groups, current, size = [], [], 0
    for p in params:
        nbytes = 4 * int(np.prod(p.shape))
        if current and size + nbytes > bucket_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        groups.append(current)
    return groups


def allreduce_gradients(params, ctx=None, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Replace each ``p.grad`` by its mean over all processes; returns the number of messages.

    A parameter without a gradient on this process contributes zeros, so every process
    sends buffers of the same layout (a mismatch would deadlock or mix up parameters).
    """
    ctx = _context(ctx)
    params = list(params)
    if ctx.world == 1:
        return 0
    MPI = _mpi()
    messages = 0
    for group in buckets(params, bucket_bytes):
        sizes = [int(np.prod(p.shape)) for p in group]
        flat = np.empty(sum(sizes), dtype=np.float32)
        offset = 0
        for p, n in zip(group, sizes):
            flat[offset:offset + n] = 0.0 if p.grad is None else p.grad.numpy().reshape(-1)
            offset += n
        ctx.comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        messages += 1
        flat /= ctx.world
        offset = 0
        for p, n in zip(group, sizes):
            p.grad = Tensor(flat[offset:offset + n].reshape(p.shape), device=p.device, dtype=p.dtype,
                            requires_grad=False)
            offset += n
    return messages


class DistributedOptimizer:
    """An optimizer whose ``step`` first averages the gradients over all processes."""

    def __init__(self, optimizer, ctx=None, bucket_bytes=DEFAULT_BUCKET_BYTES):
        self.optimizer = optimizer
        self.ctx = _context(ctx)
        self.bucket_bytes = bucket_bytes
        self.params = optimizer.params

    def step(self):
        allreduce_gradients(self.params, self.ctx, self.bucket_bytes)
        self.optimizer.step()

    def reset_grad(self):
        self.optimizer.reset_grad()

    zero_grad = reset_grad


class ShardedDataset(Dataset):
    """This process's share of ``dataset``, as PyTorch's ``DistributedSampler`` deals it.

    The order (a permutation seeded by ``seed + epoch`` when ``shuffle``, the identity
    otherwise) is the same on every process; it is padded by repeating its start to a
    multiple of ``world`` and process ``rank`` takes every ``world``-th index from
    ``rank``. Call ``set_epoch`` before each epoch so the shuffle changes.
    """

    def __init__(self, dataset, ctx=None, shuffle=False, seed=0):
        super().__init__()
        ctx = _context(ctx)
        self.dataset, self.rank, self.world = dataset, ctx.rank, ctx.world
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.per_rank = math.ceil(len(dataset) / self.world)
        self._indices = self._deal()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._indices = self._deal()

    def _deal(self):
        n = len(self.dataset)
        order = (np.random.default_rng(self.seed + self.epoch).permutation(n) if self.shuffle
                 else np.arange(n))
        padded = np.resize(order, self.per_rank * self.world)
        return padded[self.rank::self.world]

    def __len__(self):
        return self.per_rank

    def __getitem__(self, index):
        return self.dataset[int(self._indices[index])]
