"""Lab 1: a solution that hands its work to the package earns nothing.

The lab's parts (``grad_x``, ``cy_forward``, ``cuda_forward``, ...) have no twin in the package, so
the generic proof in ``test_own_work.py`` has nothing to alias or subclass for them. What could do
their work are the package objects the lab blocks (``nn.Linear``, ``ops.matmul``, the backends'
``matmul`` kernels). Here every solution cell is rewritten to compute through them, keeping the
requested form (numpy functions, a ``%%cython`` cell, launch functions), and the notebook is run
in order, as nbgrader runs it: every test cell fails with the kit's refusal to run the package's
object, so none of them can earn a point.
"""
import nbformat
import pytest

from nbhelpers import ASSIGNMENTS, kernel_env

LAB = ASSIGNMENTS / "lab1" / "lab1.ipynb"
REFUSAL = "would do this assignment's work"

PACKAGE_SOLUTIONS = {
    "lab1_t1_gradients": r'''
def grad_x(dy, W):
    x = ndl.Tensor(np.zeros((dy.shape[0], W.shape[1]), dtype=np.float32))
    y = x @ ndl.Tensor(np.ascontiguousarray(W.T, dtype=np.float32))
    (y * ndl.Tensor(dy.astype(np.float32), requires_grad=False)).sum().backward()
    return x.grad.numpy().astype(dy.dtype)


def grad_W(dy, x):
    layer = nn.Linear(x.shape[1], dy.shape[1])
    (layer(ndl.Tensor(x.astype(np.float32))) * ndl.Tensor(dy.astype(np.float32), requires_grad=False)).sum().backward()
    return layer.weight.grad.numpy().T.astype(dy.dtype)


def grad_b(dy):
    layer = nn.Linear(1, dy.shape[1])
    out = layer(ndl.Tensor(np.zeros((dy.shape[0], 1), dtype=np.float32)))
    (out * ndl.Tensor(dy.astype(np.float32), requires_grad=False)).sum().backward()
    return layer.bias.grad.numpy().reshape(-1).astype(dy.dtype)
''',
    "lab1_t2_cython": r'''
%%cython --compile-args=-fopenmp --link-args=-fopenmp
# cython: language_level=3
import numpy as np
import needle_kernels as ndl
cimport openmp


def omp_max_threads():
    return openmp.omp_get_max_threads()


def _nd(a):
    return ndl.backend_ndarray.array(np.ascontiguousarray(a, dtype=np.float32), device=ndl.cpu())


def cy_forward(x, W, b):
    return (_nd(x) @ _nd(np.asarray(W).T)).numpy() + np.asarray(b)


def cy_grad_x(dy, W):
    return (_nd(dy) @ _nd(W)).numpy()


def cy_grad_W(dy, x):
    return (_nd(np.asarray(dy).T) @ _nd(x)).numpy()


def cy_grad_b(dy):
    return (_nd(np.ones((1, np.asarray(dy).shape[0]))) @ _nd(dy)).numpy().reshape(-1)
''',
    "lab1_t3_cuda": r'''
def _nd(v):
    return ndl.backend_ndarray.array(np.ascontiguousarray(cp.asnumpy(v), dtype=np.float32), device=ndl.cpu())


def cuda_forward(x, W, b):
    return cp.asarray((_nd(x) @ _nd(cp.asnumpy(W).T)).numpy() + cp.asnumpy(b))


def cuda_grad_x(dy, W):
    return cp.asarray((_nd(dy) @ _nd(W)).numpy())


def cuda_grad_W(dy, x):
    return cp.asarray((_nd(cp.asnumpy(dy).T) @ _nd(x)).numpy())


def cuda_grad_b(dy):
    return cp.asarray((_nd(np.ones((1, dy.shape[0]))) @ _nd(dy)).numpy().reshape(-1))
''',
    "lab1_t4_tiled": r'''
def cuda_matmul(A, B):
    nd = lambda v: ndl.backend_ndarray.array(np.ascontiguousarray(cp.asnumpy(v)), device=ndl.cpu())
    return cp.asarray((nd(A) @ nd(B)).numpy())
''',
}


@pytest.mark.slow
def test_solutions_computed_by_the_package_earn_nothing(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(LAB, as_version=4)
    solution_ids = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("solution")}
    assert solution_ids == set(PACKAGE_SOLUTIONS), solution_ids
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in PACKAGE_SOLUTIONS:
            cell.source = PACKAGE_SOLUTIONS[gid].strip("\n")
    # the host stand-in runs the CUDA cells on any machine
    env = kernel_env({"COURSEKIT_CUDA": "host", "CUPY_HOST_BUILD_DIR": str(tmp_path / "cupy_host")})
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)

    errors, tests = {}, []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        found = [f"{o['ename']}: {o['evalue']}" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if meta.get("grade"):
            tests.append(gid)
        if found:
            errors[gid] = found[0]
    setup_errors = {g: e for g, e in errors.items() if g in ("lab1_setup", "lab1_cython_magic", *PACKAGE_SOLUTIONS)}
    assert not setup_errors, f"set-up or solution cells failed: {setup_errors}"
    assert len(tests) == 12, tests
    passed = [g for g in tests if g not in errors]
    assert not passed, f"test cells passed with the package doing the work: {passed}"
    other = {g: errors[g] for g in tests if REFUSAL not in errors[g]}
    assert not other, f"test cells failed for another reason than the package's refusal: {other}"
