"""Grading notes: what the grader noticed about a submission, shown in its feedback.

One JSON file per student and assignment under `.grader/notes/`, made of named
sections (`timestamp`, `kernel`, `execution:ps1`, ...) so that a re-run replaces a
section instead of repeating it. Sections recorded as private (`instructor:...`, such
as similarity with the package's code or another student's) are for the instructor:
`grader export` and `grader similarity` show them, feedback never does.
"""

import json
from pathlib import Path

from grader.state import CourseState, write_atomic


def _path(course_root, assignment, student) -> Path:
    return CourseState(course_root).notes_file(assignment, student)


def load(course_root, assignment, student) -> dict:
    path = _path(course_root, assignment, student)
    return json.loads(path.read_text()) if path.exists() else {}


PRIVATE = "instructor:"


def record(course_root, assignment, student, section, lines, private=False) -> None:
    """Replace `section` with `lines` (an empty list removes it); `private`: instructor only."""
    section = PRIVATE + section if private else section
    path = _path(course_root, assignment, student)
    data = load(course_root, assignment, student)
    if lines:
        data[section] = list(lines)
    else:
        data.pop(section, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def lines(course_root, assignment, student) -> list:
    """The notes a student may see (the private sections left out), in a stable order."""
    data = load(course_root, assignment, student)
    return [line for section in sorted(data) if not section.startswith(PRIVATE) for line in data[section]]


def instructor_lines(course_root, assignment, student) -> list:
    """The private notes of a submission, for the instructor only."""
    data = load(course_root, assignment, student)
    return [line for section in sorted(data) if section.startswith(PRIVATE) for line in data[section]]
