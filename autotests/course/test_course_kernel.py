"""The course's kernel, as JupyterLab, the hub and the tests start it: the environment's own
kernel spec, whose `%%cython` cells compile as Python's own flags ask (-O3, NDEBUG) but without
debug information."""
import sys
import uuid
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from autotests.elf import assert_built_without_debug_information

# what the C compiler was asked for, seen from inside the module it built
COMPILED_WITH = '''cdef extern from *:
    """
    #ifdef __OPTIMIZE__
    static const int nk_optimized = 1;
    #else
    static const int nk_optimized = 0;
    #endif
    #ifdef NDEBUG
    static const int nk_ndebug = 1;
    #else
    static const int nk_ndebug = 0;
    #endif
    """
    const int nk_optimized
    const int nk_ndebug
def compiled_with():
    return ("optimized" if nk_optimized else "-O0") + " " + ("NDEBUG" if nk_ndebug else "asserts")'''


def test_the_course_kernel_is_the_environments_python():
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert Path(spec.resource_dir).resolve().is_relative_to(Path(sys.prefix).resolve()), spec.resource_dir
    assert Path(spec.argv[0]).resolve() == Path(sys.executable).resolve()
    assert spec.display_name == "Python 3 (needle_kernels)"


def test_a_cython_cell_compiles_optimized_and_without_debug_information(tmp_path, monkeypatch):
    # fresh IPython folders, so the cell is compiled here and not found from an earlier run
    # (IPython keeps compiled cells under its own folder or under $XDG_CACHE_HOME, by version)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CFLAGS", raising=False)
    cell = f"%%cython\n# {uuid.uuid4().hex}\n{COMPILED_WITH}"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in (
        "%load_ext Cython", cell,
        "import sys\nprint(compiled_with())\nprint(sys.modules[compiled_with.__module__].__file__)")])
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for o in nb.cells[2].outputs).splitlines()
    assert printed[0] == "optimized NDEBUG"
    module = Path(printed[1])
    assert module.is_relative_to(tmp_path) and module.suffix == ".so", module
    assert_built_without_debug_information(module)
