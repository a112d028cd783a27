"""Run under mpiexec: train an MLP for a few steps, data-parallel over the ranks.

argv: OUT (an .npz written by rank 0 with the final parameters) STEPS [DIE_AT_STEP [exit|raise]]
With one process this is plain training on the whole batch; with W processes each rank
trains on its 1/W share and averages gradients, which must give the same parameters.
Rank 1, told to die, exits abruptly or raises at that step (the others must not hang).
"""
import os
import sys

import numpy as np

import needle_kernels as ndl
from needle_kernels import distributed, nn

out, steps = sys.argv[1], int(sys.argv[2])
die_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
how = sys.argv[4] if len(sys.argv) > 4 else "exit"
ctx = distributed.init()

rng = np.random.default_rng(0)
X = rng.standard_normal((64, 10)).astype(np.float32)
y = rng.integers(0, 3, 64)
data = distributed.ShardedDataset(ndl.data.NDArrayDataset(X, y), ctx)
loader = ndl.data.DataLoader(data, batch_size=64 // ctx.world)

np.random.seed(100 + ctx.rank)      # different initial weights on every rank ...
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
distributed.broadcast_parameters(model.parameters(), ctx=ctx)   # ... until rank 0's are broadcast
opt = distributed.DistributedOptimizer(ndl.optim.Adam(model.parameters(), lr=0.05), ctx)
loss_fn = nn.SoftmaxLoss()
for step in range(steps):
    if step == die_at and ctx.rank == 1:
        if how == "raise":
            raise RuntimeError("rank 1 fails on purpose")
        os._exit(3)
    for xb, yb in loader:
        opt.reset_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
    print(f"rank {ctx.rank} step {step} loss {ctx.allreduce_mean(loss.numpy()):.6f}", flush=True)
if ctx.is_root:
    np.savez(out, *[p.numpy() for p in model.parameters()])
print(f"rank {ctx.rank} finished", flush=True)
