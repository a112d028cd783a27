"""Every lecture and lab notebook runs top to bottom without an error, in about a minute.

With ``NEEDLE_DATA_DIR`` pointing at the real data the notebooks train on real MNIST (and PTB);
without it they fall back to generated data, so this test runs anywhere. When the real MNIST
files are there, a notebook that fell back anyway fails (``load_mnist_split`` prints
``FALLBACK_NOTICE`` whenever it falls back). A lecture that takes longer than
``$NEEDLE_LECTURE_SECONDS`` (default 150 s, a generous margin over the one-minute target) fails too.
"""
import os
from pathlib import Path

import pytest

from nbhelpers import REPO, lecture_notebooks
from needle_kernels.data import paths
from needle_kernels.data.loaders import FALLBACK_NOTICE

LECTURE_SECONDS = float(os.environ.get("NEEDLE_LECTURE_SECONDS", "150"))


def real_mnist_available():
    """True when ``$NEEDLE_DATA_DIR`` is set and holds the real MNIST test images."""
    root = os.environ.get(paths.ENV_VAR)
    return bool(root) and (Path(root).expanduser() / "mnist" / "t10k-images-idx3-ubyte.gz").is_file()


def output_text(nb):
    """All text a notebook's code cells printed (streams, results, errors)."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                parts.append(o.get("text", ""))
            elif o.get("output_type") in ("execute_result", "display_data"):
                parts.append(str(o.get("data", {}).get("text/plain", "")))
            elif o.get("output_type") == "error":
                parts.append(o.get("evalue", ""))
    return "".join(parts)


EXPECTED = [
    "02_softmax_regression", "03_manual_neural_networks", "04_automatic_differentiation",
    "05_autodiff_implementation", "06_fully_connected_optimization_initialization",
    "07_nn_library_abstractions", "08_nn_implementation", "lab_custom_operator",
]


def test_lecture_notebooks_are_present_and_ordered():
    names = [p.stem for p in lecture_notebooks()]
    missing = [n for n in EXPECTED if n not in names]
    assert not missing, f"missing lecture notebooks: {missing}"
    numbered = [n for n in names if n[:2].isdigit()]
    assert numbered == sorted(numbered)


@pytest.mark.slow
@pytest.mark.parametrize("path", lecture_notebooks(), ids=lambda p: p.stem)
def test_lecture_executes(path, record_property):
    from nbhelpers import execute_notebook

    nb, seconds = execute_notebook(path, timeout=600)
    record_property("seconds", round(seconds, 1))
    print(f"{path.relative_to(REPO)} executed in {seconds:.1f}s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert seconds <= LECTURE_SECONDS, (
        f"{path.stem} took {seconds:.0f}s to execute, over the {LECTURE_SECONDS:.0f}s limit "
        f"(target: about a minute; override with NEEDLE_LECTURE_SECONDS)")
    if real_mnist_available():
        fell_back = [line for line in output_text(nb).splitlines() if FALLBACK_NOTICE in line]
        assert not fell_back, (f"{path.stem} used generated data although {paths.ENV_VAR} holds real MNIST: "
                               f"{fell_back}")
