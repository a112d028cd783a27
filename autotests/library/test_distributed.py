"""Data-parallel training over MPI (needle_kernels.distributed), run for real with mpiexec.

Two ranks on half-batches must end with the parameters of one process on the whole batch,
and a rank that dies (exits, or raises) must end the job with an error, not a hang.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from needle_kernels import distributed

mpi4py = pytest.importorskip("mpi4py", reason="pip install mpi4py mpich (the 'distributed' extra)")
PROGRAM = Path(__file__).resolve().parent / "mpi_programs" / "data_parallel_steps.py"
MPIEXEC = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))


def run(n, *args, timeout=120):
    cmd = [MPIEXEC, "-n", str(n), sys.executable, str(PROGRAM), *map(str, args)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - t0


def test_mpiexec_is_there():
    assert MPIEXEC, "mpiexec not found next to the interpreter or on PATH (pip install mpich)"


def test_two_ranks_on_half_batches_equal_one_process(tmp_path):
    one, _ = run(1, tmp_path / "one.npz", 4)
    two, _ = run(2, tmp_path / "two.npz", 4)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert list(a) == list(b)
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6, err_msg=key)
    # both ranks saw the same averaged loss at every step (the ranks' lines may interleave)
    by_step = {}
    for rank, step, loss in re.findall(r"rank (\d+) step (\d+) loss (\d+\.\d{6})", two.stdout):
        by_step.setdefault(step, set()).add(loss)
    assert len(by_step) == 4 and all(len(v) == 1 for v in by_step.values()), two.stdout


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_dead_rank_ends_the_job_with_an_error(tmp_path, how):
    proc, seconds = run(2, tmp_path / "x.npz", 50, 1, how, timeout=90)
    assert proc.returncode != 0, proc.stdout
    assert "rank 0 finished" not in proc.stdout
    assert seconds < 60, f"the job took {seconds:.0f} s to end after rank 1 died"


class _Place:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world


def test_sharded_dataset_deals_every_example_once_per_epoch():
    data = list(range(10))
    shards = [distributed.ShardedDataset(data, _Place(r, 3), shuffle=True, seed=5) for r in range(3)]
    seen = sorted(x for s in shards for x in (s[i] for i in range(len(s))))
    assert len(shards[0]) == 4 and len(seen) == 12          # padded to a multiple of the world
    assert set(seen) == set(range(10))
    first = [shards[0][i] for i in range(4)]
    for s in shards:
        s.set_epoch(1)
    assert [shards[0][i] for i in range(4)] != first        # a new order each epoch


def test_buckets_keep_order_and_size():
    class P:
        def __init__(self, n):
            self.shape = (n,)
    params = [P(n) for n in (10, 300, 5, 1000, 7)]
    groups = distributed.buckets(params, bucket_bytes=4 * 400)
    assert [p for g in groups for p in g] == params
    assert [[p.shape[0] for p in g] for g in groups] == [[10, 300, 5], [1000], [7]]
