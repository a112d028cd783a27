"""`grader feedback ASSIGNMENT`: nbgrader's generate_feedback and release_feedback, with
the results of hidden tests but not their source, and the grading notes on top
(both are feedback preprocessors of the course config, so the formgrader's buttons
give the same pages).

The hidden part of a test cell is replaced by a placeholder line and that cell's
outputs by its outcome alone: the class of its first error, if any (tracebacks quote
the failing source, and printed output or an error message can carry it too).
`c.FeedbackPolicy.reveal_hidden_tests = True` shows everything.
"""

import html
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from nbgrader.preprocessors import ClearHiddenTests

from grader.nbgrader_fixes import GraderPreprocessor

from grader import GraderError, notes

PLACEHOLDER = "# [hidden tests: their source is not shown; their result is below]"


class HideHiddenTests(GraderPreprocessor):
    """Withhold hidden-test source from feedback, keep their outcome."""

    def preprocess(self, nb, resources):
        if self.config.get("FeedbackPolicy", {}).get("reveal_hidden_tests", False):
            return nb, resources
        # the same markers nbgrader's ClearHiddenTests uses (configurable there)
        markers = self.config.get("ClearHiddenTests", {})
        begin = markers.get("begin_test_delimeter", ClearHiddenTests.begin_test_delimeter.default_value)
        end = markers.get("end_test_delimeter", ClearHiddenTests.end_test_delimeter.default_value)
        for cell in nb.cells:
            if cell.cell_type == "code" and begin in cell.source:
                cell.source = _strip_region(cell.source, begin, end)
                cell.outputs = _outcome_only(cell.get("outputs", []))
        return nb, resources


def _outcome_only(outputs):
    """Outputs of a cell with hidden tests, reduced to whether it failed and with what.

    Anything else a test cell shows could carry the hidden source: code under test can
    print `In[-1]` (the running cell) or raise an exception whose message is that text.
    So printed output, displays and error messages are dropped; the error's class stays.
    """
    names = [out.get("ename", "Error") for out in outputs if out.get("output_type") == "error"]
    if not names:
        return []
    return [nbformat.v4.new_output("error", ename=names[0], evalue="",
                                   traceback=[f"{names[0]}: a hidden test failed (its details are not shown)"])]


def _strip_region(source, begin, end):
    kept, hiding = [], False
    for line in source.splitlines():
        if begin in line:
            hiding = True
            kept.append(line[: len(line) - len(line.lstrip())] + PLACEHOLDER)
        elif end in line and hiding:
            hiding = False
        elif not hiding:
            kept.append(line)
    return "\n".join(kept)


class ShowGradingNotes(GraderPreprocessor):
    """Put the submission's grading notes at the top of its feedback.

    A feedback preprocessor, so `grader feedback`, `nbgrader generate_feedback` and the
    formgrader's button all show them.
    """

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        if not (info.get("student") and info.get("assignment")):
            return nb, resources
        # nbgrader's converters run with the course root as the working directory
        lines = notes.lines(os.getcwd(), info["assignment"], info["student"])
        if lines:
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(notes_html(lines)))
        return nb, resources


def notes_html(lines) -> str:
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return ('<div class="grader-notes" style="border:2px solid #c60;padding:0.5em 1em;margin:1em">'
            f"<strong>Grading notes</strong><ul>{items}</ul></div>")


def _placeholder_feedback(course, assignment, student):
    """Feedback for a submission nbgrader could not read: the notes alone."""
    lines = notes.lines(course.root, assignment, student)
    folder = course.path("feedback", student, assignment)
    folder.mkdir(parents=True, exist_ok=True)
    submitted = course.path("submitted", student, assignment)
    for name in ("timestamp.txt", "submission_secret.txt"):
        if (submitted / name).exists():
            shutil.copy(submitted / name, folder / name)
    with course.gradebook() as gb:
        names = [nb.name for nb in gb.find_assignment(assignment).notebooks]
    for name in names:
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(name)}</title>"
                f"</head><body>{notes_html(lines) if lines else ''}"
                f"<h1>{html.escape(assignment)} / {html.escape(name)}</h1>"
                f"<p>Score: 0</p></body></html>")
        (folder / f"{name}.html").write_text(page)


@dataclass
class FeedbackReport:
    assignment: str
    generated: list = field(default_factory=list)
    released: bool = False


def feedback(course, assignment, release=True, log=None) -> FeedbackReport:
    report = FeedbackReport(assignment=assignment)
    students = sorted(p.parent.name for p in course.path("submitted").glob(f"*/{assignment}"))
    if not students:
        raise GraderError(f"no collected submissions of {assignment!r}")
    api = course.api()
    _succeeded("generate_feedback", api.generate_feedback(assignment, force=True))
    for student in students:
        if not course.path("autograded", student, assignment).exists():
            _placeholder_feedback(course, assignment, student)
        if course.path("feedback", student, assignment).exists():
            report.generated.append(student)
    if release:
        _succeeded("release_feedback", api.release_feedback(assignment))
        report.released = True
    return report


def rerelease(course, assignment, student) -> bool:
    """Generate and release `student`'s feedback of `assignment` again, after their grade changed.

    Only feedback released before is released again: the page replaces the one in the
    exchange under the same name, so nbgrader's assignment list (`feedback_updated`, the
    checksum of the student's copy against the exchange's) and `grader list` tell the
    student it changed. Returns whether it was released again.
    """
    released = Path(course.exchange_root) / course.course_id / "feedback"
    if not course.path("feedback", student, assignment).exists() or not released.is_dir():
        return False
    api = course.api()
    if course.path("autograded", student, assignment).exists():
        _succeeded("generate_feedback", api.generate_feedback(assignment, student_id=student, force=True), student)
    else:
        _placeholder_feedback(course, assignment, student)
    _succeeded("release_feedback", api.release_feedback(assignment, student_id=student), student)
    return True


def _succeeded(step, result, student=None):
    """Raise with nbgrader's log when one of its API steps failed."""
    if not result.get("success"):
        whom = f" for {student}" if student else ""
        raise GraderError(f"nbgrader {step} failed{whom}:\n{result.get('log', '')}{result.get('error', '')}")
