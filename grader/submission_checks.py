"""What is wrong with a submitted notebook before nbgrader sees it, in words for the student.

nbgrader already repairs most of it (restores locked cells and deleted tests, drops
duplicated ids, overwrites the kernelspec); these checks only make the repairs
visible, and find the cases nbgrader cannot grade: a file that is not a notebook, or
no file at all.

The repairs are noted by `NoteSubmissionChecks`, the first of the course's sanitize
preprocessors, so they are noted however autograde is started: `grader autograde`,
`nbgrader autograde` or the formgrader's button.
"""

import os
from collections import Counter
from pathlib import Path

import nbformat

from grader import notes
from grader.nbgrader_fixes import GraderPreprocessor


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
    """(unreadable notebook notes, missing notebook notes) for one collected submission."""
    folder = course.path("submitted", student, assignment)
    unreadable, missing = [], []
    with course.gradebook() as gb:
        names = [nb.name for nb in gb.find_assignment(assignment).notebooks]
    for name in names:
        path = folder / f"{name}.ipynb"
        if not path.exists():
            missing.append(f"{name}.ipynb was not submitted: it scores 0")
            continue
        nb, error = read_notebook(path)
        if nb is None:
            unreadable.append(f"{name}.ipynb is not a valid notebook ({error}): it scores 0")
    return unreadable, missing


class NoteSubmissionChecks(GraderPreprocessor):
    """Sanitize step: note, for the student's feedback, what nbgrader is about to repair."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook
        from nbgrader.coursedir import CourseDirectory

        from grader.settings import Sandbox

        info = resources.get("nbgrader", {})
        if not (info.get("student") and info.get("assignment") and info.get("db_url")):
            return nb, resources
        course_id = CourseDirectory(config=self.config).course_id
        with Gradebook(info["db_url"], course_id) as gb:
            graded = gb.find_notebook(info["notebook"], info["assignment"])
            expected = [c.name for c in graded.grade_cells] + [c.name for c in graded.task_cells]
        found = check_notebook(nb, info["notebook"], Sandbox(config=self.config).kernel_name, expected)
        # nbgrader's converters run with the course root as the working directory
        notes.record(os.getcwd(), info["assignment"], info["student"], f"checks:{info['notebook']}", found)
        return nb, resources
