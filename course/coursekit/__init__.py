"""The course's side of grading: what the notebooks of assignments import.

``coursekit.start`` withholds the package's versions of the parts a task asks for (see
``coursekit.withhold``); ``coursekit.grading`` scopes each test to the parts it tests;
``coursekit.checks`` holds the checks test cells re-import, so a notebook that redefines
them changes nothing. The library itself knows nothing of grading.
"""
from .withhold import WithheldError, grading, parts, reference, start, students

__all__ = ["WithheldError", "grading", "parts", "reference", "start", "students"]
