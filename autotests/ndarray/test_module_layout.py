"""The NDArray package's layering: devices know nothing of arrays; ndarray.py is the view class."""
import ast
from pathlib import Path

import needle_kernels.backend_ndarray as nd

PACKAGE = Path(nd.__file__).parent


def _imports(path):
    """The modules ``from X import ...`` names where the import runs when the module loads."""
    found = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return  # runs when called, after every module has loaded
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def test_device_module_does_not_import_the_array_modules():
    # device.py <- ndarray.py <- ndarray_functions.py / ndarray_fused.py: no cycle
    # (the device's constructors import NDArray when first called, after both have loaded)
    assert not {m for m in _imports(PACKAGE / "device.py") if m.startswith("ndarray")}
    assert "device" in _imports(PACKAGE / "ndarray.py")


def test_ndarray_module_holds_the_view_class_only():
    tree = ast.parse((PACKAGE / "ndarray.py").read_text())
    public = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]
    assert public == ["prod", "compact_strides", "NDArray"]


def test_device_constructors_build_ndarrays():
    dev = nd.cpu_numpy()
    for arr in (dev.rand(2, 3), dev.randn(2, 3), dev.empty((2, 3)), dev.full((2, 3), 1.5), dev.one_hot(3, [0, 2])):
        assert isinstance(arr, nd.NDArray) and arr.device == dev
