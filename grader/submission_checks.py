"""What is wrong with a submitted notebook before nbgrader sees it, in words for the student.

nbgrader already repairs most of it (restores locked cells and deleted tests, drops
duplicated ids, overwrites the kernelspec); these checks only make the repairs
visible, and find the one case nbgrader cannot grade: a file that is not a notebook.
"""

from collections import Counter
from pathlib import Path

import nbformat


def read_notebook(path: Path):
    """(notebook, None) or (None, reason) for a file that is not a readable notebook."""
    try:
        return nbformat.read(str(path), as_version=4), None
    except Exception as err:  # noqa: BLE001 - JSON, schema and encoding errors all mean "unreadable"
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"


def check_notebook(nb, name: str, kernel_name: str, expected_ids) -> list:
    """Notes about one readable notebook: kernel, duplicated and missing graded cells."""
    found = []
    kernel = nb.metadata.get("kernelspec", {}).get("name")
    if kernel != kernel_name:
        found.append(f"{name}: the notebook asks for kernel {kernel!r}; it was graded with the "
                     f"course kernel {kernel_name!r}")
    ids = Counter(cell.metadata.get("nbgrader", {}).get("grade_id")
                  for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade_id"))
    for grade_id, count in sorted(ids.items()):
        if count > 1:
            found.append(f"{name}: grade id {grade_id!r} appears {count} times; only one copy "
                         "is graded")
    missing = sorted(set(expected_ids) - set(ids))
    if missing:
        found.append(f"{name}: cells {', '.join(missing)} were deleted; they were restored from "
                     "the assignment and graded")
    return found


def inspect(course, assignment: str, student: str):
    """(unreadable notebook notes, other notes) for one collected submission."""
    from grader.settings import Sandbox

    kernel_name = course.section(Sandbox).kernel_name
    folder = course.path("submitted", student, assignment)
    unreadable, other = [], []
    with course.gradebook() as gb:
        notebooks = [(nb.name, [c.name for c in nb.grade_cells] + [c.name for c in nb.task_cells])
                     for nb in gb.find_assignment(assignment).notebooks]
    for name, expected in notebooks:
        path = folder / f"{name}.ipynb"
        if not path.exists():
            other.append(f"{name}.ipynb was not submitted: it scores 0")
            continue
        nb, error = read_notebook(path)
        if nb is None:
            unreadable.append(f"{name}.ipynb is not a valid notebook ({error}): it scores 0")
        else:
            other.extend(check_notebook(nb, name, kernel_name, expected))
    return unreadable, other
