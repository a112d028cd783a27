"""Every notebook of the repository is committed clean: no outputs, no execution counts.

Outputs in version control go stale, hide diffs and leak local paths; CI executes the notebooks
instead (``test_lectures.py``, ``test_assignments.py``). Strip them with
``jupyter nbconvert --clear-output --inplace NOTEBOOK`` before committing.
"""
import json

import nbformat
import pytest

from nbhelpers import REPO, all_notebooks

NOTEBOOKS = all_notebooks()


def _id(p):
    return str(p.relative_to(REPO))


def test_the_course_has_notebooks():
    assert any("course/lectures" in _id(p) for p in NOTEBOOKS), "no lecture notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_notebook_is_valid_and_clean(path):
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)  # a merge conflict or a truncated file fails here, with the file named
    nb = nbformat.from_dict(raw)
    nbformat.validate(nb)
    dirty = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            dirty.append(f"cell {i}: {len(cell.outputs)} output(s)")
        if cell.get("execution_count") is not None:
            dirty.append(f"cell {i}: execution_count={cell.execution_count}")
        if "execution" in cell.get("metadata", {}):
            dirty.append(f"cell {i}: execution timing metadata")
    assert not dirty, (f"{_id(path)} is not clean; run `jupyter nbconvert --clear-output --inplace {_id(path)}`:\n"
                       + "\n".join(dirty))
    assert "widgets" not in nb.metadata, "saved widget state in notebook metadata"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if "course/" in _id(p)], ids=_id)
def test_course_notebook_uses_the_python3_kernel(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
