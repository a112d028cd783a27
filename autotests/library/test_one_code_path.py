"""One code path: only the array API selection knows which array API is in use.

Autograd, ops, nn, optim, init, data and apps call ``array_api`` functions,
which both array APIs provide (fused optimizer updates, col2im, float
comparisons, ``device_of`` included), so none of them tests ``BACKEND`` or
imports from inside ``backend_ndarray``.
"""
import ast
from pathlib import Path

import needle_kernels

PACKAGE = Path(needle_kernels.__file__).parent
# the selection itself and the two array APIs it chooses between
ALLOWED = {PACKAGE / "backend_selection.py", PACKAGE / "backend_numpy.py"}
ALLOWED_DIRS = {PACKAGE / "backend_ndarray"}


def _library_files():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in ALLOWED or any(d in path.parents for d in ALLOWED_DIRS):
            continue
        yield path


def _mode_tests(path):
    """Lines that read BACKEND or import from inside backend_ndarray."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Name) and node.id == "BACKEND":
            found.append((node.lineno, "reads BACKEND"))
        elif isinstance(node, ast.Attribute) and node.attr == "BACKEND":
            found.append((node.lineno, "reads .BACKEND"))
        elif isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            if "BACKEND" in names:
                found.append((node.lineno, "imports BACKEND"))
            if node.module and "backend_ndarray" in node.module.split("."):
                found.append((node.lineno, f"imports from {node.module}"))
        elif isinstance(node, ast.Import) and any("backend_ndarray" in a.name for a in node.names):
            found.append((node.lineno, "imports backend_ndarray"))
    return found


def test_no_code_outside_the_array_apis_tests_the_mode():
    offenders = {str(p.relative_to(PACKAGE)): hits for p in _library_files() if (hits := _mode_tests(p))}
    assert offenders == {}


def test_the_check_sees_a_mode_test(tmp_path):
    # the checker itself must notice each form it forbids
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from .backend_selection import BACKEND\n"
        "import needle_kernels.backend_selection as s\n"
        "if s.BACKEND == 'nd':\n"
        "    from .backend_ndarray import ndarray\n"
    )
    assert sorted(line for line, _ in _mode_tests(sample)) == [1, 3, 4]


def test_both_array_apis_offer_what_the_library_calls():
    import needle_kernels.backend_ndarray as nd
    from needle_kernels import backend_numpy

    needed = ("array", "full", "sum", "max", "maximum", "exp", "log", "tanh", "reshape", "broadcast_to",
              "transpose", "flip", "pad", "stack", "as_strided", "greater", "equal", "col2im",
              "sgd_update", "adam_update", "adam_update_many", "batchnorm_fold", "device_of", "element_strides")
    for name in needed:
        assert callable(getattr(nd, name)), name
        assert callable(getattr(backend_numpy, name)), name


def test_numpy_array_api_computes_what_the_ndarray_kernels_compute():
    import numpy as np

    import needle_kernels.backend_ndarray as nd
    from needle_kernels import backend_numpy

    rng = np.random.default_rng(0)
    cols = rng.standard_normal((2, 3, 3, 3, 3, 2)).astype(np.float32)  # 3x3 windows, stride 2, of 7x7
    want = nd.col2im(nd.array(cols, device=nd.cpu_numpy()), (2, 7, 7, 2), 2).numpy()
    np.testing.assert_allclose(backend_numpy.col2im(cols, (2, 7, 7, 2), 2), want, rtol=1e-6, atol=1e-6)
    p, g = (rng.standard_normal((4, 5)).astype(np.float32) for _ in range(2))
    for momentum, decay in ((0.0, 0.0), (0.9, 0.01)):
        u_np, u_nd = np.zeros_like(p), nd.array(np.zeros_like(p), device=nd.cpu_numpy())
        for _ in range(2):
            out_np = backend_numpy.sgd_update(p, g, u_np if momentum else None, 0.1, momentum, decay)
            out_nd = nd.sgd_update(nd.array(p, device=nd.cpu_numpy()), nd.array(g, device=nd.cpu_numpy()),
                                   u_nd if momentum else None, 0.1, momentum, decay)
            np.testing.assert_allclose(out_np, out_nd.numpy(), rtol=1e-6, atol=1e-7)
    m_np, v_np = np.zeros_like(p), np.zeros_like(p)
    m_nd, v_nd = (nd.array(np.zeros_like(p), device=nd.cpu_numpy()) for _ in range(2))
    for t in (1, 2):
        c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
        out_np = backend_numpy.adam_update(p, g, m_np, v_np, 0.01, 0.9, 0.999, 1e-8, 0.001, c1, c2)
        out_nd = nd.adam_update(nd.array(p, device=nd.cpu_numpy()), nd.array(g, device=nd.cpu_numpy()),
                                m_nd, v_nd, 0.01, 0.9, 0.999, 1e-8, 0.001, c1, c2)
        np.testing.assert_allclose(out_np, out_nd.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(backend_numpy.greater(np.array([-1.0, 2.0], np.float32), 0.0), [0.0, 1.0])
    assert backend_numpy.greater(np.zeros(2), 0.0).dtype == np.float64
