"""Grading notes: what the grader noticed about a submission, shown in its feedback.

One JSON file per student and assignment under `.grader/notes/`, made of named
sections (`timestamp`, `kernel`, `execution:ps1`, ...) so that a re-run replaces a
section instead of repeating it.
"""

import json
import os
from pathlib import Path


def _path(course_root, assignment, student) -> Path:
    return Path(course_root) / ".grader" / "notes" / assignment / f"{student}.json"


def load(course_root, assignment, student) -> dict:
    path = _path(course_root, assignment, student)
    return json.loads(path.read_text()) if path.exists() else {}


def record(course_root, assignment, student, section, lines) -> None:
    """Replace `section` with `lines` (an empty list removes it)."""
    path = _path(course_root, assignment, student)
    data = load(course_root, assignment, student)
    if lines:
        data[section] = list(lines)
    else:
        data.pop(section, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def lines(course_root, assignment, student) -> list:
    """All notes of a submission, in a stable order."""
    data = load(course_root, assignment, student)
    return [line for section in sorted(data) for line in data[section]]
