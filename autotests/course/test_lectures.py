"""Every lecture and lab notebook runs top to bottom without an error, in about a minute.

With ``NEEDLE_DATA_DIR`` pointing at the real data the notebooks train on real MNIST (and PTB);
without it they fall back to generated data, so this test runs anywhere. When the real MNIST
files are there, a notebook that fell back anyway fails (``load_mnist_split`` prints
``FALLBACK_NOTICE`` whenever it falls back). A lecture that takes longer than
``$NEEDLE_LECTURE_SECONDS`` (default 150 s, a generous margin over the one-minute target) fails too.
"""
import pytest

from nbhelpers import REPO, assert_ran_as_a_lecture, lecture_notebooks


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
    assert_ran_as_a_lecture(path.stem, nb, seconds)
